"""The one error type users see.

Every bad input ends as a single line that names the offending value; the CLI
prints it and exits 2 without a traceback, so a typo never looks like a crash.
"""


class QuicbedError(Exception):
    """A user-facing error whose message is one line naming the bad value."""
