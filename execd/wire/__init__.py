"""execd.wire."""
