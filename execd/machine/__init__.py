"""execd.machine."""
