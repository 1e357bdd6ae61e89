"""execd.claims."""
