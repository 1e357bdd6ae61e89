"""The ENABLE_CHIRP* knobs on `execd run` and on the pool's own condor_startd: the same
knobs given to both execute points (execd's config; the chroot's config.d, which
condor_starter and the shadow read as each starts for the job) make the same job's
condor_chirp calls give the same output and exit codes, the same attributes in
condor_history and the same generic events (008) in the user log.

The shadow reads CHIRP_DELAYED_UPDATE_PREFIX too (it checks the names again): the
config.d file is there in both runs, so both shadows read the same value.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pool_harness as harness
import pytest
from test_pool_chirp import CHIRP_SETUP, generic_events
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SCRIPT = "#!/bin/sh\n" + CHIRP_SETUP + """\
echo "prefix=$_CHIRP_DELAYED_UPDATE_PREFIX"
echo "config=${{_CONDOR_CHIRP_CONFIG##*/}}"
[ -n "$_CONDOR_CHIRP_CONFIG" ] && [ -e "$_CONDOR_CHIRP_CONFIG" ] && echo "config exists"
step set_job_attr ChirpUpdate 1
step get_job_attr ChirpUpdate
step ulog "knobs"
step set_job_attr_delayed ChirpDelayed 2
step set_job_attr_delayed FooDelayed 3
step set_job_attr_delayed ChirpExact 4
step set_job_attr_delayed FooMore 5
step get_job_attr_delayed FooDelayed
step get_job_attr_delayed ChirpDelayed
exit 3
"""
ATTRS = ("ChirpUpdate", "ChirpDelayed", "FooDelayed", "ChirpExact", "FooMore", "_delayed",
         "ExitCode")  # fmt: skip
CASES = {  # name: (the knobs, the job's submit lines)
    "chirp-off": ("ENABLE_CHIRP = false\n", "+WantIOProxy = true"),
    "updates-off": ("ENABLE_CHIRP_UPDATES = false\n", "+WantIOProxy = true"),
    "io-off": ("ENABLE_CHIRP_IO = false\n", "+WantIOProxy = true"),
    "delayed-off": ("ENABLE_CHIRP_DELAYED = false\n", "+WantIOProxy = true"),
    "delayed-off-no-io": ("ENABLE_CHIRP_DELAYED = false\n", ""),
    "prefix": ("CHIRP_DELAYED_UPDATE_PREFIX = Foo*, chirpexact\n"
               "CHIRP_DELAYED_UPDATE_MAX_ATTRS = 2\n", ""),
}  # fmt: skip
# condor_chirp names the .chirp.config it looked for in the job's working directory.
NO_CONFIG = re.compile(r"(Can't open )/\S+/\.chirp\.config")
KNOBS_FILE = "/etc/condor/config.d/98-execd-chirp-knobs.conf"


@contextlib.contextmanager
def pool_knobs(pool: harness.Pool, text: str) -> Iterator[None]:
    """`text` in the chroot's config.d while the job runs (a pool's start removes a
    9?-execd-*.conf a killed run left behind)."""
    path = pool.host_path(KNOBS_FILE)
    path.write_text(text)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def knob_job(pool: harness.Pool, knobs: str, extra: str) -> tuple[str, dict[str, Any], list[str]]:
    """(the job's stdout, its history attributes ATTRS, its 008 events' bodies)."""
    with pool_knobs(pool, knobs):
        job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=extra),
                           {"job.sh": SCRIPT.format(root=pool.root)})  # fmt: skip
        job.wait_for_event("005", WAIT_S)
    record = harness.wait_for("the job's history record", lambda: job.pool.history(job.cluster),
                              WAIT_S)[0]  # fmt: skip
    out = NO_CONFIG.sub(r"\1<sandbox>/.chirp.config", job.output("out.txt"))
    return out, {n: record.get(n) for n in ATTRS}, generic_events(job.user_log())


@pytest.mark.parametrize("case", sorted(CASES))
def test_chirp_knobs_as_on_condor_startd(running_pool: harness.RunningPool, case: str) -> None:
    knobs, extra = CASES[case]
    ours, condor = on_both(running_pool, lambda pool: knob_job(pool, knobs, extra), knobs)
    assert ours == condor
    out, values, generic = ours
    assert values["ExitCode"] == 3
    if case in ("chirp-off", "delayed-off-no-io"):  # no proxy: every call fails
        assert "config exists" not in out and "rc=0" not in out
        assert "Can't open <sandbox>/.chirp.config file" in out
        assert values["ChirpUpdate"] is None and values["ChirpDelayed"] is None
    if case in ("updates-off", "io-off"):  # io-off: WantIOProxy no longer grants updates
        assert values["ChirpUpdate"] is None and generic == []
        assert values["ChirpDelayed"] == 2
    if case == "delayed-off":
        assert values["ChirpUpdate"] == 1 and values["ChirpDelayed"] is None
    if case == "prefix":
        assert "prefix=Foo*, chirpexact" in out
        assert (values["FooDelayed"], values["ChirpExact"], values["ChirpDelayed"],
                values["FooMore"]) == (3, 4, None, None)  # fmt: skip
