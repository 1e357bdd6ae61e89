"""The daemon's backfill client as a real process: spawned not as root, killed with its group.

Unit of work: execd/daemon/backfill.py alone (a real child, a real event loop), then a real
`execd run` whose partitionable slot enters Backfill and spawns the configured program.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.config.loader import load_config
from execd.config.settings import load_settings
from execd.daemon.backfill import BackfillClient, BackfillProgram, backfill_program
from execd.errors import ConfigError
from tests.component.daemon_harness import RunningDaemon

# Records its uid, pid and a child's pid, then waits: a stand-in for boinc_client.
CLIENT = 'echo "$(id -u) $$" > {out}/ids; sleep 600 & echo $! > {out}/child; wait'


def gone(pid: int) -> bool:
    """No such process, or only a zombie left for its parent to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def program(tmp_path: Path, script: str) -> BackfillProgram:
    user = {"uid": 65534, "gid": 65534} if os.geteuid() == 0 else {}
    return BackfillProgram("TESTBF", "/bin/sh", ["-c", script.format(out=tmp_path)],
                           initial_dir=str(tmp_path), **user)


async def _wait_file(path: Path) -> str:
    async def poll() -> str:
        while not path.exists() or not path.read_text().strip():
            await asyncio.sleep(0.02)  # the child writes a file: nothing to await but polling
        return path.read_text()

    return await asyncio.wait_for(poll(), 20)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the unprivileged client can write (pytest's tmp_path is root-only)."""
    with tempfile.TemporaryDirectory(prefix="execd-bf-") as tmp:
        path = Path(tmp)
        path.chmod(0o777)
        yield path


def test_client_runs_as_a_user_and_kill_takes_its_whole_group(shared: Path) -> None:
    async def scenario() -> tuple[int, int, int]:
        exited = asyncio.Event()
        client = BackfillClient(program(shared, CLIENT), exited.set)
        client.start()
        uid, pid = (int(x) for x in (await _wait_file(shared / "ids")).split())
        child = int(await _wait_file(shared / "child"))
        assert client.pid == pid and not gone(child)
        client.start()  # one client per daemon: a second start does nothing
        assert client.pid == pid
        client.kill()
        await asyncio.wait_for(exited.wait(), 10)
        assert client.pid is None
        return uid, pid, child

    uid, pid, child = asyncio.run(scenario())
    assert uid != 0
    assert gone(pid)
    deadline = time.monotonic() + 5
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.02)  # init reaps the orphan in its own time
    assert gone(child)


def test_client_exit_on_its_own_is_reported(shared: Path) -> None:
    async def scenario() -> None:
        exited = asyncio.Event()
        client = BackfillClient(program(shared, "exit 3"), exited.set)
        client.start()
        await asyncio.wait_for(exited.wait(), 10)
        assert client.pid is None

    asyncio.run(scenario())


def test_start_before_the_loop_runs_waits_for_attach(shared: Path) -> None:
    client = BackfillClient(program(shared, "exit 0"), lambda: None)
    client.start()  # as during daemon startup: no event loop yet
    assert client.pid is None

    async def scenario() -> None:
        exited = asyncio.Event()
        client.on_exit = exited.set
        client.attach()
        assert client.pid is not None
        await asyncio.wait_for(exited.wait(), 10)

    asyncio.run(scenario())


def settings_for(tmp_path: Path, text: str) -> object:
    path = tmp_path / "config"
    path.write_text(text)
    return load_settings(load_config(path))


