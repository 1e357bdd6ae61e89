"""condor_chirp's file calls (fetch, put, remove, rmdir, getdir, stat, access, chmod,
truncate, utime, link, chown, read, write, put -mode, ...) on `execd run` and on the
pool's own condor_startd: the same job, with `+WantIOProxy = true`, fetches files
from its submit directory (through the shadow) and prints them, puts files there,
removes some, changes some; its condor_chirp output and exit codes and the files on
the submit side (content, size, mode, links, mtime) must be the same on both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from test_pool_chirp import CHIRP_SETUP
from test_pool_chirp_knobs import pool_knobs
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SCRIPT = "#!/bin/sh\n" + CHIRP_SETUP + """\
printf 'from the job\\n' > put-me.txt
head -c 100000 /dev/zero | tr '\\0' 'z' > big-put.txt
step fetch remote.txt fetched.txt
cat fetched.txt; echo
step fetch empty.txt fetched-empty.txt
[ -e fetched-empty.txt ] && echo "fetched-empty exists"
step fetch no-such-file.txt fetched-missing.txt
step fetch sub fetched-dir.txt
step fetch remote.txt -
echo
step put put-me.txt landed.txt
step put -perm 600 put-me.txt landed-600.txt
step put big-put.txt landed-big.txt
step put no-such-local.txt landed-never.txt
step remove doomed.txt
step remove doomed.txt
step remove sub
step rmdir emptydir
step rmdir sub
step getdir sub
step getdir no-such-dir
quiet() {{ echo "== $*"; out=$(chirp "$@" 2>&1); echo "rc=$?"; }}
quiet getdir -l sub
echo "$out" | grep -c .
quiet stat remote.txt
echo "$out" | grep -E "mode|size|nlink"
step stat no-such-file.txt
quiet statfs .
step access remote.txt r
step access no-such-file.txt f
step chmod modes.txt 600
step truncate trunc.txt 3
step utime touched.txt 1000000000 1000000000
step link -s remote.txt sym.txt
quiet lstat sym.txt
echo "$out" | grep -E "mode|size"
step link remote.txt hard.txt
step chown remote.txt 0 0
step rmdir -r tree
step readlink sym.txt 100
step whoami
step read remote.txt 100
step read -offset 2 remote.txt 3
step read no-such-file.txt 10
printf 'new text' > new.txt
step write writeme.txt new.txt
step write -offset 4 writeme2.txt new.txt
step write no-such-dir/x.txt new.txt
step put -mode cwa put-me.txt appended.txt
step put -mode cwa put-me.txt appended.txt
step put -mode w put-me.txt never-created.txt
exit 3
"""
SUBMIT_FILES = {"remote.txt": "fetch me\n", "empty.txt": "", "doomed.txt": "bye\n",
                "sub/keep.txt": "stays\n", "emptydir/.placeholder": "", "modes.txt": "m\n",
                "trunc.txt": "truncate me\n", "touched.txt": "t\n",
                "tree/b.txt": "deep\n", "writeme.txt": "0123456789abc\n",
                "writeme2.txt": "0123456789abc\n"}  # fmt: skip
LANDED = ("landed.txt", "landed-600.txt", "landed-big.txt",
          "landed-never.txt", "doomed.txt", "sub/keep.txt", "emptydir", "modes.txt",
          "trunc.txt", "touched.txt", "sym.txt", "hard.txt", "tree", "writeme.txt",
          "writeme2.txt", "appended.txt", "never-created.txt")  # fmt: skip
NO_CONFIG = re.compile(r"(Can't open )/\S+/\.chirp\.config")


def submit_side(job_dir: Path) -> dict[str, Any]:
    """What is on the submit side afterwards: (mode, size, first bytes) or None."""
    seen: dict[str, Any] = {}
    for name in LANDED:
        path = job_dir / name
        if path.is_symlink():
            seen[name] = ("link", str(path.readlink()))
        elif path.is_dir():
            seen[name] = ("dir", sorted(p.name for p in path.iterdir()))
        elif path.exists():
            data = path.read_bytes()
            info = path.stat()
            seen[name] = (oct(info.st_mode & 0o777), len(data), data[:20], info.st_nlink,
                          int(info.st_mtime) == 1000000000)  # fmt: skip
        else:
            seen[name] = None
    return seen


def file_job(pool: harness.Pool, extra: str, knobs: str) -> tuple[str, int, dict[str, Any]]:
    """(the job's stdout, its exit code, the submit side's files)."""
    files = {"job.sh": SCRIPT.format(root=pool.root), **SUBMIT_FILES}
    with pool_knobs(pool, knobs):
        job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=extra), files)
        (job.host_dir / "emptydir" / ".placeholder").unlink()
        job.wait_for_event("005", WAIT_S)
    record = harness.wait_for("the job's history record", lambda: job.pool.history(job.cluster),
                              WAIT_S)[0]  # fmt: skip
    out = NO_CONFIG.sub(r"\1<sandbox>/.chirp.config", job.output("out.txt"))
    return out, record.get("ExitCode"), submit_side(job.host_dir)


CASES = {  # name: (the job's submit lines, the knobs)
    "io": ("+WantIOProxy = true", ""),
    "no-io-proxy": ("", ""),
    "io-off": ("+WantIOProxy = true", "ENABLE_CHIRP_IO = false\n"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_chirp_file_calls_as_on_condor_startd(running_pool: harness.RunningPool,
                                              case: str) -> None:  # fmt: skip
    extra, knobs = CASES[case]
    ours, condor = on_both(running_pool, lambda pool: file_job(pool, extra, knobs), knobs)
    assert ours == condor
    out, code, landed = ours
    assert code == 3
    if case == "io":
        assert "== fetch remote.txt fetched.txt\nrc=0\nfetch me\n" in out
        assert landed["landed.txt"] == ("0o755", 13, b"from the job\n", 1, False)
        assert landed["modes.txt"][0] == "0o600" and landed["trunc.txt"][1] == 3
        assert landed["touched.txt"][4] is True and landed["tree"] is None
        assert landed["sym.txt"] == ("link", "remote.txt") and landed["hard.txt"][3] == 2
        assert "== read -offset 2 remote.txt 3\ntch\nrc=3\n" in out
        assert landed["writeme2.txt"][2] == b"0123new textc\n"
        assert landed["appended.txt"][1] == 26 and landed["never-created.txt"] is None
        assert landed["landed-big.txt"][1] == 100000
        assert landed["doomed.txt"] is None
    else:
        assert landed["landed.txt"] is None and landed["doomed.txt"] is not None
