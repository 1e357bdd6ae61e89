"""A local job's own ads (`execd job`, through a real daemon and starter): `.job.ad` and
`.machine.ad` in its scratch directory, named by `_CONDOR_JOB_AD` / `_CONDOR_MACHINE_AD`,
as condor_starter gives every job them; no private attribute in either."""

from __future__ import annotations

import secrets

from execd._htcondor import classad2
from tests.component.daemon_harness import RunningDaemon
from tests.system.test_daemon_jobs import node  # noqa: F401  (the fixture: a real daemon)

# What the job prints: the variables' basenames, whether the files are in its scratch
# directory, their owner and mode, then each file as it is.
SCRIPT = r"""
echo "$(basename "$_CONDOR_JOB_AD") $(basename "$_CONDOR_MACHINE_AD")"
if [ "$(dirname "$_CONDOR_JOB_AD")" = "$_CONDOR_SCRATCH_DIR" ] \
   && [ "$(dirname "$_CONDOR_MACHINE_AD")" = "$_CONDOR_SCRATCH_DIR" ]; then
  echo in-scratch
else
  echo elsewhere
fi
stat -c '%U %a' "$_CONDOR_JOB_AD" "$_CONDOR_MACHINE_AD"
echo ==== job; cat "$_CONDOR_JOB_AD"
echo ==== machine; cat "$_CONDOR_MACHINE_AD"
"""


def parse(text: str) -> classad2.ClassAd:
    ad = classad2.parseOne(text, parser=classad2.ParserType.Old)
    assert ad is not None
    return ad


def test_a_local_job_reads_its_job_ad_and_machine_ad(node: RunningDaemon) -> None:  # noqa: F811
    secret = f"<127.0.0.1:9618>#{secrets.token_hex(8)}"
    done = node.execd("job", "--memory", "384", "--attr", f"ClaimId={secret}",
                      "--attr", f"Capability={secret}", "--attr", "MyMarker=7",
                      "--", "sh", "-c", SCRIPT, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    head, _, rest = done.stdout.partition("==== job\n")
    job_text, _, machine_text = rest.partition("==== machine\n")
    names, where, *owners = head.splitlines()
    assert names == ".job.ad .machine.ad"
    assert where == "in-scratch"
    assert owners == ["nobody 644", "nobody 644"]  # the job's user's, as condor_starter's
    job, machine = parse(job_text), parse(machine_text)
    assert job["RequestMemory"] == 384
    assert job["MyMarker"] == 7
    assert job["Cmd"] == "/usr/bin/sh" or str(job["Cmd"]).endswith("/sh")
    assert str(machine["Name"]).startswith("slot1_1@")  # its dynamic slot's ad
    assert machine["Memory"] == 384  # the d-slot carved for it
    assert machine["Cpus"] == 1
    assert machine["Machine"] == machine["Name"].split("@", 1)[1]
    for text in (job_text, machine_text):  # one `Name = value` a line, in byte order
        lines = text.splitlines()
        assert lines == sorted(lines, key=lambda line: line.split(" = ", 1)[0])
        assert all(" = " in line for line in lines)
        assert secret.split("#")[1] not in text
    for ad in (job, machine):
        assert "ClaimId" not in ad and "Capability" not in ad
