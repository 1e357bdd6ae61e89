"""execd.hooks."""
