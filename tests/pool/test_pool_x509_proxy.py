"""A job with an X509 proxy (`x509userproxy`): without transfer_output_files its
changed files come back, but not the proxy, on `execd run` as on the pool's own
condor_startd (condor_starter's FindChangedFiles skips the basename of X509UserProxy,
changed or not). The job rewrites its proxy copy and makes a file; the submit
directory is compared after the job: the new file arrived, the proxy is the one
submitted. The proxy is a self-signed certificate and its key (openssl), which
condor_submit accepts as a proxy; the shadow is told to copy it as a file
(DELEGATE_JOB_GSI_CREDENTIALS = false): execd's file transfer has no X509 delegation
(docs/pool.md, "Not yet").
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, submit_files

COPY_CONFIG = "/etc/condor/config.d/95-execd-x509-copy.conf"
SCRIPT = """#!/bin/sh
echo '# the job rewrote its proxy' >> proxy.pem
echo made > made.txt
echo done
"""
SUBMIT = """executable = job.sh
output = out.txt
error = err.txt
log = job.log
x509userproxy = proxy.pem
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_memory = 32
request_disk = 1024
queue
"""


@pytest.fixture(scope="module")
def proxy() -> str:
    """A certificate valid for two days and its key, as one PEM file."""
    with tempfile.TemporaryDirectory(prefix="execd-x509-") as tmp:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "2", "-subj", "/CN=execd pool test",
                        "-keyout", f"{tmp}/key.pem", "-out", f"{tmp}/cert.pem"],
                       check=True, capture_output=True)  # fmt: skip
        return Path(tmp, "cert.pem").read_text() + Path(tmp, "key.pem").read_text()


@contextlib.contextmanager
def proxy_copied(pool: harness.Pool) -> Iterator[None]:
    """The shadow copies the proxy as a plain file (read by each new shadow)."""
    path = pool.host_path(COPY_CONFIG)
    path.write_text("DELEGATE_JOB_GSI_CREDENTIALS = false\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def run_job(pool: harness.Pool, proxy: str) -> tuple[str, str, str, str]:
    """(how the job ended, the submit directory's proxy, made.txt, X509UserProxy)."""
    with proxy_copied(pool):
        job = submit_files(pool, SUBMIT, {"job.sh": SCRIPT, "proxy.pem": proxy})
        (job.host_dir / "proxy.pem").chmod(0o600)  # as a proxy must be
        queued = job.ad() or {}
        harness.wait_for("005 or 012", lambda: {"005", "012"} & set(job.events()), WAIT_S)
    # condor_submit names it x509userproxy (ATTR_X509_USER_PROXY)
    attr = os.path.basename(str(next((v for k, v in queued.items()
                                      if k.lower() == "x509userproxy"), "")))  # fmt: skip
    if "012" in job.events():
        held = job.ad() or {}
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
        return f"held {held.get('HoldReason')}", "", "", attr
    end = next(line.strip() for line in job.user_log().splitlines() if "termination" in line)
    made = job.host_dir / "made.txt"
    return (end, (job.host_dir / "proxy.pem").read_text(),
            made.read_text() if made.exists() else "(none)", attr)


def test_the_x509_proxy_stays_behind_as_on_condor_startd(running_pool: harness.RunningPool,
                                                         proxy: str) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, lambda pool: run_job(pool, proxy))
    assert theirs[0].startswith("(1) Normal termination"), (ours, theirs)
    assert theirs[3] == "proxy.pem"  # the job ad names the proxy
    assert theirs[1] == proxy and theirs[2] == "made\n"  # what condor_startd does
    assert ours == theirs
