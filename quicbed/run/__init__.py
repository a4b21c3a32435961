"""Measuring: one cell, a transfer cell, a sweep over one or several testbeds."""
