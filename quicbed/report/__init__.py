"""The report: HTML page, tables and figures, drawn from the store only."""
