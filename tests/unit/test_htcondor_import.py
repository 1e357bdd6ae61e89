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
