"""One base class for every error whose message is complete advice for the user.

The CLI turns these into a single line on stderr (file, field, fix) and exit code 2;
anything else is a bug and keeps its traceback.
"""

import errno


class RearrivalError(Exception):
    """Bad input or an unusable result; the message names the file, the field and the fix."""


class StageError(RearrivalError):
    """A stage's inputs are missing or inconsistent; the message names the file and fix.

    It lives here, not with the workflow, because the layers below the workflow read
    stage outputs too (Parquet frames, compile records, registrations) and refuse the
    same way."""


# Why a write failed that the user, not the code, must fix: no room (a full disk or a
# quota), or no right to write there (permissions, a read-only mount).
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class DiskError(RearrivalError):
    """A result could not be written: the disk is full or the folder is not writable;
    the message names the path, what was kept and the fix."""


def disk_problem(exc: OSError) -> str | None:
    """One line for an OSError the user fixes (full disk, quota, permissions, read-only),
    naming the path; None for any other OSError (a bug, which keeps its traceback)."""
    where = exc.filename or "a results file"
    if exc.errno in DISK_FULL:
        return (
            f"cannot write {where}: {exc.strerror}; free space on that disk (or write "
            "elsewhere) and rerun"
        )
    if exc.errno in UNWRITABLE:
        return (
            f"cannot write {where}: {exc.strerror}; make the folder writable for this user "
            "or give an output path you can write"
        )
    return None
