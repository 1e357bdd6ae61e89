"""execd.daemon."""
