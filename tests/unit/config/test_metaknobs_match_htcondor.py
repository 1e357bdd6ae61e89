"""Each metaknob template expands to what HTCondor 25.x expands it to.

The reference is the real htcondor2 config reader (tests/unit/config/htcondor_reader.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.classads import evaluate
from execd.config.loader import load_config
from tests.unit.config.htcondor_reader import reference_values

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
