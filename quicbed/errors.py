"""The one error type users see.

Every bad input ends as a single line that names the offending value; the CLI
prints it and exits 2 without a traceback, so a typo never looks like a crash.
"""


class QuicbedError(Exception):
    """A user-facing error whose message is one line naming the bad value."""


def from_validation(exc: Exception, what: str) -> QuicbedError:
    """Turn pydantic's multi-line ValidationError into one line: ``what: key: problem``."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return QuicbedError(f"{what}: {exc}")
    e = errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    msg = str(e["msg"]).removeprefix("Value error, ")
    # pydantic's own messages ("Input should be a finite number") do not say what was
    # given; ours (value_error) already do. A whole mapping is no use on one line.
    if e["type"] != "value_error" and isinstance(e.get("input"), (str, int, float)):
        got = repr(e["input"])
        msg = f"{msg} (got {got if len(got) <= 80 else got[:77] + '...'})"
    return QuicbedError(f"{what}: {loc + ': ' if loc else ''}{msg}")
