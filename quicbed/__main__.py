"""``python -m quicbed``: the same as the ``quicbed`` command."""

from quicbed.cli.main import main

main()
