"""`transfer_output_files` naming directories, their contents (`dir/`), files inside
subdirectories, and a file the job never made — on `execd run` as on the pool's own
condor_startd: the same files, directories and modes delivered to the submit
directory, the same user-log events, the same hold code, subcode and reason.
Also: without transfer_output_files (new and changed files) the job's new
subdirectories and its executable, which it rewrites, stay behind, and links in an
output directory (to a file outside the sandbox, inside it, to /dev/zero, to an
unreadable file, to a directory), a FIFO and a socket, a file its owner cannot read
(mode 000) and a directory it cannot list (mode 000: execd used to list it as root)
are treated alike.
"""

from __future__ import annotations

import os
import pprint
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, submit_files

# {0}: a directory outside the sandbox with public.txt (0644) and secret.txt (root, 0600)
SCRIPT = """#!/bin/sh
umask 022
mkdir -p results/sub/deeper results/empty_dir flat/inner out logs links newdir/inner
echo top > results/top.txt
: > results/empty.txt
printf '#!/bin/sh\\necho run\\n' > results/run.sh
chmod 0755 results/run.sh
chmod 0750 results/sub
echo deep > results/sub/deeper/deep.txt
echo s > results/sub/s.txt
echo f > flat/f.txt
echo i > flat/inner/i.txt
echo a > out/a.txt
echo b > out/b.txt
echo l > logs/l.txt
echo new > newdir/inner/n.txt
echo made > made.txt
echo inside > links/target.txt
ln -s target.txt links/inside
ln -s {0}/public.txt links/public
ln -s /dev/zero links/zero
mkfifo links/fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("links/sock")' 2>/dev/null
mkdir secret; ln -s {0}/secret.txt secret/secret
mkdir linkdir; ln -s ../results linkdir/results
mkdir locked; echo x > locked/x; chmod 000 locked/x
mkdir -p lockeddir/inner; echo y > lockeddir/y; chmod 000 lockeddir
ln -s results/top.txt toplink; ln -s {0}/public.txt publink; ln -s results dirlink; mkfifo topfifo
echo '# the job rewrote its executable' >> "$0"
echo done
"""
# case -> transfer_output_files (None: the new and changed files), more submit lines
CASES: dict[str, tuple[str | None, str]] = {
    "directory": ("results", ""),
    "contents": ("results/", ""),
    "file_in_subdirectory": ("results/sub/s.txt", ""),
    "preserved_relative_path": ("results/sub/s.txt, flat/inner",
                                "preserve_relative_paths = true\n"),
    "mixed": ("out/a.txt, flat/, logs, results/sub", ""),
    "missing": ("results, nothere.txt, logs", ""),
    "changed_files": (None, ""),
    "links": ("links", ""),
    "unreadable_link": ("secret", ""),
    "link_to_directory": ("linkdir", ""),
    "unreadable_file": ("locked", ""),
    "unlistable_directory": ("lockeddir", ""),
}
SANDBOX = re.compile(r"/\S*?/dir_\d+(/scratch)?")  # condor_starter 25: dir_<pid>/scratch
ADDRESS = re.compile(r"<[^>]*>")
IP = re.compile(r"\b\d+\.\d+\.\d+\.\d+\b")
SLOT = re.compile(r"\bslot\d+(_\d+)?@")  # which d-slot ran which job varies

Tree = dict[str, tuple[str, str]]
Outcome = tuple[list[str], str, Tree]


@pytest.fixture(scope="module")
def outside() -> Iterator[str]:
    """A directory outside every sandbox, the same path on the host and in the chroot."""
    with tempfile.TemporaryDirectory(prefix="execd-outdir-", dir="/tmp") as tmp:
        os.chmod(tmp, 0o755)
        public = Path(tmp) / "public.txt"
        public.write_text("public\n")
        public.chmod(0o644)
        secret = Path(tmp) / "secret.txt"
        secret.write_text("secret\n")
        secret.chmod(0o600)
        yield tmp


def delivered(directory: Path) -> Tree:
    """What the shadow left in the submit directory: path -> (kind and mode, content)."""
    tree = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if name in ("job.sub", "job.log", "hold.txt"):  # job.sh: is the executable sent back?
            continue
        st = path.lstat()
        mode = oct(stat.S_IMODE(st.st_mode))
        if stat.S_ISDIR(st.st_mode):
            tree[name] = (f"dir {mode}", "")
        else:
            tree[name] = (f"file {mode}", path.read_text(errors="replace"))
    return tree


def normalized(reason: str) -> str:
    return SLOT.sub("SLOT@", IP.sub("IP", ADDRESS.sub("<ADDR>", SANDBOX.sub("SANDBOX", reason))))


