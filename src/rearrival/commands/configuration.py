"""The compiled configuration a verb's ``--buckets``/``--batch-size``/``--slots`` options
name (``rearrival run``, ``emulate-server``, ``rbln compile``): one parser, so a bad knob
is one line naming the option at fault and the fix whichever verb was given it."""

from __future__ import annotations

from rearrival.model.configuration import ConfigurationError, RblnConfiguration

# The configuration type's field names -> the options that set them.
OPTIONS = {"buckets": "--buckets", "batch_size": "--batch-size", "slots": "--slots"}


def configuration_option(
    buckets: str, batch_size: int, slots: int | None = None, name: str = "adhoc"
) -> RblnConfiguration:
    """``--buckets 1,2,4,8 --batch-size 8 [--slots S]`` as a configuration (slots default
    to batch_size, docs/DESIGN.md §1)."""
    try:
        sizes = tuple(int(part) for part in buckets.split(","))
    except ValueError:
        raise ConfigurationError(
            f"--buckets '{buckets}': use comma-separated integers in ascending order, e.g. 1,2,4,8",
            ("buckets",),
        ) from None
    try:
        return RblnConfiguration(sizes, batch_size, slots, name=name)
    except ConfigurationError as exc:
        flags = "/".join(OPTIONS.get(field, field) for field in exc.fields)
        raise ConfigurationError(f"{flags}: {exc}" if flags else str(exc), exc.fields) from None
