"""After a restart in place, a refreshed proxy (500/487) goes only to the sandbox the
job started in: execd.wire.shadow_resume.resumed_proxy_target checks the sandbox found
at dir_N (lstat: a link is no sandbox) against the Conversation record (device, inode,
the job's uid); a record made before those were kept (they read None) needs at least
a sandbox owned by the job's user, never root."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from structlog.testing import capture_logs

from execd.wire.conversation_record import Conversation
from execd.wire.shadow_resume import resumed_proxy_target

JOB_UID = 65534


def started(tmp_path: Path) -> tuple[Path, Conversation]:
    """A sandbox of the job's and the record its start wrote."""
    box = tmp_path / "dir_1"
    box.mkdir()
    os.chown(box, JOB_UID, JOB_UID)
    st = os.lstat(box)
    state = Conversation("s#1.0#1", {}, str(box), [], {}, True, {}, None, 0,
                         sandbox_dev=st.st_dev, sandbox_ino=st.st_ino,
                         job_uid=JOB_UID)  # fmt: skip
    return box, state


def test_the_recorded_sandbox_gets_the_refresh(tmp_path: Path) -> None:
    box, state = started(tmp_path)
    target = resumed_proxy_target(state, "proxy.pem", JOB_UID)
    assert target is not None and (target.sandbox, target.uid) == (str(box), JOB_UID)


def test_another_directory_or_a_link_at_dir_n_gets_nothing(tmp_path: Path) -> None:
    box, state = started(tmp_path)
    other = tmp_path / "other"  # made while dir_1 exists: another inode
    other.mkdir()
    os.chown(other, JOB_UID, JOB_UID)
    box.rmdir()  # the job (or anyone) put another directory of its own in its place
    other.rename(box)
    with capture_logs() as events:
        assert resumed_proxy_target(state, "proxy.pem", JOB_UID) is None
    assert [e["event"] for e in events] == ["sandbox_not_as_recorded"]
    box.rmdir()
    (tmp_path / "elsewhere").mkdir()
    os.chown(tmp_path / "elsewhere", JOB_UID, JOB_UID)
    box.symlink_to(tmp_path / "elsewhere")
    assert resumed_proxy_target(state, "proxy.pem", JOB_UID) is None


def test_a_record_from_before_needs_the_jobs_own_sandbox(tmp_path: Path) -> None:
    box, recorded = started(tmp_path)
    old = dataclasses.replace(recorded, sandbox_dev=None, sandbox_ino=None, job_uid=None)
    assert Conversation.from_json({k: v for k, v in recorded.to_json().items()
                                   if k not in ("sandbox_dev", "sandbox_ino", "job_uid")}) \
        == old  # fmt: skip
    assert resumed_proxy_target(old, "proxy.pem", JOB_UID) is not None
    with capture_logs():
        assert resumed_proxy_target(old, "proxy.pem", None) is None  # whose job?
        os.chown(box, 1234, 1234)
        assert resumed_proxy_target(old, "proxy.pem", JOB_UID) is None
        os.chown(box, 0, 0)
        assert resumed_proxy_target(old, "proxy.pem", 0) is None
