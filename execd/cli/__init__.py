"""execd.cli."""
