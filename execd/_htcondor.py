"""Import htcondor2 without letting it change the process environment.

On import, htcondor2 reads the HTCondor config named by CONDOR_CONFIG with its own
parser, which exits the process (status 1, its own message) on a line it rejects, and
sets CONDOR_CONFIG=/dev/null when it finds none. execd reads CONDOR_CONFIG itself (to
find *its* config, which htcondor2 must not judge), and passes the environment on to
jobs: htcondor2 is shown /dev/null, and the variable is put back exactly as it was.
"""

from __future__ import annotations

import os

_before = os.environ.get("CONDOR_CONFIG")
os.environ["CONDOR_CONFIG"] = os.devnull

import classad2  # noqa: E402
import htcondor2  # noqa: E402

if _before is None:
    os.environ.pop("CONDOR_CONFIG", None)
else:
    os.environ["CONDOR_CONFIG"] = _before

__all__ = ["classad2", "htcondor2"]
