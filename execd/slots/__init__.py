"""execd.slots."""
