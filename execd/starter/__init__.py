"""execd.starter."""
