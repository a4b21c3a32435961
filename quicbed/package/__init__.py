"""Replication packages: built, checked for secrets, verified and rerun."""
