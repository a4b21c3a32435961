"""A results folder: its store, layout, records and provenance; merging and exporting it.
What is computed from the records lives above: statistics in quicbed.analysis, figures
in quicbed.report."""
