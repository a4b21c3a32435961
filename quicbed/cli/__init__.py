"""The ``quicbed`` command line: its commands, shared options and flag reference."""
