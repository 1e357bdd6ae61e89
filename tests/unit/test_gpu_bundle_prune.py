"""The GPU bundle's reading of a chroot (tests/gpu/chroot_prune.py): links are followed as
the chroot sees them, so the bundle keeps the chroot's files and never the host's."""

from __future__ import annotations

import os
from pathlib import Path

from tests.gpu import chroot_prune


def make_tree(root: Path) -> None:
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libfoo.so.1.2").write_bytes(b"\x7fELF")
    os.symlink("libfoo.so.1.2", lib / "libfoo.so.1")
    os.symlink("usr/lib", root / "lib")  # merged /usr, relative
    (root / "lib64").mkdir()
    os.symlink("/usr/lib/x86_64-linux-gnu/libfoo.so.1", root / "lib64" / "ld.so")  # absolute
    (root / "etc").mkdir()
    # A path the host has and the tree has not: the link must not lead out of the tree.
    outside = root.parent / "host-file"
    outside.write_text("the host's")
    os.symlink(str(outside), root / "etc" / "host-link")
    os.symlink("loop-b", root / "etc" / "loop-a")
    os.symlink("loop-a", root / "etc" / "loop-b")


def test_absolute_links_resolve_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_tree(root)
    real = "usr/lib/x86_64-linux-gnu/libfoo.so.1.2"
    assert chroot_prune.resolve(root, "/lib64/ld.so") == real
    assert chroot_prune.resolve(root, "/lib/x86_64-linux-gnu/libfoo.so.1") == real
    assert chroot_prune.resolve(root, "lib/x86_64-linux-gnu/../x86_64-linux-gnu") == (
        "usr/lib/x86_64-linux-gnu"
    )


def test_links_out_of_the_tree_or_in_a_loop_resolve_to_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_tree(root)
    assert chroot_prune.resolve(root, "/etc/host-link") is None
    assert chroot_prune.resolve(root, "/etc/loop-a") is None
    assert chroot_prune.resolve(root, "/usr/lib/missing.so") is None


def test_documentation_and_package_databases_are_dropped_not_their_neighbours() -> None:
    assert chroot_prune.dropped("usr/share/doc/condor/copyright")
    assert chroot_prune.dropped("var/lib/apt/lists/x")
    assert chroot_prune.dropped("var/lib/execd-pool")
    assert not chroot_prune.dropped("usr/share/documentation")
    assert not chroot_prune.dropped("usr/lib/x86_64-linux-gnu/libc.so.6")
    assert not chroot_prune.dropped("usr/libexec/condor/condor_gpu_discovery")
