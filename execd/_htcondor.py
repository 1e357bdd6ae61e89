"""Import htcondor2 without letting it change the process environment.

On import, htcondor2 sets CONDOR_CONFIG=/dev/null when it finds no HTCondor config.
execd reads CONDOR_CONFIG itself (to find *its* config), and passes the environment
on to jobs, so the variable is put back exactly as it was.
"""

from __future__ import annotations

import os

_before = os.environ.get("CONDOR_CONFIG")

import classad2  # noqa: E402
import htcondor2  # noqa: E402

if _before is None:
    os.environ.pop("CONDOR_CONFIG", None)
else:
    os.environ["CONDOR_CONFIG"] = _before

__all__ = ["classad2", "htcondor2"]
