"""The GPU bundle's trace (tests/gpu/chroot_prune.py trace_start/trace_collect) on this
machine's real filesystem: a file read after trace-start is listed, one left alone is not,
whatever the mount's relatime rule (the mark is older than a day and than the ctime)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.gpu import chroot_prune


def test_a_file_read_after_trace_start_is_collected_and_an_unread_one_is_not(
    tmp_path: Path,
) -> None:
    root = tmp_path / "chroot"
    for rel in ("usr/bin/sleep", "usr/bin/unused", "usr/lib/libread.so", "etc/passwd",
                "var/lib/execd-pool/log/MasterLog"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    os.symlink("sleep", root / "usr" / "bin" / "sleep-link")
    mtime = (root / "usr/bin/unused").stat().st_mtime_ns

    assert chroot_prune.trace_start(root) == 5
    assert (root / "usr/bin/unused").stat().st_mtime_ns == mtime  # only the access time
    for rel in ("usr/bin/sleep-link", "usr/lib/libread.so", "etc/passwd",
                "var/lib/execd-pool/log/MasterLog"):  # fmt: skip
        (root / rel).read_text()

    # /etc and the pool's LOCAL_DIR are kept or remade anyway: not listed.
    assert chroot_prune.trace_collect(root) == ["usr/bin/sleep", "usr/lib/libread.so"]