@pytest.mark.parametrize(("text", "message"), [
    ("ENABLE_BACKFILL = True\nBACKFILL_SYSTEM = TESTBF\n", "TESTBF_Executable is not set"),
    ("ENABLE_BACKFILL = True\nBOINC_Executable = /bin/true\nBOINC_Owner = root\n",
     "never runs as root"),
    ("ENABLE_BACKFILL = True\nBOINC_Executable = /bin/true\nBOINC_Owner = nosuchuser9\n",
     "no user named"),
    ("ENABLE_BACKFILL = True\nBOINC_Executable = /bin/true\nBOINC_Owner = nobody\n"
     "BOINC_Environment = A=1 junk\n", "not NAME=value"),
])
def test_bad_backfill_config_is_refused_with_its_reason(tmp_path: Path, text: str,
                                                        message: str) -> None:
    if os.geteuid() != 0 and "Owner" in text and "Environment" not in text:
        pytest.skip("the Owner checks apply when execd runs as root; this runs as a user")
    with pytest.raises(ConfigError, match=message):
        backfill_program(settings_for(tmp_path, text))  # type: ignore[arg-type]


def test_backfill_system_names_any_program(tmp_path: Path) -> None:
    found = backfill_program(settings_for(tmp_path, (  # type: ignore[arg-type]
        "ENABLE_BACKFILL = True\nBACKFILL_SYSTEM = FOLDING\nFOLDING_Executable = /bin/sleep\n"
        "FOLDING_Arguments = 600 --x\nFOLDING_Owner = nobody\nFOLDING_Environment = A=1;B=2\n")))
    assert found is not None
    assert (found.system, found.executable, found.arguments) == ("FOLDING", "/bin/sleep",
                                                                 ["600", "--x"])
    assert found.environment == {"A": "1", "B": "2"}
    assert backfill_program(settings_for(tmp_path, "")) is None  # type: ignore[arg-type]


@pytest.fixture
def backfill_node(shared: Path) -> Iterator[tuple[RunningDaemon, Path]]:
    out = shared / "bf"
    out.mkdir()
    out.chmod(0o777)
    script = out / "client.sh"  # a file: $(...) in the config would be a macro
    script.write_text(f"rm -f {out}/child\n" + CLIENT.format(out=out) + "\n")
    config = ("ENABLE_BACKFILL = True\nSTART_BACKFILL = True\nBACKFILL_SYSTEM = TESTBF\n"
              f"TESTBF_Executable = /bin/sh\nTESTBF_Arguments = {script}\n"
              f"TESTBF_Owner = nobody\nTESTBF_InitialDir = {out}\n")
    daemon = RunningDaemon(shared, config).start()
    try:
        yield daemon, out
    finally:
        daemon.stop(signal.SIGTERM)


def test_daemon_runs_one_client_and_kills_it_when_backfill_ends(
        backfill_node: tuple[RunningDaemon, Path]) -> None:
    node, out = backfill_node
    # the slot entered Backfill while the daemon started: before execd_started
    started = next(e for e in node.events() if e["event"] == "backfill_client_started")
    assert started["system"] == "TESTBF"
    status = node.execd("status", "-af", "State", "Activity")
    assert status.stdout.split() == ["Backfill", "Busy"]
    uid, pid = (int(x) for x in asyncio.run(_wait_file(out / "ids")).split())
    assert pid == started["pid"]
    assert uid == 65534 if os.geteuid() == 0 else uid == os.geteuid()
    assert node.execd("vacate", "slot1").returncode == 0
    node.wait_for("backfill_client_exited", pid=pid)
    node.wait_for("slot_state_changed", slot="slot1", old="Backfill/Idle", new="Owner/Idle")
    assert gone(pid)
    # START_BACKFILL is still true: the slot goes back and a new client is spawned
    again = node.wait_for("backfill_client_started", system="TESTBF")
    assert again["pid"] != pid
    node.stop(signal.SIGTERM)
    assert gone(again["pid"])


def test_a_client_that_cannot_start_is_retried_and_a_kill_ends_the_wait(shared: Path) -> None:
    async def scenario() -> None:
        exited = asyncio.Event()
        broken = BackfillProgram("TESTBF", str(shared / "no-such-program"))
        client = BackfillClient(broken, exited.set)
        client.start()
        assert client.pid is None and not exited.is_set()  # reported later, then retried
        client.kill()  # the engine gives up on it: the exit it waits for comes at once
        await asyncio.wait_for(exited.wait(), 5)  # not after RETRY_AFTER_S (60 s)

    asyncio.run(scenario())
