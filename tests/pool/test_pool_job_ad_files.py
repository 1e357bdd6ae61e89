"""The job's own ads: `.job.ad` and `.machine.ad` in its working directory, named by
`_CONDOR_JOB_AD` / `_CONDOR_MACHINE_AD`, on `execd run` as condor_starter gives them
under the pool's condor_startd. The same job on both prints what it finds (the
variables' basenames, whether the files are in its cwd, their mode, a few attributes
read from each as a wrapper would read them), and whether either holds a private
attribute or a claim id; neither file comes back to the submit directory.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SCRIPT = r"""#!/bin/sh
value() { sed -n "s/^$1 = //p" "$2"; }
echo "env: $(basename "$_CONDOR_JOB_AD") $(basename "$_CONDOR_MACHINE_AD")"
[ "$(dirname "$_CONDOR_JOB_AD")" = "$(pwd)" ] && echo "job ad in cwd"
[ "$(dirname "$_CONDOR_MACHINE_AD")" = "$(pwd)" ] && echo "machine ad in cwd"
[ -f .job.ad ] && [ -f .machine.ad ] && echo "both files in cwd"
echo "mode: $(stat -c %a .job.ad) $(stat -c %a .machine.ad)"
[ "$(value Iwd "$_CONDOR_JOB_AD")" = "\"$(pwd)\"" ] && echo "job Iwd is cwd"
for a in ClusterId ProcId Owner RequestMemory Out Err OriginalOut OrigIwd; do
  echo "job $a: $(value $a "$_CONDOR_JOB_AD")"
done
for a in Name Memory Cpus Machine; do
  echo "machine $a: $(value $a "$_CONDOR_MACHINE_AD")"
done
private='^(ClaimId|Capability|ChildClaimIds|ClaimIdList|ClaimIds|TransferKey|_condor_priv[^ ]*) = '
for f in "$_CONDOR_JOB_AD" "$_CONDOR_MACHINE_AD"; do
  claims=$(grep -c '#\[' "$f")  # a claim id's session part: <addr>#birth#seq#[...]secret
  echo "$(basename "$f"): $(grep -ciE "$private" "$f") private, $claims claim ids"
done
cp "$_CONDOR_JOB_AD" job.ad.txt
"""


def ads_seen(pool: harness.Pool) -> tuple[list[str], list[str], list[str]]:
    """What the job printed (its cluster, host name and submit directory made generic),
    the hidden files that came back to its submit directory, and the names in its
    `.job.ad` (a copy the job made)."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), {"job.sh": SCRIPT})
    log = job.wait_for_event("005", WAIT_S)
    assert "(1) Normal termination (return value 0)" in log, log
    seen = job.output("out.txt").replace(f"ClusterId: {job.cluster}\n", "ClusterId: <cluster>\n")
    seen = seen.replace(socket.getfqdn(), "<host>").replace(socket.gethostname(), "<host>")
    seen = seen.replace(f'"/home/{harness.SUBMITTER}/{job.host_dir.name}"', '"<submit dir>"')
    back = sorted(p.name for p in Path(job.host_dir).iterdir() if p.name.startswith("."))
    names = sorted(line.split(" = ", 1)[0] for line in job.output("job.ad.txt").splitlines())
    return seen.splitlines(), back, names


def test_job_and_machine_ad_files_as_condor_starters(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, ads_seen)
    assert ours == theirs
    lines, back, names = ours
    assert back == []  # .job.ad and .machine.ad never come back
    assert {"OrigCmd", "OrigIwd", "OSHomeDir", "OriginalOut", "OriginalErr"} <= set(names)
    assert lines == [
        "env: .job.ad .machine.ad", "job ad in cwd", "machine ad in cwd",
        "both files in cwd", "mode: 644 644", "job Iwd is cwd",
        "job ClusterId: <cluster>", "job ProcId: 0", f'job Owner: "{harness.SUBMITTER}"',
        "job RequestMemory: 64", 'job Out: "_condor_stdout"', 'job Err: "_condor_stderr"',
        'job OriginalOut: "out.txt"', 'job OrigIwd: "<submit dir>"',
        'machine Name: "slot1_1@<host>"', "machine Memory: 128", "machine Cpus: 1",
        'machine Machine: "<host>"',
        ".job.ad: 0 private, 0 claim ids", ".machine.ad: 0 private, 0 claim ids",
    ]  # fmt: skip


INPUT_AD_SCRIPT = r"""#!/bin/sh
echo "Marker: $(sed -n 's/^Marker = //p' .job.ad)"
echo "ClusterId lines: $(grep -c '^ClusterId = ' .job.ad)"
echo "machine Marker: $(sed -n 's/^Marker = //p' .machine.ad)"
"""


def input_ad_seen(pool: harness.Pool) -> list[str]:
    """What a job whose input brings its own `.job.ad` and `.machine.ad` finds there."""
    extra = "transfer_input_files = .job.ad, .machine.ad"
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=extra),
                       {"job.sh": INPUT_AD_SCRIPT, ".job.ad": "Marker = 1\n",
                        ".machine.ad": "Marker = 2\n"})  # fmt: skip
    log = job.wait_for_event("005", WAIT_S)
    assert "(1) Normal termination (return value 0)" in log, log
    return job.output("out.txt").splitlines()


def test_an_input_file_named_like_the_ads_replaces_them_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """condor_starter writes the ads before its input transfer, so the job's own files
    of those names win; execd wrote them after and replaced the job's."""
    ours, theirs = on_both(running_pool, input_ad_seen)
    assert ours == theirs
    assert ours == ["Marker: 1", "ClusterId lines: 0", "machine Marker: 2"]
