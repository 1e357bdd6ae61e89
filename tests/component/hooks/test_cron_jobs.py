"""Startd cron jobs as real subprocesses under asyncio, merged into slot ads, logged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from execd import log
from execd.classads import evaluate, new_ad
from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.hooks.cron import CronJobExit, CronManager, CronUpdate
from execd.hooks.cron_config import CronSettings, cron_settings

WAIT = 20  # seconds before a test gives up waiting for an event (never reached when green)


@pytest.fixture
def log_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ExecdLog"
    log.configure(level="info", fmt="json", path=path)
    yield path
    log.configure(level="info", fmt="console", path=None)


def events(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in found if name is None or e["event"] == name]


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def settings(text: str) -> CronSettings:
    return cron_settings(load_settings(parse_config_text(text, filename="execd.conf", env={})))


SLOTS = {f"slot{i}": new_ad({"Name": f"slot{i}@node", "SlotID": i, "SlotTypeID": 1,
                             "TotalCpus": 2}) for i in (1, 2)}


class Harness:
    """A CronManager whose updates and exits land in queues the test awaits."""

    def __init__(self, cron: CronSettings) -> None:
        self.updates: asyncio.Queue[CronUpdate] = asyncio.Queue()
        self.exits: asyncio.Queue[CronJobExit] = asyncio.Queue()
        self.other_exits: list[CronJobExit] = []
        self.manager = CronManager(cron, slot_ads=lambda: SLOTS,
                                   on_update=self.updates.put_nowait,
                                   on_exit=self.exits.put_nowait, clock=lambda: 1_700_000_000)

    async def exit_of(self, job: str) -> CronJobExit:
        """The next exit of `job`. Other jobs' exits are kept for their own awaiting:
        jobs started together end in either order."""
        for i, done in enumerate(self.other_exits):
            if done.job == job:
                return self.other_exits.pop(i)
        async with asyncio.timeout(WAIT):
            while True:
                done = await self.exits.get()
                if done.job == job:
                    return done
                self.other_exits.append(done)

    async def update_of(self, job: str) -> CronUpdate:
        async with asyncio.timeout(WAIT):
            while True:
                update = await self.updates.get()
                if update.job == job:
                    return update


@contextlib.asynccontextmanager
async def running(cron: CronSettings) -> AsyncIterator[Harness]:
    harness = Harness(cron)
    task = asyncio.create_task(harness.manager.run())
    try:
        yield harness
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
async def test_non_zero_exit_logs_stderr_only_for_the_failing_job(
    tmp_path: Path, log_path: Path
) -> None:
    # HTCondor's test_startd_cron: both publish, only BadCron's stderr reaches the log
    good = script(tmp_path, "good", 'echo "GoodCron = 123"\necho "good stderr text" >&2\nexit 0\n')
    bad = script(tmp_path, "bad", 'echo "BadCron = 123"\necho "bad stderr text" >&2\nexit 37\n')
    cron = settings(
        "STARTD_CRON_JOBLIST = GOOD BAD\nSTARTD_CRON_LOG_NON_ZERO_EXIT = true\n"
        f"STARTD_CRON_GOOD_EXECUTABLE = {good}\nSTARTD_CRON_GOOD_PERIOD = 1h\n"
        f"STARTD_CRON_BAD_EXECUTABLE = {bad}\nSTARTD_CRON_BAD_PERIOD = 1h\n"
    )
    async with running(cron) as h:
        assert (await h.exit_of("GOOD")).result.exit_code == 0
        assert (await h.exit_of("BAD")).result.exit_code == 37
        attrs = h.manager.slot_attributes()
    assert attrs["slot1"]["GoodCron"] == "123" and attrs["slot2"]["BadCron"] == "123"
    text = log_path.read_text()
    assert "bad stderr text" in text and "good stderr text" not in text
    (failed,) = events(log_path, "cron_job_exit_non_zero")
    assert failed["job"] == "BAD" and failed["exit_code"] == 37
    assert failed["stderr"] == "bad stderr text\n"


@pytest.mark.asyncio
async def test_non_zero_exit_without_the_knob_logs_no_stderr(
    tmp_path: Path, log_path: Path
) -> None:
    bad = script(tmp_path, "bad", 'echo "secret-ish stderr" >&2\nexit 3\n')
    cron = settings(f"STARTD_CRON_JOBLIST = BAD\nSTARTD_CRON_BAD_EXECUTABLE = {bad}\n"
                    "STARTD_CRON_BAD_MODE = OneShot\n")
    async with running(cron) as h:
        assert (await h.exit_of("BAD")).result.exit_code == 3
    (failed,) = events(log_path, "cron_job_exit_non_zero")
    assert failed["exit_code"] == 3 and "stderr" not in failed


@pytest.mark.asyncio
async def test_garbage_is_logged_with_its_line_and_good_lines_apply(
    tmp_path: Path, log_path: Path
) -> None:
    job = script(tmp_path, "job", 'echo "Good = 1"\necho "%%% garbage %%%"\necho "Also = 2"\n')
    cron = settings(f"STARTD_CRON_JOBLIST = G\nSTARTD_CRON_G_EXECUTABLE = {job}\n"
                    "STARTD_CRON_G_MODE = OneShot\n")
    async with running(cron) as h:
        await h.exit_of("G")
        attrs = h.manager.slot_attributes()["slot1"]
    assert attrs["Good"] == "1" and attrs["Also"] == "2"
    (bad,) = events(log_path, "cron_output_bad_line")
    assert bad["job"] == "G" and bad["line_number"] == 2 and bad["line"] == "%%% garbage %%%"


async def exited(pid: int) -> None:
    """Return once PID has exited (its pidfd turns readable); fail after WAIT seconds."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    gone = loop.create_future()
    loop.add_reader(fd, lambda: gone.done() or gone.set_result(None))
    try:
        async with asyncio.timeout(WAIT):
            await gone
    finally:
        loop.remove_reader(fd)
        os.close(fd)


