"""One base class for every error whose message is complete advice for the user.

The CLI turns these into a single line on stderr (file, field, fix) and exit code 2;
anything else is a bug and keeps its traceback.
"""


class RearrivalError(Exception):
    """Bad input or an unusable result; the message names the file, the field and the fix."""


class StageError(RearrivalError):
    """A stage's inputs are missing or inconsistent; the message names the file and fix.

    It lives here, not with the workflow, because the layers below the workflow read
    stage outputs too (Parquet frames, compile records, registrations) and refuse the
    same way."""
