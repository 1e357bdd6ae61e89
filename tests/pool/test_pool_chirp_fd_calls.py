"""Chirp's calls on the shadow's descriptors and its who/lookup calls on `execd run`
and on the pool's own condor_startd: `read -stride`, `write -stride` (sread, swrite),
whoami and whoareyou with the chroot's condor_chirp; fstat, fstatfs, fchmod,
ftruncate, fsync, fchown, sread, swrite, lookup, whoami and whoareyou with lengths
condor_chirp never sends, through HTCondor's own Python client (htchirp, from the
chroot: its connection and its raw requests, as condor_chirp has no command for
them). The job's output, exit code and the files on the submit side must be the
same on both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pool_harness as harness
from test_pool_chirp import CHIRP_SETUP
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SHELL = """\
printf 'ABCDEF' > new.txt
step read -stride 2 4 remote.txt 6
step read -offset 1 -stride 1 3 remote.txt 4
step read -stride 0 4 remote.txt 6
step write -stride 2 4 strided.txt new.txt 6
step write -offset 1 -stride 1 3 strided2.txt new.txt 3
step whoami
step whoareyou some.host
if [ -x /usr/libexec/condor/condor_chirp ]; then HTCHIRP=""; else HTCHIRP=$R; fi
python3 - "$HTCHIRP/usr/lib/python3/dist-packages/htcondor2/htchirp/htchirp.py" <<'EOF'
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("htchirp", sys.argv[1])
htchirp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(htchirp)


def ask(c, request, data=None):
    print("==", request, flush=True)  # as written: the shadow's descriptor is {fd}
    line = request.format(fd=c.fd)
    try:
        if data is None:
            answer = c._simple_command(line + "\\n")
        else:
            c._simple_command(line + "\\n", get_response=False)
            c.socket.sendall(data)
            answer = c._simple_response()
    except htchirp.HTChirp.ChirpError as exc:
        print("error", type(exc).__name__)
        return None
    print("answer", answer)
    return int(answer)


def stat_line(c):
    fields = c._get_line_data().split()
    print("fields", len(fields), "mode size nlink", fields[2:4], fields[7:8])


with htchirp.HTChirp() as c:
    try:
        c.fd = c._open("fd.txt", "rw")
    except htchirp.HTChirp.ChirpError as exc:  # no file I/O: the calls below are sent
        print("open error", type(exc).__name__)  # all the same, on a descriptor of 3,
        c.fd = 3  # and must each be refused
    if ask(c, "fstat {fd}") == 0:
        stat_line(c)
    if ask(c, "fstatfs {fd}") == 0:
        stat_line(c)
    ask(c, "fchmod {fd} 384")
    ask(c, "ftruncate {fd} 10")
    ask(c, "fsync {fd}")
    ask(c, "fchown {fd} 0 0")
    if (n := ask(c, "sread {fd} 4 0 1 3")) and n > 0:
        print(c._get_fixed_data(n))
    ask(c, "swrite {fd} 3 1 1 2", b"XYZ")
    ask(c, "sread {fd} 0 0 1 1")
    ask(c, "sread {fd} 4 0 0 1")
    ask(c, "sread {fd} -1 0 1 1")
    ask(c, "swrite {fd} -1 0 1 1")
    ask(c, "pread {fd} -1 0")
    ask(c, "write {fd} -1")
    ask(c, "pwrite {fd} -1 0")
    ask(c, "fsync {fd} extra words")
    ask(c, "fstat 999")
    ask(c, "fchmod 999 384")
    ask(c, "ftruncate 999 0")
    if (n := ask(c, "lookup fd.txt")) and n > 0:
        url = c._get_fixed_data(n).decode()
        print("url", url.split(":")[0], url.rsplit("/", 1)[-1], len(url) == n)
    for line in ("whoami 100", "whoami 6", "whoami 3", "whoami 0", "whoami 2000",
                 "whoareyou some.host 100", "whoareyou h 2", "whoareyou h -1"):
        if (n := ask(c, line)) and n > 0:
            print(c._get_fixed_data(n))
    ask(c, "version")
    ask(c, "close {fd}")
EOF
echo "python rc=$?"
exit 3
"""
SUBMIT_FILES = {"remote.txt": "0123456789abcdef\n", "strided.txt": "." * 16 + "\n",
                "strided2.txt": "." * 16 + "\n", "fd.txt": "0123456789abcdef\n"}  # fmt: skip


def submit_side(job_dir: Path) -> dict[str, Any]:
    """Each of SUBMIT_FILES afterwards: (mode, content)."""
    return {name: (oct((job_dir / name).stat().st_mode & 0o777), (job_dir / name).read_text())
            for name in SUBMIT_FILES}  # fmt: skip


def fd_job(pool: harness.Pool, extra: str) -> tuple[str, int, dict[str, Any]]:
    """(the job's stdout, its exit code, the submit side's files)."""
    script = "#!/bin/sh\n" + CHIRP_SETUP.format(root=pool.root) + f"R={pool.root}\n" + SHELL
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=extra),
                       {"job.sh": script, **SUBMIT_FILES})  # fmt: skip
    job.wait_for_event("005", WAIT_S)
    record = harness.wait_for("the job's history record", lambda: job.pool.history(job.cluster),
                              WAIT_S)[0]  # fmt: skip
    return job.output("out.txt"), record.get("ExitCode"), submit_side(job.host_dir)


def test_descriptor_and_who_calls_as_on_condor_startd(running_pool: harness.RunningPool) -> None:
    ours, condor = on_both(running_pool, lambda pool: fd_job(pool, "+WantIOProxy = true"))
    assert ours == condor
    out, code, files = ours
    assert code == 3 and "python rc=0" in out
    assert "== read -stride 2 4 remote.txt 6\n014589\nrc=6\n" in out
    assert files["strided.txt"][1] == "AB..CD..EF......\n"
    assert files["strided2.txt"][1] == ".A..B..C........\n"
    assert "== whoami 100\nanswer 6\nb'CONDOR'\n" in out
    assert "== whoareyou some.host 100\nanswer 7\nb'UNKNOWN'\n" in out
    assert "== sread {fd} 4 0 1 3\nanswer 4\nb'0369'\n" in out
    # condor_starter sends fstatfs as CONDOR_fstat: the descriptor's stat line (13 numbers)
    assert "== fstatfs {fd}\nanswer 0\nfields 13 " in out
    assert "url remote fd.txt True" in out
    for line in ("pread {fd} -1 0", "write {fd} -1", "pwrite {fd} -1 0"):  # the connection
        assert f"== {line}\nerror NoMemory\n" in out  # goes on (condor_starter's malloc)
    assert files["fd.txt"] == ("0o600", "0X2Y4Z6789")


def test_descriptor_and_who_calls_without_want_io_proxy_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, condor = on_both(running_pool, lambda pool: fd_job(pool, ""))
    assert ours == condor
    out, code, files = ours
    assert code == 3 and "python rc=0" in out and "open error InvalidRequest" in out
    # each new call is sent (on descriptor 3) and refused: none is served
    for line in ("fstat {fd}", "fstatfs {fd}", "fchmod {fd} 384", "sread {fd} 4 0 1 3",
                 "lookup fd.txt", "whoami 100", "whoareyou some.host 100"):  # fmt: skip
        assert f"== {line}\nerror InvalidRequest\n" in out
    assert "answer 0" not in out and "answer 6" not in out
    assert files["fd.txt"] == ("0o644", SUBMIT_FILES["fd.txt"])
