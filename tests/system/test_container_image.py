"""The Dockerfile (issue 6, point 7): the image it builds runs execd as its entrypoint.

The image is built with buildah (no Docker engine here) from the cached bookworm rootfs
that `python tests/tiers.py setup` makes, in a private vfs storage removed afterwards.
The build needs no network: the wheels of execd and its dependencies are made on this
host into the build context's wheels/, and the base already has python3-venv, so the
Dockerfile skips both apt and PyPI. Runs as root (the system tier); under
EXECD_REQUIRE_ALL_TIERS a missing buildah or base rootfs fails instead of skipping.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiers

REPO = tiers.REPO
# What the Dockerfile reads from the build context (.dockerignore lets only these in).
CONTEXT_FILES = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")
CONTEXT_DIRS = ("execd", "etc/execd")
# The daemon's start, status and graceful exit, run as one script in one container.
ENTRYPOINT_SCRIPT = r"""
"$@" & pid=$!
tries=0
until out=$(execd status -af Name SlotType 2>/dev/null) && [ -n "$out" ]; do
    tries=$((tries + 1))
    if [ $tries -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
        echo "execd never answered"; kill -KILL $pid 2>/dev/null; exit 97
    fi
    sleep 0.1
done
echo "status: $out"
kill -TERM $pid
wait $pid
echo "exit: $?"
"""


class Buildah:
    """buildah on a private vfs storage under one directory."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.base = [
            "buildah",
            "--root", str(top / "storage"),
            "--runroot", str(top / "run"),
            "--storage-driver", "vfs",
        ]  # fmt: skip

    def __call__(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *argv: str, timeout: float = 300) -> str:
        done = self(*argv, timeout=timeout)
        assert done.returncode == 0, f"buildah {' '.join(argv)}: {_output(done)}"
        return done.stdout

    def run(self, ctr: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self("run", "--isolation", "chroot", ctr, "--", *argv, timeout=timeout)


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"


def _unavailable() -> str | None:
    if shutil.which("buildah") is None:
        return "buildah is not installed (apt package buildah)"
    root = tiers.image_base_root()
    if not tiers.image_base_built(root):
        return f"no completed image base rootfs at {root}"
    return None


def _context(top: Path) -> Path:
    """A build context like a checkout's, plus wheels/ made here for the image's Python."""
    ctx = top / "context"
    ctx.mkdir()
    for name in CONTEXT_FILES:
        shutil.copy2(REPO / name, ctx / name)
    for name in CONTEXT_DIRS:
        shutil.copytree(REPO / name, ctx / name, ignore=shutil.ignore_patterns("__pycache__"))
    # The base's python3 is bookworm's 3.11; wheels built by another Python would not fit.
    assert sys.version_info[:2] == (3, 11), "the image is bookworm's Python 3.11; run with 3.11"
    source = top / "source"
    shutil.copytree(ctx, source)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(ctx / "wheels"),
         str(source)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}"
    return ctx


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[Buildah, str]]:
    reason = _unavailable()
    if reason is not None:
        hint = "; run `python tests/tiers.py setup` as root"
        if tiers.require_all():
            pytest.fail(f"{reason}{hint} (EXECD_REQUIRE_ALL_TIERS is set)", pytrace=False)
        pytest.skip(reason + hint)
    top = Path(tempfile.mkdtemp(prefix="execd-image-test-", dir="/var/tmp"))
    buildah = Buildah(top)
    try:
        ctx = _context(top)
        # The Dockerfile's FROM, made locally from the cached rootfs (no registry here).
        ctr = buildah.ok("from", "scratch").strip()
        buildah.ok("copy", ctr, f"{tiers.image_base_root()}/", "/")
        buildah.ok("commit", "--rm", ctr, "localhost/debian:bookworm-slim")
        tag = f"localhost/execd-test:{secrets.token_hex(4)}"
        buildah.ok("bud", "--isolation", "chroot", "--pull=never", "-t", tag, str(ctx),
                   timeout=600)  # fmt: skip
        yield buildah, tag
    finally:
        buildah("rm", "--all")
        buildah("rmi", "--all", "--force")
        tiers.unmount_all(top)
        subprocess.run(["rm", "-rf", "--one-file-system", str(top)], check=False)


@pytest.fixture(scope="module")
def container(image: tuple[Buildah, str]) -> Iterator[tuple[Buildah, str]]:
    """One container for the module (each costs a full copy of the image on vfs)."""
    buildah, tag = image
    ctr = buildah.ok("from", "--pull=never", tag).strip()
    try:
        yield buildah, ctr
    finally:
        buildah("rm", ctr)


def test_the_image_config_checks_clean(container: tuple[Buildah, str]) -> None:
    buildah, ctr = container
    done = buildah.run(ctr, "execd", "config-check")
    assert done.returncode == 0, _output(done)


def test_the_image_would_advertise_one_partitionable_slot(
    container: tuple[Buildah, str],
) -> None:
    buildah, ctr = container
    done = buildah.run(ctr, "execd", "status", "--local", "-json")
    assert done.returncode == 0, _output(done)
    ads = json.loads(done.stdout)
    assert [(ad["Name"].split("@")[0], ad["SlotType"]) for ad in ads] == [
        ("slot1", "Partitionable")
    ]


def test_the_entrypoint_serves_status_and_exits_0_on_sigterm(
    container: tuple[Buildah, str],
) -> None:
    buildah, ctr = container
    config = json.loads(buildah.ok("inspect", "--type", "container", ctr))
    entrypoint = config["OCIv1"]["config"]["Entrypoint"]
    assert entrypoint == ["execd", "run"]
    done = buildah.run(ctr, "sh", "-c", ENTRYPOINT_SCRIPT, "entrypoint", *entrypoint,
                       timeout=180)  # fmt: skip
    assert done.returncode == 0, _output(done)
    status = [line for line in done.stdout.splitlines() if line.startswith("status: ")]
    assert status and status[0].split()[2:] == ["Partitionable"], _output(done)
    assert "exit: 0" in done.stdout.splitlines(), _output(done)
