"""execd.policy."""
