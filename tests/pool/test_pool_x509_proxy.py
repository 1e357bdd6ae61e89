"""A job with an X509 proxy (`x509userproxy`), on `execd run` as on the pool's own
condor_startd. The proxy is a self-signed certificate and its key (openssl), which
condor_submit accepts as a proxy.

Delegated (HTCondor's default, DELEGATE_JOB_GSI_CREDENTIALS = true): the shadow sends
file transfer command 4 and signs a new proxy for a key the execute side made; the job
sees X509_USER_PROXY naming the proxy in its sandbox, 0600 and its own, and copies it
back: a proxy certificate issued by the submitted one, the key that goes with it, then
the submitted certificate (openssl verify -allow_proxy_certs accepts it). When the
submitted proxy changes while the job runs, the shadow delegates it again
(DELEGATE_GSI_CRED_STARTER): the job sees its proxy replaced. Copied, the shadow sends
the changed file as it is (UPDATE_GSI_CRED): the job sees it and copies back the new one.

Copied (DELEGATE_JOB_GSI_CREDENTIALS = false): without transfer_output_files the job's
changed files come back, but not the proxy (condor_starter's FindChangedFiles skips the
basename of X509UserProxy, changed or not). The job rewrites its proxy copy and makes a
file; the submit directory is compared after the job: the new file arrived, the proxy
is the one submitted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pool_harness as harness
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, submit_files

COPY_CONFIG = "/etc/condor/config.d/95-execd-x509-copy.conf"
PROXY_CERT_INFO = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14")  # RFC 3820
DELEGATED_SCRIPT = """#!/bin/sh
echo "X509_USER_PROXY=${X509_USER_PROXY#$_CONDOR_SCRATCH_DIR/}"
stat -c 'mode %a' "$X509_USER_PROXY"
[ -O "$X509_USER_PROXY" ] && echo 'owned by the job'
cp "$X509_USER_PROXY" made.txt
"""
REFRESH_SCRIPT = """#!/bin/sh
before=$(cksum < "$X509_USER_PROXY")
echo ready
i=0
while [ "$(cksum < "$X509_USER_PROXY")" = "$before" ] && [ $i -lt 600 ]; do
    sleep 0.1; i=$((i + 1))
done
[ "$(cksum < "$X509_USER_PROXY")" = "$before" ] && echo 'proxy unchanged' || echo 'proxy renewed'
stat -c 'mode %a' "$X509_USER_PROXY"
[ -O "$X509_USER_PROXY" ] && echo 'owned by the job'
[ -e "$X509_USER_PROXY.tmp" ] && echo 'its .tmp left behind'
cp "$X509_USER_PROXY" made.txt
"""
SCRIPT = """#!/bin/sh
echo "X509_USER_PROXY=${X509_USER_PROXY#$_CONDOR_SCRATCH_DIR/}"
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
    """A certificate valid for two days and its key, as one PEM file: a user's end
    entity certificate (no CA markings: openssl refuses a CA as a proxy's issuer)."""
    with tempfile.TemporaryDirectory(prefix="execd-x509-") as tmp:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "2", "-subj", "/CN=execd pool test",
                        "-addext", "basicConstraints=critical,CA:FALSE",
                        "-keyout", f"{tmp}/key.pem", "-out", f"{tmp}/cert.pem"],
                       check=True, capture_output=True)  # fmt: skip
        return Path(tmp, "cert.pem").read_text() + Path(tmp, "key.pem").read_text()


@contextlib.contextmanager
def proxy_copied(pool: harness.Pool,
                 text: str = "DELEGATE_JOB_GSI_CREDENTIALS = false\n") -> Iterator[None]:
    """The shadow copies the proxy as a plain file (read by each new shadow); or
    another `text` for the shadow."""
    path = pool.host_path(COPY_CONFIG)
    path.write_text(text)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def run_job(pool: harness.Pool, proxy: str, script: str = SCRIPT,
            copied: bool = True) -> tuple[str, str, str, str, str]:  # fmt: skip
    """(how the job ended, the submit directory's proxy, made.txt, X509UserProxy, the
    job's stdout)."""
    with proxy_copied(pool) if copied else contextlib.nullcontext():
        job = submit_files(pool, SUBMIT, {"job.sh": script, "proxy.pem": proxy})
        (job.host_dir / "proxy.pem").chmod(0o600)  # as a proxy must be
        queued = job.ad() or {}
        harness.wait_for("005 or 012", lambda: {"005", "012"} & set(job.events()), WAIT_S)
    # condor_submit names it x509userproxy (ATTR_X509_USER_PROXY)
    attr = os.path.basename(str(next((v for k, v in queued.items()
                                      if k.lower() == "x509userproxy"), "")))  # fmt: skip
    if "012" in job.events():
        held = job.ad() or {}
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
        return f"held {held.get('HoldReason')}", "", "", attr, ""
    end = next(line.strip() for line in job.user_log().splitlines() if "termination" in line)
    made, out = job.host_dir / "made.txt", job.host_dir / "out.txt"
    return (end, (job.host_dir / "proxy.pem").read_text(),
            made.read_text() if made.exists() else "(none)", attr,
            out.read_text() if out.exists() else "(none)")


def test_the_x509_proxy_stays_behind_as_on_condor_startd(running_pool: harness.RunningPool,
                                                         proxy: str) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, lambda pool: run_job(pool, proxy))
    assert theirs[0].startswith("(1) Normal termination"), (ours, theirs)
    assert theirs[3] == "proxy.pem"  # the job ad names the proxy
    assert theirs[1] == proxy and theirs[2] == "made\n"  # what condor_startd does
    assert theirs[4] == "X509_USER_PROXY=proxy.pem\ndone\n"  # set for a copied proxy too
    assert ours == theirs


