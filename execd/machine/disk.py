"""Disk for slots: free space of the EXECUTE directory's filesystem, in KB."""

from __future__ import annotations

from execd.errors import ResourceError
from execd.machine.reader import HostReader


def detect_disk_kb(reader: HostReader, execute_dir: str, *, reserved_disk_mb: int = 0) -> int:
    """Free KB on EXECUTE minus RESERVED_DISK (which HTCondor gives in MB); never below 0.

    A missing EXECUTE directory is an error: slots would advertise disk they do not have.
    """
    free = reader.free_disk_kb(execute_dir)
    if free is None:
        raise ResourceError(
            f"EXECUTE directory {execute_dir!r} does not exist or cannot be examined"
        )
    return max(0, free - reserved_disk_mb * 1024)
