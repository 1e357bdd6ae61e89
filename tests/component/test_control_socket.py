"""The control socket against real clients: replies, roles, and bad input."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execd.daemon.control import (
    MAX_FRAME,
    Authorizer,
    ControlError,
    ControlServer,
    Request,
    Role,
    Verb,
)

State = dict[str, Any]


def make_verbs(state: State) -> dict[str, Verb]:
    async def status(request: Request) -> Any:
        return {"slots": state["slots"], "you": request.peer.uid}

    async def drain(request: Request) -> Any:
        how = request.args.get("how", "graceful")
        if how not in ("graceful", "quick", "fast"):
            raise ControlError("bad_args", f"unknown drain speed {how!r}")
        state["draining"] = how
        return {"draining": how}

    async def crash(_request: Request) -> Any:
        raise RuntimeError("handler bug")

    async def slow(_request: Request) -> Any:
        await state["release"].wait()
        return "done"

    return {
        "status": Verb(status, Role.READ, "slot ads"),
        "drain": Verb(drain, Role.ADMIN, "drain the node"),
        "claim": Verb(status, Role.SCHEDULER, "claim a slot"),
        "crash": Verb(crash, Role.READ, "raises"),
        "slow": Verb(slow, Role.READ, "waits"),
    }


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[ControlServer, State]]:
    # A directory other users can reach (pytest's tmp_path is private to root).
    with tempfile.TemporaryDirectory(prefix="execd-control-") as tmp:
        Path(tmp).chmod(0o755)
        state: State = {"slots": ["slot1"], "draining": None, "release": asyncio.Event()}
        srv = ControlServer(Path(tmp) / "execd.sock", make_verbs(state), Authorizer())
        await srv.start()
        yield srv, state
        state["release"].set()
        await srv.close()


async def exchange(path: Path, payload: bytes) -> list[dict[str, Any]]:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=4 * MAX_FRAME)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    replies = []
    while line := await reader.readline():
        replies.append(json.loads(line))
    writer.close()
    await writer.wait_closed()
    return replies


def request(verb: str, args: Any = None, rid: Any = 1) -> bytes:
    return json.dumps({"id": rid, "verb": verb, "args": args or {}}).encode() + b"\n"


@pytest.mark.asyncio
async def test_read_verb_answers_with_peer_identity(server: tuple[ControlServer, State]) -> None:
    srv, _ = server
    (reply,) = await exchange(srv.path, request("status", rid=7))
    assert reply == {"id": 7, "ok": True, "result": {"slots": ["slot1"], "you": os.geteuid()}}


@pytest.mark.asyncio
async def test_several_requests_on_one_connection(server: tuple[ControlServer, State]) -> None:
    srv, state = server
    both = request("status", rid=1) + request("drain", {"how": "quick"}, 2)
    replies = await exchange(srv.path, both)
    assert [r["id"] for r in replies] == [1, 2]
    assert state["draining"] == "quick"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"not json\n", "bad_request"),
        (b"[1, 2]\n", "bad_request"),
        (b'{"args": {}}\n', "bad_request"),
        (b'{"verb": 5}\n', "bad_request"),
        (b'{"verb": "status", "args": [1]}\n', "bad_request"),
        (b'{"verb": "frobnicate"}\n', "unknown_verb"),
        (b'{"verb": "drain", "args": {"how": 3}}\n', "bad_args"),
        (b'{"verb": "crash"}\n', "internal"),
        (b"\xff\xfe\n", "bad_request"),
    ],
)
async def test_bad_requests_get_error_replies_and_change_nothing(
    server: tuple[ControlServer, State], payload: bytes, code: str
) -> None:
    srv, state = server
    replies = await exchange(srv.path, payload + request("status", rid="after"))
    assert replies[0]["ok"] is False
    assert replies[0]["error"]["code"] == code
    assert replies[0]["error"]["message"]
    assert replies[1]["id"] == "after"
    assert replies[1]["ok"] is True
    assert state["draining"] is None


@pytest.mark.asyncio
async def test_oversized_frame_is_refused_and_connection_closed(
    server: tuple[ControlServer, State],
) -> None:
    srv, _ = server
    replies = await exchange(srv.path, b"x" * (MAX_FRAME + 10) + b"\n" + request("status"))
    assert len(replies) == 1
    assert replies[0]["ok"] is False
    assert replies[0]["error"]["code"] == "too_large"
    (again,) = await exchange(srv.path, request("status"))
    assert again["ok"] is True


@pytest.mark.asyncio
async def test_a_slow_client_does_not_block_others(server: tuple[ControlServer, State]) -> None:
    srv, state = server
    reader, writer = await asyncio.open_unix_connection(str(srv.path))
    writer.write(request("slow"))
    await writer.drain()
    (quick,) = await exchange(srv.path, request("status"))
    assert quick["ok"] is True
    state["release"].set()
    slow = json.loads(await reader.readline())
    assert slow["result"] == "done"
    writer.close()
    await writer.wait_closed()


@pytest.mark.asyncio
async def test_client_that_vanishes_mid_request_is_harmless(
    server: tuple[ControlServer, State],
) -> None:
    srv, _ = server
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(srv.path))
    sock.sendall(b'{"verb": "sta')
    sock.close()
    (reply,) = await exchange(srv.path, request("status"))
    assert reply["ok"] is True


NOBODY_CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
for verb in ("status", "drain", "claim"):
    s.sendall(json.dumps({"id": verb, "verb": verb}).encode() + b"\\n")
f = s.makefile()
for _ in range(3):
    print(f.readline().strip())
"""


