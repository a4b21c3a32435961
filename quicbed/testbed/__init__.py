"""Testbed backends: where the server, bridge and client roles run."""
