"""Helpers for the starter's system tests: start a starter, wait for it, read its files."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from execd.starter.launcher import StarterHandle, launch_starter
from execd.starter.spec import StarterSpec

NOBODY = 65534


def start(spec: StarterSpec, workdir: Path) -> StarterHandle:
    return launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"))


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def status(path: Path) -> dict[str, object]:
    """The starter's latest published measurements ({} before the first one)."""
    try:
        data: dict[str, object] = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return data


def finished(handle: StarterHandle, workdir: Path) -> dict[str, object]:
    rc = handle.wait(timeout=30)
    log = (workdir / "starter.log").read_text()
    assert rc == 0, log
    return handle.report()
