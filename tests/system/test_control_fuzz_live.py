"""Fuzz the control protocol of a running daemon that holds a claim with a running job.

Random bytes, truncated JSON, wrong types, unknown verbs, and claim ids that are stale
(released), forged (well-formed, random secret) or one hex digit off the live one. The
daemon answers or closes the connection, never crashes, never blocks another client,
and nothing changes: the same slots in the same states, the same job, the same claims.
"""

from __future__ import annotations

import json
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execd.daemon.client import ControlClient
from tests.component.daemon_harness import RunningDaemon

SLEEPER = {"Cmd": "/bin/sh", "Args": ["-c", "while :; do sleep 1; done"], "RequestCpus": 1,
           "RequestMemory": 64, "Iwd": "/tmp"}
CLAIM_VERBS = ("activate", "release", "suspend", "continue", "deactivate",
               "deactivate_forcefully", "vacate_claim", "alive")


class Live:
    def __init__(self, node: RunningDaemon, sock: Path, claim_id: str, stale: str) -> None:
        self.node, self.sock, self.claim_id, self.stale = node, sock, claim_id, stale

    def snapshot(self) -> Any:
        with ControlClient(self.sock, timeout=30) as c:
            ads = c.call("status")["ads"]
            who = c.call("who")["jobs"]
        return (sorted((a["Name"], a["State"], a["Activity"]) for a in ads),
                [(j["slot"], j["job_id"], j["starter_pid"]) for j in who])


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with tempfile.TemporaryDirectory(prefix="execd-fuzz-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        node = RunningDaemon(root, "NUM_CPUS = 2\nMEMORY = 2048\n").start()
        try:
            sock = Path(node.execd("config-val", "RUN").stdout.strip()) / "execd.sock"
            with ControlClient(sock) as c:
                old = c.call("request_claim", {"job": SLEEPER})["claim_id"]
                c.call("release", {"claim_id": old})
                node.wait_for("dynamic_slot_deleted")
                held = c.call("request_claim", {"job": SLEEPER})["claim_id"]
                c.call("activate", {"claim_id": held, "job": SLEEPER})
            yield Live(node, sock, held, old)
        finally:
            node.stop(signal.SIGQUIT)


def off_by_one(claim_id: str, where: int) -> str:
    index = len(claim_id) - 1 - (where % 64)
    digit = "0" if claim_id[index] != "0" else "1"
    return claim_id[:index] + digit + claim_id[index + 1 :]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10,
)
forged = st.builds(lambda seq, secret: f"<node>#1700000000#{seq}#[Integrity=\"YES\";]{secret}",
                   st.integers(0, 10**6), st.text("0123456789abcdef", min_size=64, max_size=64))


@st.composite
def request_lines(draw: st.DrawFn, live: Live) -> bytes:
    kind = draw(st.sampled_from(["bytes", "truncated", "claim", "types", "unknown"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    claim_id: Any = draw(st.one_of(
        st.just(live.stale), forged, st.integers(0, 63).map(lambda i: off_by_one(live.claim_id, i)),
        json_values))
    message: Any = {"id": draw(json_values), "verb": draw(st.sampled_from(CLAIM_VERBS)),
                    "args": {"claim_id": claim_id, "job": draw(json_values)}}
    if kind == "types":
        message = draw(st.sampled_from([
            {"verb": draw(json_values.filter(lambda v: not isinstance(v, str)))},
            {"verb": "status", "args": draw(json_values.filter(
                lambda v: v is not None and not isinstance(v, dict)))},
            {"verb": "status", "args": {"constraint": draw(json_values.filter(
                lambda v: v is not None and not isinstance(v, str)))}},
            {"verb": "job_result", "args": {"job_id": draw(json_values)}},
            draw(json_values.filter(lambda v: not isinstance(v, dict))),
        ]))
    elif kind == "unknown":
        message["verb"] = draw(st.text(min_size=1, max_size=30).filter(
            lambda v: v not in ("status", "who", "ping", "job_result", *CLAIM_VERBS)
            and v.isidentifier() and not v.startswith(("request", "match", "drain", "cancel",
                                                       "vacate", "reconfig", "off", "restart"))))
    text = json.dumps(message).encode()
    if kind == "truncated":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    return text + b"\n"


def exchange(path: Path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(path))
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except BrokenPipeError:
            pass  # the daemon closed on us (a frame too large): its reply is still there
        received = b""
        try:
            while chunk := s.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return received


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_requests_change_nothing_and_never_disturb_the_daemon(
        live: Live, data: st.DataObject) -> None:
    before = live.snapshot()
    lines = data.draw(st.lists(request_lines(live), min_size=1, max_size=4))
    replies = exchange(live.sock, b"".join(lines))
    for line in replies.splitlines():
        reply = json.loads(line)
        assert reply["ok"] is False, reply  # every one of these requests is refused
        assert reply["error"]["code"] in ("bad_request", "bad_args", "refused", "unknown_verb")
    assert live.snapshot() == before  # still answering, and nothing changed


def test_a_huge_frame_is_refused_and_the_daemon_serves_on(live: Live) -> None:
    before = live.snapshot()
    reply = exchange(live.sock, b'{"verb": "status", "args": {"x": "' + b"a" * (2 << 20) + b'"}}\n')
    assert json.loads(reply.splitlines()[0])["error"]["code"] == "too_large"
    assert live.snapshot() == before
