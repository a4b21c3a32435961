"""quicbed: testbed-as-code for QUIC vs TCP web performance research."""

__version__ = "0.1.0"
