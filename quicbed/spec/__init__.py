"""What a sweep or a cell asks for: arms, cells, sweep specs, pages and objects."""
