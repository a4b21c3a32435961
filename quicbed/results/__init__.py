"""A results folder: its store, layout, provenance; merging and exporting it."""