@pytest.mark.asyncio
async def test_a_job_hanging_past_its_period_is_killed_with_its_children(
    tmp_path: Path, log_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    job = script(tmp_path, "hang", f'echo "Started = 1"\necho "-"\nsleep 300 &\n'
                 f'echo $! >> {pid_file}\nwait\n')
    cron = settings(f"STARTD_CRON_JOBLIST = H\nSTARTD_CRON_H_EXECUTABLE = {job}\n"
                    "STARTD_CRON_H_PERIOD = 1\n")
    async with running(cron) as h:
        done = await h.exit_of("H")
        assert done.result.timed_out and done.result.exit_code is None
        assert h.manager.slot_attributes()["slot1"]["Started"] == "1"  # ads before the hang
    for child in map(int, pid_file.read_text().split()):  # every run's background child
        await exited(child)
    (killed,) = events(log_path, "cron_job_killed_timeout")[:1]
    assert killed["job"] == "H" and killed["timeout_s"] == 1.0


@pytest.mark.asyncio
async def test_wait_for_exit_streams_ads_and_update_flag(tmp_path: Path) -> None:
    job = script(tmp_path, "stream", 'echo "Tick = 1"\necho "- update:true"\nexec sleep 300\n')
    cron = settings(f"STARTD_CRON_JOBLIST = S\nSTARTD_CRON_S_EXECUTABLE = {job}\n"
                    "STARTD_CRON_S_MODE = WaitForExit\nSTARTD_CRON_S_PERIOD = 0\n")
    async with running(cron) as h:
        update = await h.update_of("S")  # arrives while the job is still running
        assert update.publish_now and update.changed_slots == {"slot1", "slot2"}
        assert h.manager.slot_attributes()["slot2"]["Tick"] == "1"
        assert h.exits.empty()


@pytest.mark.asyncio
async def test_on_demand_with_prefix_args_env_cwd_and_last_update(tmp_path: Path) -> None:
    job = script(tmp_path, "ask", 'echo "Arg = \\"$1\\""\necho "Env = \\"$COLOR\\""\n'
                 'echo "Dir = \\"$(pwd)\\""\n')
    cron = settings(
        f"STARTD_CRON_JOBLIST = ASK\nSTARTD_CRON_ASK_EXECUTABLE = {job}\n"
        "STARTD_CRON_ASK_MODE = OnDemand\nSTARTD_CRON_ASK_PREFIX = ask_\n"
        "STARTD_CRON_ASK_ARGS = 'two words'\nSTARTD_CRON_ASK_ENV = COLOR=blue\n"
        f"STARTD_CRON_ASK_CWD = {tmp_path}\nSTARTD_CRON_AUTOPUBLISH = If_Changed\n"
    )
    async with running(cron) as h:
        await asyncio.sleep(0)  # let run() start the job's task
        assert h.manager.slot_attributes() == {}
        h.manager.run_now("ASK")
        first = await h.update_of("ASK")
        h.manager.run_now("ASK")
        second = await h.update_of("ASK")
        attrs = h.manager.slot_attributes()["slot1"]
    assert first.publish_now and not second.publish_now  # If_Changed: same output twice
    assert attrs == {"ask_Arg": '"two words"', "ask_Env": '"blue"',
                     "ask_Dir": f'"{tmp_path}"', "ask_LastUpdate": "1700000000"}


@pytest.mark.asyncio
async def test_missing_executable_is_logged_and_other_jobs_run(
    tmp_path: Path, log_path: Path
) -> None:
    ok = script(tmp_path, "ok", 'echo "Fine = true"\n')
    cron = settings(
        "STARTD_CRON_JOBLIST = GONE OK\n"
        f"STARTD_CRON_GONE_EXECUTABLE = {tmp_path}/nope\nSTARTD_CRON_GONE_MODE = OneShot\n"
        f"STARTD_CRON_OK_EXECUTABLE = {ok}\nSTARTD_CRON_OK_MODE = OneShot\n"
    )
    async with running(cron) as h:
        assert (await h.exit_of("GONE")).result.start_error is not None
        await h.exit_of("OK")
        assert h.manager.slot_attributes()["slot1"] == {"Fine": "true", "LastUpdate": "1700000000"}
    (failed,) = events(log_path, "cron_job_start_failed")
    assert failed["job"] == "GONE" and "nope" in failed["executable"]


@pytest.mark.asyncio
async def test_metrics_sum_and_peak_across_runs(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    counter.write_text("0")
    job = script(tmp_path, "gpu", f'n=$(($(cat {counter}) + 1)); echo $n > {counter}\n'
                 'echo "UptimeGPUsSeconds = 5"\necho "UptimeGPUsMemoryPeakUsage = $((n * 100))"\n'
                 'echo "SlotId = 2"\n')
    cron = settings(f"STARTD_CRON_JOBLIST = M\nSTARTD_CRON_M_EXECUTABLE = {job}\n"
                    "STARTD_CRON_M_MODE = OnDemand\n"
                    "STARTD_CRON_M_METRICS = SUM:GPUs, PEAK:GPUsMemory\n")
    async with running(cron) as h:
        await asyncio.sleep(0)
        for _ in range(3):
            h.manager.run_now("M")
            await h.exit_of("M")
        attrs = h.manager.slot_attributes()
    assert "UptimeGPUsSeconds" not in attrs["slot1"]
    assert evaluate(attrs["slot2"]["UptimeGPUsSeconds"]) == 15
    assert evaluate(attrs["slot2"]["UptimeGPUsMemoryPeakUsage"]) == 300


@pytest.mark.asyncio
async def test_condition_false_skips_and_reconfig_drops_removed_jobs(tmp_path: Path) -> None:
    job = script(tmp_path, "c", 'echo "Ran = true"\n')
    base = (f"STARTD_CRON_JOBLIST = C\nSTARTD_CRON_C_EXECUTABLE = {job}\n"
            "STARTD_CRON_C_MODE = OnDemand\n")
    async with running(settings(base + "STARTD_CRON_C_CONDITION = TotalCpus > 8\n")) as h:
        await asyncio.sleep(0)
        h.manager.run_now("C")
        h.manager.reconfigure(settings(base))  # the condition goes: C is restarted
        await asyncio.sleep(0)
        h.manager.run_now("C")
        await h.exit_of("C")
        assert h.manager.slot_attributes()["slot1"]["Ran"] == "true"
        h.manager.reconfigure(settings(""))
        assert h.manager.slot_attributes() == {}


@pytest.mark.asyncio
async def test_max_job_load_serialises_heavy_jobs(tmp_path: Path) -> None:
    marker = tmp_path / "running"
    body = (f'[ -e {marker} ] && echo "Overlap = true"\ntouch {marker}\nsleep 0.3\n'
            f'rm {marker}\necho "Done = true"\n')
    first, second = script(tmp_path, "a", body), script(tmp_path, "b", body)
    cron = settings(
        "STARTD_CRON_JOBLIST = A B\nSTARTD_CRON_MAX_JOB_LOAD = 1\n"
        f"STARTD_CRON_A_EXECUTABLE = {first}\nSTARTD_CRON_A_MODE = OneShot\n"
        "STARTD_CRON_A_JOB_LOAD = 1\n"
        f"STARTD_CRON_B_EXECUTABLE = {second}\nSTARTD_CRON_B_MODE = OneShot\n"
        "STARTD_CRON_B_JOB_LOAD = 1\n"
    )
    async with running(cron) as h:
        await h.exit_of("A")
        await h.exit_of("B")
        attrs = h.manager.slot_attributes()["slot1"]
    assert "Overlap" not in attrs and attrs["Done"] == "true"
    assert not os.path.exists(marker)


@pytest.mark.asyncio
async def test_update_false_overrides_autopublish_always(tmp_path: Path) -> None:
    job = script(tmp_path, "u", 'echo "A = 1"\necho "- first update:false"\necho "B = 2"\n'
                 'echo "- second"\n')
    cron = settings(f"STARTD_CRON_JOBLIST = U\nSTARTD_CRON_U_EXECUTABLE = {job}\n"
                    "STARTD_CRON_U_MODE = OneShot\nSTARTD_CRON_AUTOPUBLISH = Always\n")
    async with running(cron) as h:
        first, second = await h.update_of("U"), await h.update_of("U")
    assert (first.ad, first.publish_now) == ("U_first", False)
    assert (second.ad, second.publish_now) == ("U_second", True)


@pytest.mark.asyncio
async def test_reconfig_sends_sighup_to_a_running_job_that_asks_for_it(tmp_path: Path) -> None:
    trap = 'trap \'echo "GotHup = true"; echo "- update:true"; exit 0\' HUP\n'
    loop = 'echo "Ready = true"\necho "-"\nwhile :; do sleep 0.05; done\n'
    job = script(tmp_path, "hup", trap + loop)
    text = (f"STARTD_CRON_JOBLIST = R\nSTARTD_CRON_R_EXECUTABLE = {job}\n"
            "STARTD_CRON_R_MODE = WaitForExit\nSTARTD_CRON_R_PERIOD = 1h\n"
            "STARTD_CRON_R_RECONFIG = true\n")
    # The daemon handles SIGHUP itself (reconfig), so what it starts gets SIGHUP's default
    # at exec; this process may have it ignored (`nohup make test`), and an ignored
    # signal stays ignored across exec: a shell cannot even trap it. Be the daemon here.
    previous = signal.signal(signal.SIGHUP, lambda _signum, _frame: None)
    try:
        await _hup_round(text)
    finally:
        signal.signal(signal.SIGHUP, previous)


async def _hup_round(text: str) -> None:
    async with running(settings(text)) as h:
        await h.update_of("R")  # Ready: the trap is installed
        h.manager.reconfigure(settings(text))
        hup = await h.update_of("R")
        assert hup.publish_now and h.manager.slot_attributes()["slot1"]["GotHup"] == "true"
        assert (await h.exit_of("R")).result.exit_code == 0
