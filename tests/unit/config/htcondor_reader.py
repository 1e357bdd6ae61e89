"""HTCondor's own config reader as the reference for execd's: htcondor2's `param`, run in a
subprocess (it is process-global and exits the process on a syntax error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REFERENCE = """
import json, sys
import htcondor2
names = json.loads(sys.argv[1])
out = {}
for name in names:
    value = htcondor2.param.get(name)
    typed = value is not None and not isinstance(value, str)
    out[name] = [None if value is None else str(value), typed]
print(json.dumps(out))
"""


def reference_values(
    config_file: Path, names: list[str], env: Mapping[str, str] | None = None
) -> dict[str, tuple[str | None, bool]]:
    """NAME -> (its value as HTCondor reads CONFIG_FILE, whether param typed it); ENV is
    added to the reader's environment."""
    full = {k: v for k, v in os.environ.items()
            if not k.upper().startswith(("_CONDOR_", "CONDOR_"))}  # fmt: skip
    full |= dict(env or {}) | {"CONDOR_CONFIG": str(config_file)}
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE, json.dumps(names)],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {name: (value, typed) for name, (value, typed) in json.loads(done.stdout).items()}
