"""Importing execd's ClassAd layer leaves CONDOR_CONFIG as it was."""

from __future__ import annotations

import os
import subprocess
import sys


def run(env: dict[str, str]) -> str:
    code = "import os, execd.classads; print(os.environ.get('CONDOR_CONFIG'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def test_unset_condor_config_stays_unset() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
    assert run(env) == "None"


def test_set_condor_config_is_kept() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
    env["CONDOR_CONFIG"] = "/etc/execd/execd_config"
    assert run(env) == "/etc/execd/execd_config"


def test_htcondor_does_not_judge_execds_config(tmp_path: object) -> None:
    """htcondor2 would parse CONDOR_CONFIG on import and exit(1) on a line it rejects;
    execd's own parser must be the one that reports a bad config (file:line, its words)."""
    from pathlib import Path

    config = Path(str(tmp_path)) / "execd_config"
    config.write_text("NUM_CPUS = 2\nthis line is not configuration\n")
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
    env["CONDOR_CONFIG"] = str(config)
    done = subprocess.run([sys.executable, "-m", "execd", "config-check"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert f"{config}:2: expected 'NAME = value'" in done.stderr
    assert "Configuration Error" not in done.stdout + done.stderr
