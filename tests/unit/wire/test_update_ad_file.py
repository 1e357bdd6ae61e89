"""`.update.ad` (execd/daemon/update_ad.py): the slot's ad written into a job's sandbox
as the daemon, root, publishes the slot, without following anything the job planted,
never once the sandbox is being removed; and what the job's updates take from it."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import stat
import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from execd.daemon import update_ad
from execd.daemon.pool_conversation import recorded_sandbox
from execd.daemon.update_ad import (
    SandboxIdentity,
    UpdateAdFile,
    copy_update_attrs,
    update_attrs,
    write_update_ad,
)
from execd.wire.classad_codec import from_values, unparse_old
from execd.wire.conversation_record import Conversation

JOB_UID, JOB_GID = 65534, 65534
AD = from_values({"Name": "slot1_1@host", "Cpus": 1, "CPUsUsage": 0.5, "State": "Claimed"})


def sandbox(tmp_path: Path) -> SandboxIdentity:
    directory = tmp_path / "dir_1"
    directory.mkdir()
    os.chown(directory, JOB_UID, JOB_GID)
    found = SandboxIdentity.of(str(directory), JOB_UID, JOB_GID)
    assert found is not None
    return found


def test_written_as_the_jobs_file_renamed_into_place(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    (Path(box.path) / ".update.ad.tmp").symlink_to(tmp_path / "elsewhere")  # the job's
    write_update_ad(box, "Name = \"slot1_1@host\"\n")
    done = os.lstat(Path(box.path) / ".update.ad")
    assert (done.st_uid, done.st_gid, stat.S_IMODE(done.st_mode)) == (JOB_UID, JOB_GID, 0o644)
    assert (Path(box.path) / ".update.ad").read_text() == 'Name = "slot1_1@host"\n'
    assert sorted(os.listdir(box.path)) == [".update.ad"]  # the planted link is gone
    assert not (tmp_path / "elsewhere").exists()  # never followed


def test_a_sandbox_swapped_for_a_link_or_another_directory_gets_nothing(
        tmp_path: Path) -> None:  # fmt: skip
    box = sandbox(tmp_path)
    os.rename(box.path, tmp_path / "moved")
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, JOB_UID, JOB_GID)
    os.symlink(other, box.path)
    with pytest.raises(OSError, match=r"Too many levels|Not a directory"):
        write_update_ad(box, "A = 1\n")
    os.unlink(box.path)
    os.rename(other, box.path)  # a directory, but not the one the job started in
    with pytest.raises(PermissionError, match="not the job's own directory"):
        write_update_ad(box, "A = 1\n")
    assert os.listdir(box.path) == [] and os.listdir(tmp_path / "moved") == []


def test_a_root_owned_sandbox_gets_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "dir_1"
    directory.mkdir()
    box = SandboxIdentity.of(str(directory), 0, 0)
    assert box is not None
    with pytest.raises(PermissionError):
        write_update_ad(box, "A = 1\n")


def test_private_attributes_never_reach_the_file(tmp_path: Path) -> None:
    async def main() -> str:
        box = sandbox(tmp_path)
        writer = UpdateAdFile(box, "1.0")
        writer.enabled = True
        writer.publish({**AD, "ClaimId": '"<1.2.3.4:5>#1#2#secret"', "Capability": '"x"'})
        await writer.drained()
        return (Path(box.path) / ".update.ad").read_text()

    text = asyncio.run(main())
    assert "secret" not in text and "ClaimId" not in text and "Capability" not in text
    assert text.splitlines() == ['CPUsUsage = 0.5', 'Cpus = 1', 'Name = "slot1_1@host"',
                                 'State = "Claimed"']  # fmt: skip


def test_nothing_is_written_before_the_first_update_nor_once_closed(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], list[str], int]:
        box = sandbox(tmp_path)
        writer = UpdateAdFile(box, "1.0")
        writer.publish(AD)  # not enabled: the starter has sent no update yet
        await asyncio.sleep(0)
        before = os.listdir(box.path)
        writer.enabled = True
        writer.publish(AD)
        await writer.drained()
        writer.publish(AD)
        await writer.close()  # the sandbox's removal begins: no write after this
        after = os.listdir(box.path)
        writer.publish(AD)
        await writer.drained()
        return before, after, writer.writes

    before, after, writes = asyncio.run(main())
    assert before == [] and after == [".update.ad"] and writes == 1  # the second: closed


def test_the_updates_take_cpususage_from_the_last_ad_written() -> None:
    names = ["CpusUsage"]
    update: dict[str, object] = {"CpusUsage": 9.0, "ImageSize": 10}
    copy_update_attrs(update, None, names)  # no file yet: nothing copied
    assert update == {"CpusUsage": 9.0, "ImageSize": 10}
    copy_update_attrs(update, AD, names)  # the slot ad's CPUsUsage, named as the update's
    assert unparse_old(update["CpusUsage"]) == "0.5" and update["ImageSize"] == 10
    copy_update_attrs(update, {"Name": '"x"'}, names)  # an ad without it: deleted
    assert update == {"ImageSize": 10}


def test_the_cron_metrics_usage_is_taken_too() -> None:
    class Settings:
        def get_list(self, name: str) -> list[str]:
            return {"STARTD_CRON_JOBLIST": ["GPU"],
                    "STARTD_CRON_GPU_METRICS": ["PEAK:GPUsMemory", "SUM:GPUs"]}.get(name, [])

    assert update_attrs(Settings()) == [
        "CpusUsage", "GPUsMemoryUsage", "GPUsMemoryAverageUsage", "RecentGPUsMemoryUsage",
        "GPUsUsage", "GPUsAverageUsage", "RecentGPUsUsage",
    ]  # fmt: skip


def test_a_write_queued_behind_a_slow_one_never_lands_once_closed(tmp_path: Path) -> None:
    """The writer's thread is busy (a slow filesystem): the write waits in its queue,
    the sandbox's removal begins meanwhile; close() returns once the queue has passed
    it, and it wrote nothing."""
    async def main() -> tuple[list[str], int]:
        box = sandbox(tmp_path)
        writer = UpdateAdFile(box, "1.0")
        writer.enabled = True
        slow = threading.Event()
        busy = asyncio.ensure_future(update_ad._WORKER.run(10, slow.wait, 10))
        writer.publish(AD)
        await asyncio.sleep(0)  # the write is queued behind the slow call
        closing = asyncio.ensure_future(writer.close())
        await asyncio.sleep(0)
        assert not closing.done()
        slow.set()
        await asyncio.gather(busy, closing)
        await writer.drained()
        return os.listdir(box.path), writer.writes

    assert asyncio.run(main()) == ([], 0)


def test_a_hung_write_holds_one_write_per_job_and_not_its_updates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The writer's thread hangs (a stalled sandbox filesystem) while the slot is
    published again and again: the job's first update waits a bounded time, the queue
    holds one write of the job's, and once the thread is free the latest ad alone
    follows the one in flight."""
    monkeypatch.setattr(update_ad, "WRITE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(update_ad, "FIRST_WRITE_WAIT_S", 0.2)

    async def main() -> tuple[float, int, int, str]:
        box = sandbox(tmp_path)
        writer = UpdateAdFile(box, "1.0")
        writer.enabled = True
        hung = threading.Event()
        stuck = asyncio.ensure_future(update_ad._WORKER.run(30, hung.wait, 30))
        await asyncio.sleep(0)
        for number in range(20):
            writer.publish({**AD, "Seq": str(number)})
            await asyncio.sleep(0.02)  # past the write's time limit, again and again
        began = asyncio.get_running_loop().time()
        await writer.first_written()  # the job's first update: bounded, not drained
        await writer.first_written()  # and once only
        waited = asyncio.get_running_loop().time() - began
        queued = update_ad._WORKER._queue.qsize()
        hung.set()
        await stuck
        await writer.drained()
        return waited, queued, writer.writes, (Path(box.path) / ".update.ad").read_text()

    waited, queued, writes, text = asyncio.run(main())
    assert waited < 1.0
    assert queued == 1  # the job's one write, behind the hung call; not one per publish
    assert writes == 2 and "Seq = 19" in text  # the first, then the latest only


def test_a_job_that_blocks_the_file_is_warned_of_once(tmp_path: Path) -> None:
    async def main() -> list[str]:
        box = sandbox(tmp_path)
        (Path(box.path) / ".update.ad").mkdir()  # the job's: a rename cannot replace it
        writer = UpdateAdFile(box, "1.0")
        writer.enabled = True
        with capture_logs() as events:
            for _ in range(3):
                writer.publish(AD)
                await writer.drained()
        return [e["log_level"] for e in events if e["event"] == "update_ad_not_written"]

    assert asyncio.run(main()) == ["warning"]  # the later two at debug level only


def test_a_periodic_publish_writes_on_a_change_of_state_or_when_due(tmp_path: Path) -> None:
    """condor_startd writes .update.ad as the slot's update is due: its state changed,
    or its interval passed; not at every round another slot's change causes."""
    async def main() -> list[int]:
        box = sandbox(tmp_path)
        writer = UpdateAdFile(box, "1.0")
        writer.enabled = True
        counts = []
        for ad, interval in ((AD, 300.0), ({**AD, "CPUsUsage": "0.9"}, 300.0),
                             ({**AD, "Activity": '"Suspended"'}, 300.0),
                             ({**AD, "Activity": '"Suspended"'}, 0.0)):  # fmt: skip
            writer.publish(ad, interval)
            await writer.drained()
            counts.append(writer.writes)
        return counts

    assert asyncio.run(main()) == [1, 1, 2, 3]


def test_after_a_restart_the_file_has_the_group_recorded_at_the_jobs_start(
        tmp_path: Path) -> None:  # fmt: skip
    """The conversation's record keeps the job's group; a record made before it did
    reads as the user's primary group."""
    box = tmp_path / "dir_1"
    box.mkdir()
    os.chown(box, JOB_UID, JOB_GID)
    st = os.lstat(box)
    state = Conversation("s#1.0#1", {}, str(box), [], {}, True, {}, None, 0,
                         sandbox_dev=st.st_dev, sandbox_ino=st.st_ino, job_uid=JOB_UID,
                         job_gid=4242)  # fmt: skip
    stored = json.loads(json.dumps(state.to_json()))
    identity = recorded_sandbox(Conversation.from_json(stored))
    assert identity is not None
    write_update_ad(identity, "A = 1\n")
    assert os.lstat(box / ".update.ad").st_gid == 4242
    del stored["job_gid"]  # a record from before
    older = recorded_sandbox(Conversation.from_json(stored))
    assert older is not None and older.gid == pwd.getpwuid(JOB_UID).pw_gid
