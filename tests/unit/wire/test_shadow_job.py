"""The job side of serving a shadow, with real processes (run as nobody, never root)
over a real socket pair to a minimal shadow that answers every call with rval 0: the
exit a shadow is told, the periodic register_job_info, and a cancelled conversation
killing its job."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from wire_pairs import channel_pair

from execd.wire import shadow_job
from execd.wire.channel import Channel
from execd.wire.classad_codec import decode_ad
from execd.wire.shadow import ShadowOptions, _run_job
from execd.wire.shadow_job import JobExit, JobProcess, JobSetupError, run_as_ids
from execd.wire.shadow_syscalls import BEGIN_EXECUTION, REGISTER_JOB_INFO, ShadowSyscalls

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as nobody: needs root")


async def answering_shadow(channel: Channel, calls: list[tuple[int, dict[str, str]]],
                           seen: asyncio.Event) -> None:  # fmt: skip
    while True:
        dec = channel.decoder(await channel.recv(timeout_s=30))
        number = dec.get_int()
        calls.append((number, decode_ad(dec) if number == REGISTER_JOB_INFO else {}))
        seen.set()
        await channel.send(channel.encoder().put_int(0).payload())


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory nobody may traverse (pytest's own is under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="execd-jobtest-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def sandbox(tmp_path: Path) -> tuple[Path, tuple[int, int]]:
    ids = run_as_ids("no-such-user-here")
    box = tmp_path / "sandbox"
    box.mkdir()
    os.chown(box, *ids)
    return box, ids


def job(box: Path, ids: tuple[int, int], script: str) -> JobProcess:
    return JobProcess(["/bin/sh", "-c", script], box, {"PATH": "/bin:/usr/bin"}, ids, None)


Calls = list[tuple[int, dict[str, str]]]


async def run(proc: JobProcess, interval_s: float) -> tuple[JobExit, Calls]:
    ours, theirs = await channel_pair()
    calls: list[tuple[int, dict[str, str]]] = []
    shadow = asyncio.create_task(answering_shadow(theirs, calls, asyncio.Event()))
    try:
        options = ShadowOptions(update_interval_s=interval_s)
        done = await _run_job(ShadowSyscalls(ours), proc, options)
    finally:
        shadow.cancel()
        await ours.close()
        await theirs.close()
    return done, calls


@pytest.mark.parametrize(("script", "ad"), [
    ("id -u > uid; exit 3", {"ExitBySignal": "false", "ExitCode": "3"}),
    ("kill -9 $$", {"ExitBySignal": "true", "ExitSignal": "9"}),
])  # fmt: skip
def test_exit_as_the_shadow_is_told(tmp_path: Path, script: str, ad: dict[str, str]) -> None:
    box, ids = sandbox(tmp_path)
    done, calls = asyncio.run(run(job(box, ids, script), 30))
    assert {k: done.exit_ad()[k] for k in ad} == ad
    assert done.wait_status == (3 << 8 if "exit" in script else 9)
    assert [n for n, _ in calls] == [BEGIN_EXECUTION, REGISTER_JOB_INFO]
    running = calls[1][1]
    assert running["JobState"] == '"Running"' and int(running["JobPid"]) > 1
    if "exit" in script:
        assert (box / "uid").read_text() == f"{ids[0]}\n" and ids[0] != 0
    assert (box / "_condor_stdout").stat().st_uid == ids[0]


def test_register_job_info_every_update_interval(tmp_path: Path) -> None:
    box, ids = sandbox(tmp_path)
    # 1.2 s of job, an update every 0.3 s: the first update and at least two more.
    done, calls = asyncio.run(run(job(box, ids, "sleep 1.2"), 0.3))
    updates = [ad for n, ad in calls if n == REGISTER_JOB_INFO]
    assert len(updates) >= 3
    assert all(u["_condor_JOBINFO_MAXINTERVAL"] == "0" for u in updates)
    assert done.exit_ad()["ExitCode"] == "0"


def test_cancelled_conversation_kills_the_job(tmp_path: Path) -> None:
    box, ids = sandbox(tmp_path)
    proc = job(box, ids, "sleep 60")

    async def scenario() -> int | None:
        ours, theirs = await channel_pair()
        calls: list[tuple[int, dict[str, str]]] = []
        seen = asyncio.Event()
        shadow = asyncio.create_task(answering_shadow(theirs, calls, seen))
        task = asyncio.create_task(_run_job(ShadowSyscalls(ours), proc, ShadowOptions()))
        while not any(n == REGISTER_JOB_INFO for n, _ in calls):
            seen.clear()
            await seen.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert proc.proc is not None
        code = await proc.proc.wait()
        shadow.cancel()
        await ours.close()
        await theirs.close()
        return code

    assert asyncio.run(scenario()) == -9


def test_a_job_that_cannot_start_names_the_reason(tmp_path: Path) -> None:
    box, ids = sandbox(tmp_path)
    script = box / "job.sh"
    script.write_text("#!/nonexistent/sh\ntrue\n")
    os.chmod(script, 0o755)
    proc = JobProcess([str(script), "a"], box, {}, ids, None)
    with pytest.raises(JobSetupError) as info:
        asyncio.run(proc.start())
    assert info.value.errno == 2
    assert "invalid interpreter (/nonexistent/sh) specified on first line of script" in str(
        info.value)


def test_a_reaped_jobs_usage_reads_no_proc_of_its_old_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box, ids = sandbox(tmp_path)
    proc = job(box, ids, "exit 0")
    done, _ = asyncio.run(run(proc, 30))
    assert done.exit_ad()["ExitCode"] == "0"
    peak = asyncio.run(proc.usage())["ResidentSetSize"]
    # the old pid now another process's (pid reuse): its resident set is not the job's
    monkeypatch.setattr(shadow_job, "rss_kb", lambda pid: 10**9)
    assert asyncio.run(proc.usage())["ResidentSetSize"] == peak
