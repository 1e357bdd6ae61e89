"""HTCondor's own config reader as the reference for execd's: htcondor2's `param`, run in a
subprocess (it is process-global and exits the process on a syntax error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REFERENCE = """
import json, sys
import htcondor2
names, subsystem, raw = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "raw"
if subsystem:
    htcondor2.set_subsystem(subsystem)
    htcondor2.reload_config()
out = {}
for name in names:
    value = htcondor2.param.get(name)
    typed = value is not None and not isinstance(value, str)
    out[name] = [value if raw or value is None else str(value), typed]
print(json.dumps(out))
"""


def reference_values(
    config_file: Path, names: list[str], env: Mapping[str, str] | None = None
) -> dict[str, tuple[str | None, bool]]:
    """NAME -> (its value as HTCondor reads CONFIG_FILE, whether param typed it); ENV is
    added to the reader's environment."""
    found = _run(config_file, names, env, subsystem="", raw=False)
    return {name: (value, typed) for name, (value, typed) in found.items()}


def typed_reference_values(
    config_file: Path, names: list[str], subsystem: str
) -> dict[str, str | bool | int | float | None]:
    """NAME -> its value as `param` gives it to daemon SUBSYSTEM (say STARTD) reading
    CONFIG_FILE: typed (bool, int, float) where the param table gives the knob a type,
    None where neither the file nor the table defines it."""
    return {name: value for name, (value, _) in _run(config_file, names, None,
                                                     subsystem=subsystem, raw=True).items()}


def _run(
    config_file: Path, names: list[str], env: Mapping[str, str] | None, *, subsystem: str,
    raw: bool,
) -> dict[str, tuple[Any, bool]]:
    full = {k: v for k, v in os.environ.items()
            if not k.upper().startswith(("_CONDOR_", "CONDOR_"))}  # fmt: skip
    full |= dict(env or {}) | {"CONDOR_CONFIG": str(config_file)}
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE, json.dumps(names), subsystem, "raw" if raw else ""],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {name: (value, typed) for name, (value, typed) in json.loads(done.stdout).items()}
