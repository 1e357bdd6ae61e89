"""`.update.ad`: the slot's ad, rewritten into the running job's directory as the slot's
update is due (its state changed, or UPDATE_INTERVAL passed), on `execd run` as
condor_startd does (Resource::refresh_sandbox_ad).

The same job on both execute points waits (bounded) until the file exists and has been
replaced at least once (a new inode: it is renamed into place), then prints where it is
relative to its cwd, its mode, whether its owner is its directory's, whether it can read
it, a few of the slot's attributes read from it as a pilot would, whether it has
CpusUsage, and how many private attributes and claim ids it holds (none). The only
difference is where it is: condor_startd writes it to `dir_<pid>/htcondor/`
(STARTER_NESTED_SCRATCH, the pool's 25.x default; the job's cwd is `dir_<pid>/scratch`)
as that directory's owner (condor), execd to its sandbox, `dir_<pid>` itself and the
job's cwd, as the job's user whose directory it is (as condor_startd does without
nested scratch). It never comes back with the output.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SCRIPT = r"""#!/bin/sh
value() { sed -n "s/^$1 = //p" "$found"; }
found=
i=0
while [ $i -lt 600 ] && [ -z "$found" ]; do  # 60 s at most
  for f in .update.ad ../htcondor/.update.ad; do [ -f "$f" ] && found=$f; done
  [ -z "$found" ] && sleep 0.1
  i=$((i + 1))
done
[ -z "$found" ] && { echo "no .update.ad"; exit 1; }
first=$(stat -c %i "$found")
i=0
while [ $i -lt 600 ] && [ "$(stat -c %i "$found")" = "$first" ]; do sleep 0.1; i=$((i + 1)); done
[ "$(stat -c %i "$found")" = "$first" ] && { echo "never rewritten"; exit 1; }
echo "where: $found"
echo "mode: $(stat -c %a "$found")"
owner() { stat -c %U "$1"; }
[ "$(owner "$found")" = "$(owner "$(dirname "$found")")" ] && echo "its directory's owner's"
[ -r "$found" ] && echo "readable by the job"
for a in Name Cpus Memory State Activity; do echo "$a: $(value $a)"; done
grep -qi '^CpusUsage = ' "$found" && echo "has CpusUsage"
private='^(ClaimId|Capability|ChildClaimIds|ClaimIdList|ClaimIds|TransferKey|_condor_priv[^ ]*) = '
echo "private: $(grep -ciE "$private" "$found"), claim ids: $(grep -c '#\[' "$found")"
"""
CONDOR_WHERE = "where: ../htcondor/.update.ad"  # STARTER_NESTED_SCRATCH (25.x default)
EXECD_WHERE = "where: .update.ad"  # execd's sandbox is dir_<pid>, the job's cwd
# The first update (after which the file is written) and the slot's publishes soon.
FAST_UPDATES = "STARTER_INITIAL_UPDATE_INTERVAL = 2\nSTARTER_UPDATE_INTERVAL = 2\n"


def update_ad_seen(pool: harness.Pool) -> tuple[list[str], list[str]]:
    """What the job printed (host name made generic) and the hidden files that came
    back to its submit directory."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), {"job.sh": SCRIPT})
    log = job.wait_for_event("005", WAIT_S * 2)
    seen = job.output("out.txt").replace(socket.getfqdn(), "<host>")
    seen = seen.replace(socket.gethostname(), "<host>")
    assert "(1) Normal termination (return value 0)" in log, (log, seen)
    back = sorted(p.name for p in Path(job.host_dir).iterdir() if p.name.startswith("."))
    return seen.splitlines(), back


def test_update_ad_rewritten_in_the_jobs_directory_as_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, update_ad_seen, FAST_UPDATES)
    (lines, back), (their_lines, their_back) = ours, theirs
    assert back == their_back == []  # never sent back
    assert their_lines[0] == CONDOR_WHERE and lines[0] == EXECD_WHERE
    assert lines[1:] == their_lines[1:], (lines, their_lines)
    assert lines[1:] == [
        "mode: 644", "its directory's owner's", "readable by the job",
        'Name: "slot1_1@<host>"', "Cpus: 1", "Memory: 128", 'State: "Claimed"',
        'Activity: "Busy"', "has CpusUsage",
        "private: 0, claim ids: 0",
    ]  # fmt: skip