def run_cases(pool: harness.Pool, outside: str) -> dict[str, Outcome]:
    """Every case's job submitted at once, each waited for (005 or a hold)."""
    jobs = {}
    for case, (outputs, extra) in CASES.items():
        listed = "" if outputs is None else f"transfer_output_files = {outputs}\n"
        jobs[case] = submit_files(pool, (
            f"executable = job.sh\noutput = out.txt\nerror = err.txt\nlog = job.log\n"
            f"should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n{listed}{extra}"
            "request_memory = 32\nrequest_disk = 1024\nqueue\n"),
            {"job.sh": SCRIPT.format(outside)})  # fmt: skip
    found = {}
    for case, job in jobs.items():
        harness.wait_for(f"{case}: 005 or 012", lambda j=job: {"005", "012"} & set(j.events()),
                         WAIT_S)  # fmt: skip
        ended = "005" if "005" in job.events() else "012"
        if ended == "012":
            held = job.ad()
            assert held is not None
            end = (f"held {held['HoldReasonCode']} {held['HoldReasonSubCode']} "
                   f"{normalized(held['HoldReason'])}")  # fmt: skip
            pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
            harness.wait_for(f"{case}: 009", lambda j=job: "009" in j.events(), WAIT_S)
        else:
            end = next(line.strip() for line in job.user_log().splitlines()
                       if "termination" in line)  # fmt: skip
        # 006 follows each starter's measurements; 040 (transfer) events race 001 when
        # many jobs start at once: their number is compared, not their place, and not
        # for a held job (whether the shadow logs the end of a failed output transfer
        # before the hold is a race on condor_startd too)
        codes = [c for c in job.events() if c not in ("006", "040")]
        if ended == "005":
            codes.append(f"040 x{job.events().count('040')}")
        found[case] = (codes, end, delivered(job.host_dir))
    return found


def test_output_directories_as_on_condor_startd(running_pool: harness.RunningPool,
                                                outside: str) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, lambda pool: run_cases(pool, outside))
    differing = {case: (ours[case], theirs[case]) for case in CASES if ours[case] != theirs[case]}
    assert not differing, pprint.pformat(differing, width=120)
    # what condor_startd does, as the test saw it (the comparison is the test)
    tree = theirs["directory"][2]
    assert tree["results/sub/deeper/deep.txt"] == ("file 0o644", "deep\n")
    assert tree["results/empty_dir"][0].startswith("dir")
    assert tree["results/run.sh"][0] == "file 0o755"
    changed = theirs["changed_files"][2]
    assert "newdir" not in changed and "dirlink" not in changed and "topfifo" not in changed
    # the executable the job rewrote stays behind (FindChangedFiles skips ExecFile)
    assert changed["job.sh"][1].endswith("echo done\n"), changed["job.sh"][1][-80:]
    assert changed["toplink"] == ("file 0o644", "top\n") and changed["publink"][1] == "public\n"
    assert theirs["missing"][1].startswith("held 12 2 ")
    assert theirs["unreadable_file"][1].startswith("held 12 13 ")  # read as the job's user
    # listed as the job's user: a mode-000 directory comes back empty (the shadow makes
    # a mode-0 directory 0700) and the job completes
    unlisted = theirs["unlistable_directory"]
    assert [k for k in unlisted[2] if k.startswith("lockeddir")] == ["lockeddir"], unlisted
    assert unlisted[2]["lockeddir"] == ("dir 0o700", "") and unlisted[1].startswith("(1) Normal")


DEEP_SCRIPT = """#!/bin/sh
d=deep; mkdir $d; i=1
while [ $i -lt 1100 ]; do d=$d/d; mkdir $d; i=$((i+1)); done
echo bottom > $d/f.txt
echo done
"""
DEEPEST = "/".join(["deep"] + ["d"] * 1099 + ["f.txt"])


def deep_tree(pool: harness.Pool) -> tuple[str, bool]:
    """A job whose named output is 1100 directories deep: how it ended, and whether
    the deepest file reached the submit directory."""
    job = submit_files(pool, (
        "executable = job.sh\noutput = out.txt\nerror = err.txt\nlog = job.log\n"
        "should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n"
        "transfer_output_files = deep\nrequest_memory = 64\nrequest_disk = 102400\nqueue\n"),
        {"job.sh": DEEP_SCRIPT})  # fmt: skip
    harness.wait_for("deep: 005 or 012", lambda: {"005", "012"} & set(job.events()), WAIT_S)
    if "012" in job.events():
        held = job.ad()
        assert held is not None
        end = f"held {held['HoldReasonCode']} {held['HoldReasonSubCode']} {held['HoldReason']}"
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
        harness.wait_for("deep: 009", lambda: "009" in job.events(), WAIT_S)
    else:
        end = next(line.strip() for line in job.user_log().splitlines() if "termination" in line)
    return end, os.path.exists(os.path.join(job.host_dir, DEEPEST))


def test_a_tree_past_execds_depth_bound_holds_the_job(running_pool: harness.RunningPool
                                                      ) -> None:  # fmt: skip
    """1100 levels: neither delivers the tree, both hold the job (code 12). execd at its
    1000-level bound, naming it (before, its listing's RecursionError ended the
    conversation: no exit, no hold, and its starter's DiskUsage walk died before its
    report, so the job was evicted and rerun over and over); condor_startd's shadow
    with subcode 1, "remaps resulted in a cycle" (seen with 25.14.1)."""
    ours, theirs = on_both(running_pool, deep_tree)
    assert not theirs[1] and theirs[0].startswith("held 12 1 "), theirs[0][:300]
    assert "remaps resulted in a cycle" in theirs[0]
    end, arrived = ours
    assert not arrived and end.startswith("held 12 36 "), end[:300]
    assert end.endswith(": directories deeper than 1000 levels"), end[-300:]