def delegated_proxy(text: str, submitted: str) -> tuple[object, ...]:
    """What the job's copy of its delegated proxy is, against the submitted one."""
    ca = x509.load_pem_x509_certificate(submitted.encode())
    certs = x509.load_pem_x509_certificates(text.encode())
    key = serialization.load_pem_private_key(text.encode(), password=None)
    leaf = certs[0]
    leaf.verify_directly_issued_by(ca)  # raises if the submitted key did not sign it
    with tempfile.TemporaryDirectory(prefix="execd-x509-") as tmp:
        Path(tmp, "ca.pem").write_text(submitted)
        Path(tmp, "proxy.pem").write_text(text)
        verify = subprocess.run(["openssl", "verify", "-allow_proxy_certs", "-CAfile",
                                 f"{tmp}/ca.pem", f"{tmp}/proxy.pem"],
                                check=False, capture_output=True, text=True)  # fmt: skip
    return (leaf.issuer == ca.subject, key.public_key() == leaf.public_key(),
            certs[1:] == [ca], bool(leaf.extensions.get_extension_for_oid(PROXY_CERT_INFO)),
            "-----BEGIN PRIVATE KEY-----" in text, verify.returncode, verify.stderr.strip())


def test_a_delegated_x509_proxy_as_on_condor_startd(running_pool: harness.RunningPool,
                                                    proxy: str) -> None:  # fmt: skip
    def run(pool: harness.Pool) -> tuple[object, ...]:
        end, _, made, attr, out = run_job(pool, proxy, DELEGATED_SCRIPT, copied=False)
        if not end.startswith("(1) Normal termination"):
            return end, attr, out
        return end, attr, out, delegated_proxy(made, proxy)

    ours, theirs = on_both(running_pool, run)
    assert theirs[0].startswith("(1) Normal termination (return value 0)"), (ours, theirs)
    # what condor_startd does: the job sees its proxy, a valid proxy of the submitted one
    assert theirs[2] == "X509_USER_PROXY=proxy.pem\nmode 600\nowned by the job\n", theirs
    assert theirs[3] == (True, True, True, True, True, 0, ""), theirs
    assert ours == theirs


def refreshed_job(pool: harness.Pool, proxy: str, copied: bool = False) -> tuple[object, ...]:
    """A job waits for its proxy to change; once it says so (condor_tail), the submitted
    proxy is changed (copied: a line appended, so the copy differs; else only touched):
    the shadow (checking every second) delegates it again, or sends it as a file."""
    knobs = "SHADOW_CHECKPROXY_INTERVAL = 1\n" \
        + ("DELEGATE_JOB_GSI_CREDENTIALS = false\n" if copied else "")  # fmt: skip
    renewed = proxy + "# renewed\n"
    with proxy_copied(pool, knobs):
        job = submit_files(pool, SUBMIT, {"job.sh": REFRESH_SCRIPT, "proxy.pem": proxy})
        (job.host_dir / "proxy.pem").chmod(0o600)

        def ready() -> bool:
            tail = pool.tool("condor_tail", str(job.cluster), user=harness.SUBMITTER)
            return "ready" in tail.stdout or bool({"005", "012"} & set(job.events()))

        harness.wait_for("the job's ready", ready, WAIT_S)
        later = time.time() + 60  # the shadow compares the file's mtime with the last one
        if copied:
            (job.host_dir / "proxy.pem").write_text(renewed)
        os.utime(job.host_dir / "proxy.pem", (later, later))
        harness.wait_for("005 or 012", lambda: {"005", "012"} & set(job.events()), WAIT_S)
    end = next((line.strip() for line in job.user_log().splitlines()
                if "termination" in line), "not ended: " + ", ".join(job.events()))  # fmt: skip
    out, made = job.host_dir / "out.txt", job.host_dir / "made.txt"
    text = out.read_text() if out.exists() else "(none)"
    if not made.exists():
        return end, text
    if copied:
        return end, text, made.read_text() == renewed
    return end, text, delegated_proxy(made.read_text(), proxy)


def test_a_renewed_proxy_is_delegated_to_the_running_job(running_pool: harness.RunningPool,
                                                         proxy: str) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, lambda pool: refreshed_job(pool, proxy))
    assert theirs[0].startswith("(1) Normal termination (return value 0)"), (ours, theirs)
    assert theirs[1] == "ready\nproxy renewed\nmode 600\nowned by the job\n", theirs
    assert theirs[2] == (True, True, True, True, True, 0, ""), theirs
    assert ours == theirs


def test_a_renewed_copied_proxy_reaches_the_running_job(running_pool: harness.RunningPool,
                                                        proxy: str) -> None:  # fmt: skip
    # DELEGATE_JOB_GSI_CREDENTIALS = false: the shadow sends the renewed file as it is
    # (UPDATE_GSI_CRED, 487); the job sees its proxy change and copies back the new one
    ours, theirs = on_both(running_pool, lambda pool: refreshed_job(pool, proxy, copied=True))
    assert theirs[0].startswith("(1) Normal termination (return value 0)"), (ours, theirs)
    assert theirs[1] == "ready\nproxy renewed\nmode 600\nowned by the job\n", theirs
    assert theirs[2] is True, theirs
    assert ours == theirs
