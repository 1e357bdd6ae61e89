"""Each metaknob template expands to what HTCondor 25.x expands it to.

The reference is the real htcondor2 config reader, run in a subprocess (it is
process-global and exits the process on a syntax error).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from execd.classads import evaluate
from execd.config.loader import load_config

# Pin install paths so both readers see the same ones.
PRELUDE = "RELEASE_DIR = /usr\nLIBEXEC = /usr/libexec\n"

CASES = [
    "use ROLE : Execute",
    "use ROLE : Personal",
    "use POLICY : Always_Run_Jobs",
    "use POLICY : Desktop",
    "use POLICY : UWCS_Desktop",
    "use POLICY : Hold_If_Memory_Exceeded",
    "use POLICY : Preempt_If_Memory_Exceeded",
    "use POLICY : Preempt_If_Cpus_Exceeded",
    "TOO_LONG = (time() - JobStart) > 100\nuse POLICY : Want_Hold_If(TOO_LONG, 7, ran too long)",
    "TOO_LONG = (time() - JobStart) > 100\nuse POLICY : Preempt_If(TOO_LONG)",
    "use POLICY : Limit_Job_Runtimes",
    "use POLICY : Limit_Job_Runtimes(3600)",
    "use FEATURE : PartitionableSlot",
    "use FEATURE : PartitionableSlot(2, 50%)",
    "use FEATURE : StaticSlots",
    "use FEATURE : GPUs",
    "use FEATURE : StartdCronOneShot(ONE, /bin/one)",
    "use FEATURE : StartdCronPeriodic(TICK, 5m, /bin/tick, -v)",
    "use FEATURE : StartdCronContinuous(CONT, /bin/cont)",
    "use POLICY : Desktop\nuse POLICY : Hold_If_Memory_Exceeded, Preempt_If_Cpus_Exceeded",
]

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


def reference_values(config_file: Path, names: list[str]) -> dict[str, tuple[str | None, bool]]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("_CONDOR_", "CONDOR_"))}
    env["CONDOR_CONFIG"] = str(config_file)
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE, json.dumps(names)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {name: (value, typed) for name, (value, typed) in json.loads(done.stdout).items()}


def normalized(value: str | None) -> str:
    return " ".join((value or "").split())


@pytest.mark.parametrize("case", CASES, ids=[c.splitlines()[-1] for c in CASES])
def test_template_expands_as_htcondor_does(case: str, tmp_path: Path) -> None:
    config_file = tmp_path / "condor_config"
    config_file.write_text(PRELUDE + case + "\n")
    ours = load_config(config_file, env={})
    names = [
        n
        for n in ours.names()
        if n.upper() not in ("RELEASE_DIR", "LIBEXEC")
        and len({ours.get(n) for _ in range(4)}) == 1  # $RANDOM_* values differ by design
    ]
    assert names, "the template defined nothing"
    theirs = reference_values(config_file, names)
    for name in names:
        mine = ours.get(name)
        reference, typed = theirs[name]
        if mine == "" and typed:
            continue  # an empty typed knob: HTCondor then uses its built-in default
        if typed and mine is not None:
            mine = str(evaluate(mine))  # typed knobs come back evaluated (1024*1024 -> 1048576)
        assert normalized(mine) == normalized(reference), f"{name} in {case!r}"