@pytest.mark.asyncio
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as nobody")
async def test_roles_come_from_peer_credentials(server: tuple[ControlServer, State]) -> None:
    srv, state = server
    import pwd

    nobody = pwd.getpwnam("nobody")
    # the system interpreter: the test's own may live where nobody cannot read
    proc = await asyncio.create_subprocess_exec(
        "/usr/bin/python3", "-S", "-c", NOBODY_CLIENT, str(srv.path),
        stdout=asyncio.subprocess.PIPE, user=nobody.pw_uid, group=nobody.pw_gid,
        extra_groups=[], env={},
    )
    out, _ = await proc.communicate()
    status, drain, claim = (json.loads(line) for line in out.decode().splitlines())
    assert status["ok"] is True
    assert status["result"]["you"] == nobody.pw_uid
    assert drain["error"]["code"] == "permission_denied"
    assert "admin" in drain["error"]["message"]
    assert claim["error"]["code"] == "permission_denied"
    assert state["draining"] is None


def test_authorizer_roles() -> None:
    auth = Authorizer(admin_group="root", scheduler_users=frozenset({"nobody"}))
    import pwd

    nobody = pwd.getpwnam("nobody")
    assert Authorizer().roles(0, 0) == frozenset(Role)
    assert auth.roles(nobody.pw_uid, nobody.pw_gid) == frozenset({Role.READ, Role.SCHEDULER})
    assert Authorizer(admin_group="nogroup").roles(nobody.pw_uid, nobody.pw_gid) >= {Role.ADMIN}


FUZZ_VERBS = st.sampled_from(["status", "drain", "claim", "crash", "nope", "", "slow"])
FUZZ_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
FUZZ_LINE = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda v, a, i: json.dumps({"verb": v, "args": a, "id": i}).encode(),
              FUZZ_VERBS.filter(lambda v: v != "slow"), FUZZ_JSON, FUZZ_JSON),
    FUZZ_JSON.map(lambda j: json.dumps(j).encode()),
)


@settings(max_examples=150, deadline=5000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(FUZZ_LINE, max_size=6), st.booleans())
def test_fuzzed_input_never_disturbs_the_daemon(lines: list[bytes], newline_end: bool) -> None:
    async def scenario() -> None:
        with tempfile.TemporaryDirectory(prefix="execd-fuzz-") as tmp:
            state: State = {"slots": ["slot1"], "draining": None, "release": asyncio.Event()}
            srv = ControlServer(Path(tmp) / "s", make_verbs(state), Authorizer())
            await srv.start()
            try:
                payload = b"\n".join(lines) + (b"\n" if newline_end else b"")
                replies = await exchange(srv.path, payload)
                for reply in replies:
                    assert set(reply) >= {"id", "ok"}
                (after,) = await exchange(srv.path, request("status"))
                assert after["ok"] is True
                if state["draining"] is not None:
                    assert state["draining"] in ("graceful", "quick", "fast")
            finally:
                state["release"].set()
                await srv.close()

    asyncio.run(scenario())
