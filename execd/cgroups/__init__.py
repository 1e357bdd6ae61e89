"""execd.cgroups."""
