"""What a transfer plugin can reach, with real processes, a real cgroup and a scripted
shadow: the files the shadow sends are the job user's as they arrive, never setuid,
so a job's own plugin (a file it sent) runs as the user whatever mode it came with;
each run is in a cgroup of its own, killed after it, so nothing the plugin started
outlives it; a plugin past its time whose child holds its output ends the run at
once; the job's own plugins are refused where there is no cgroup to run them in."""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.cgroups.tree import CgroupTree, JobCgroup
from execd.wire.classad_codec import encode_ad
from execd.wire.filetransfer import TransferResult, download_sandbox
from execd.wire.plugin_runner import PluginJob
from execd.wire.transfer_plugins import PluginTable, discover_plugins
from execd.wire.url_inputs import UrlInputs
from tests.starter_dirs import job_workdir
from tests.system.test_url_input_plugins import GOOD, NOBODY, Shadow, enc

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs plugins as nobody: root")

# A job's own plugin that writes who it runs as; sent setuid root, it would say euid=0.
IDS_C = r"""#include <stdio.h>
#include <unistd.h>
int main(void) {
  FILE *f = fopen("ids", "w");
  if (!f) return 2;
  fprintf(f, "ruid=%d euid=%d\n", (int)getuid(), (int)geteuid());
  fclose(f);
  return 1;
}
"""


def _int(value: int) -> tuple[str, bytes]:
    return ("recv", enc().put_int(value).payload())


def shadow_sending(items: list[tuple[str, ...]]) -> Shadow:
    """An upload of `items`: ("file", name, mode, body) / ("dir", name, mode) /
    ("url", name, url); GoAhead after the first name; the acks at the end."""
    script = [("recv", encode_ad(enc().put_int(0), {"SandboxSize": "1"}).payload())]
    for i, (kind, name, *rest) in enumerate(items):
        script += [_int({"file": 1, "dir": 6, "url": 5}[kind]),
                   ("recv", enc().put_string(name).payload())]  # fmt: skip
        if i == 0:
            script += [_int(300), ("send", b""), ("send", b""),
                       ("recv", encode_ad(enc(), {"Result": "2"}).payload())]  # fmt: skip
        if kind == "url":
            script.append(("recv", enc().put_string(rest[0]).payload()))
            continue
        script.append(_int(int(rest[0])))
        if kind == "file":
            body = rest[1].encode() if isinstance(rest[1], str) else rest[1]
            script += [("recv", enc().put_int(len(body)).put_int(262144).payload()),
                       ("recv", body)]  # fmt: skip
    script += [_int(0), ("recv", encode_ad(enc(), {"Result": "0"}).payload()), ("send", b"")]
    return Shadow(script)


@pytest.fixture
def place() -> Iterator[Path]:
    with job_workdir("execd-urliso-") as path:
        (path / "plugins").mkdir(mode=0o755)
        (path / "pids").mkdir()
        (path / "pids").chmod(0o777)
        (path / "sandbox").mkdir(mode=0o700)
        yield path


@pytest.fixture
def cgroup(tree: CgroupTree) -> JobCgroup:
    return tree.job("slot1.plugins")


def download(place: Path, items: list[tuple[str, ...]], *, table: PluginTable | None = None,
             job_plugins: str = "", cgroup: JobCgroup | None = None,
             timeout_s: float = 30) -> TransferResult:  # fmt: skip
    sandbox = place / "sandbox"
    urls = UrlInputs(table or PluginTable(), PluginJob(
        sandbox, (NOBODY, NOBODY), {"PATH": os.defpath}, timeout_s, cgroup), job_plugins)
    shadow = shadow_sending(items)
    result = asyncio.run(download_sandbox(shadow, sandbox, urls=urls, owner=(NOBODY, NOBODY)))
    assert not shadow.script  # the conversation ran to its end
    return result


def node_plugin(place: Path, body: str) -> PluginTable:
    path = place / "plugins" / "test_plugin"
    path.write_text(body)
    path.chmod(0o755)
    return discover_plugins([str(path)], user=(NOBODY, NOBODY))


def alive(pid: int) -> bool:
    """Whether `pid` is still running (a zombie is not), once a SIGKILL sent to it has
    had up to 10 s to land: its pidfd turns readable as it exits."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        select.select([pidfd], [], [], 10)
    finally:
        os.close(pidfd)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_setuid_file_the_shadow_sends_is_the_users_and_runs_as_the_user(
        place: Path, cgroup: JobCgroup) -> None:  # fmt: skip
    source = place / "ids.c"
    source.write_text(IDS_C)
    subprocess.run(["cc", "-o", str(place / "ids"), str(source)], check=True)
    result = download(place, [("file", "evil", 0o104755, (place / "ids").read_bytes()),
                              ("url", "data.txt", "test://x/data.txt")],
                      job_plugins="test=evil", cgroup=cgroup)  # fmt: skip
    evil = os.stat(place / "sandbox" / "evil")
    assert (evil.st_uid, stat.S_IMODE(evil.st_mode)) == (NOBODY, 0o755)
    assert (place / "sandbox" / "ids").read_text() == f"ruid={NOBODY} euid={NOBODY}\n"
    assert result.hold_code == 12  # it exited 1: a failed plugin, run as the user


def test_a_job_plugin_only_its_user_may_read_runs(place: Path, cgroup: JobCgroup) -> None:
    result = download(place, [("file", "myplugin.sh", 0o700, GOOD),
                              ("url", "data.txt", "test://x/data.txt")],
                      job_plugins="test=myplugin.sh", cgroup=cgroup)  # fmt: skip
    assert result.ok, result.hold_reason
    sandbox = place / "sandbox"
    assert (sandbox / "data.txt").read_text() == f"test://x/data.txt as {NOBODY} in {sandbox}\n"


def test_a_url_lands_in_a_directory_the_shadow_made(place: Path) -> None:
    result = download(place, [("dir", "sub", 0o2755), ("url", "sub/data.txt", "test://x/d")],
                      table=node_plugin(place, GOOD))  # fmt: skip
    assert result.ok, result.hold_reason
    made = os.stat(place / "sandbox" / "sub")
    assert (made.st_uid, made.st_mode & 0o7000) == (NOBODY, 0)  # no setgid from the wire
    assert (place / "sandbox" / "sub" / "data.txt").read_text().startswith("test://x/d as ")


def test_what_a_plugin_leaves_running_is_killed_with_its_cgroup(
        place: Path, cgroup: JobCgroup) -> None:  # fmt: skip
    pids = place / "pids" / "left"
    body = GOOD.replace("\nsed", f"\nsetsid sh -c 'echo $$ > {pids}; exec sleep 600' "
                        "</dev/null >/dev/null 2>&1 &\nwhile [ ! -s " + str(pids) +
                        " ]; do :; done\nsed", 1)  # fmt: skip
    result = download(place, [("url", "data.txt", "test://x/data.txt")],
                      table=node_plugin(place, body), cgroup=cgroup)  # fmt: skip
    assert result.ok, result.hold_reason
    assert not alive(int(pids.read_text()))
    assert not list(cgroup.slice.parent.glob("slot1.plugins*"))  # removed after the run


def test_each_plugin_run_has_a_cgroup_of_its_own_name(place: Path, cgroup: JobCgroup) -> None:
    """`<slot>.plugins.<n>.slice`, a new n a run: removing one run's cgroup (after a
    cancelled conversation) never removes the next run's."""
    seen = place / "pids" / "cgroups"
    body = GOOD.replace("\nsed", f"\ncat /proc/self/cgroup >> {seen}\nsed", 1)
    for _ in range(2):
        (place / "sandbox" / "data.txt").unlink(missing_ok=True)
        result = download(place, [("url", "data.txt", "test://x/data.txt")],
                          table=node_plugin(place, body), cgroup=cgroup)  # fmt: skip
        assert result.ok, result.hold_reason
    names = [line.rsplit("/", 2)[-2] for line in seen.read_text().splitlines()
             if line.startswith("0::")]  # fmt: skip
    assert len(names) == 2 and names[0] != names[1], names
    assert all(n.startswith("slot1.plugins.") and n.endswith(".slice") for n in names), names
    assert not list(cgroup.slice.parent.glob("slot1.plugins*"))


def test_a_plugin_past_its_time_whose_child_holds_its_output_ends_at_once(
        place: Path) -> None:  # fmt: skip
    """No cgroup here: the session is killed, the setsid child is not, and holds the
    pipe; the run still ends within the bounded wait after the kill."""
    pids = place / "pids" / "held"
    body = GOOD.split("\nsed", 1)[0] + f"\nsetsid sh -c 'echo $$ > {pids}; exec sleep 60' &\n" \
        "sleep 100\n"  # fmt: skip
    started = time.monotonic()
    try:
        result = download(place, [("url", "data.txt", "test://x/data.txt")],
                          table=node_plugin(place, body), timeout_s=1)  # fmt: skip
        assert time.monotonic() - started < 10
        assert result.hold_code == 12 and "exit code 62" in result.hold_reason
    finally:
        if pids.exists():
            os.kill(int(pids.read_text()), signal.SIGKILL)


def test_the_jobs_own_plugins_are_refused_without_a_cgroup(place: Path) -> None:
    """As STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS = true refuses them."""
    result = download(place, [("file", "myplugin.sh", 0o755, GOOD),
                              ("url", "data.txt", "test://x/data.txt")],
                      job_plugins="test=myplugin.sh")  # fmt: skip
    assert (result.hold_code, result.hold_subcode) == (12, -1002)
    assert result.hold_reason == "FILETRANSFER:1:user-supplied plugin myplugin.sh not allowed"
    assert not (place / "sandbox" / "data.txt").exists()


@pytest.mark.parametrize(("mode", "fetched_by"), [(0, "job"), (1, None), (2, "node")])
def test_the_knob_allows_refuses_or_ignores_the_jobs_own_plugins(
        place: Path, cgroup: JobCgroup, mode: int, fetched_by: str | None) -> None:  # fmt: skip
    node = node_plugin(place, GOOD.replace("as $(id -u)", "by node as $(id -u)"))
    sandbox = place / "sandbox"
    urls = UrlInputs(node, PluginJob(sandbox, (NOBODY, NOBODY), {"PATH": os.defpath}, 30,
                                     cgroup), "test=myplugin.sh")  # fmt: skip
    urls.job_plugin_mode = mode
    shadow = shadow_sending([("file", "myplugin.sh", 0o755, GOOD),
                             ("url", "data.txt", "test://x/data.txt")])  # fmt: skip
    result = asyncio.run(download_sandbox(shadow, sandbox, urls=urls, owner=(NOBODY, NOBODY)))
    if fetched_by is None:
        assert (result.hold_subcode, result.hold_reason) == (
            -1002, "FILETRANSFER:1:user-supplied plugin myplugin.sh not allowed")
        return
    assert result.ok, result.hold_reason
    text = (sandbox / "data.txt").read_text()
    assert ("by node" in text) == (fetched_by == "node")


def test_a_classad_query_whose_child_holds_the_pipe_ends_at_its_timeout(place: Path) -> None:
    """`-classad` answered, then a child keeps the output open: the query ends at its
    timeout (condor's error code ETIMEDOUT, 110) and the child is killed with it."""
    pids = place / "pids" / "query"
    path = place / "plugins" / "slow_plugin"
    path.write_text(f"#!/bin/sh\nsh -c 'echo $$ > {pids}; exec sleep 600' &\n"
                    "echo 'SupportedMethods = \"slow\"'\n")  # fmt: skip
    path.chmod(0o755)
    started = time.monotonic()
    table = discover_plugins([str(path)], timeout_s=2, user=(NOBODY, NOBODY))
    assert time.monotonic() - started < 8
    assert table.errors == [f"FILETRANSFER:110:No output from {path} -classad, ignoring"]
    assert not alive(int(pids.read_text()))


def test_a_directory_where_the_run_files_go_holds_the_job(place: Path) -> None:
    """The shadow made `.test_plugin.in` a directory: a hold (-1003), not an exception
    that ends the conversation."""
    result = download(place, [("dir", ".test_plugin.in", 0o755),
                              ("url", "data.txt", "test://x/data.txt")],
                      table=node_plugin(place, GOOD))  # fmt: skip
    assert (result.hold_code, result.hold_subcode) == (12, -1003)
    assert ".test_plugin.in: Is a directory" in result.hold_reason



def test_the_hand_over_gives_nothing_moved_into_the_sandbox_away(place: Path) -> None:
    """The starter's adoption of a sandbox where user code ran changes the directory
    alone: a directory and a file of root's the user renamed in (stood in for here by
    ones made in place), a link to root's and a hard link all stay root's."""
    from execd.starter.sandbox import JobUser, adopt_scratch

    outside = place / "roots"
    outside.mkdir()
    (outside / "secret").write_text("root's\n")
    sandbox = place / "sandbox"
    sandbox.chmod(0o755)
    moved_in = sandbox / "r"
    moved_in.mkdir()
    (moved_in / "s").write_text("root's\n")
    os.chmod(moved_in / "s", 0o600)
    (sandbox / "to_file").symlink_to(outside / "secret")
    os.link(outside / "secret", sandbox / "hard")
    adopt_scratch(str(sandbox), JobUser("nobody", NOBODY, NOBODY, ()))
    top = os.lstat(sandbox)
    assert (top.st_uid, top.st_gid, stat.S_IMODE(top.st_mode)) == (NOBODY, NOBODY, 0o700)
    for path in (moved_in, moved_in / "s", outside, outside / "secret"):
        assert os.lstat(path).st_uid == 0, path
    (sandbox / "link").symlink_to(outside)
    with pytest.raises(NotADirectoryError):  # a link in the sandbox's place is refused
        adopt_scratch(str(sandbox / "link"), JobUser("nobody", NOBODY, NOBODY, ()))
    assert os.stat(outside).st_uid == 0


def test_the_changed_files_baseline_is_the_users_view_and_survives_any_stat_error(
        place: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The baseline of the sandbox's files (what decides which files go back as
    changed) is taken after a plugin may have left links in it: as the job's user, off
    the loop, an entry whose stat fails left out. A link to a file of root's the user
    cannot reach is not seen through; one whose stat fails with EACCES or ENOTCONN (a
    FUSE mount without allow_other, a dead one: os.stat made to fail so here) does not
    end the conversation."""
    import errno

    from execd.wire.sandbox_upload import sandbox_baseline

    sandbox = place / "sandbox"
    os.chown(sandbox, NOBODY, NOBODY)
    (sandbox / "input").write_text("x")
    os.chown(sandbox / "input", NOBODY, NOBODY)
    private = place / "private"
    private.mkdir(mode=0o700)
    (private / "f").write_text("root's\n")
    (sandbox / "to_root").symlink_to(private / "f")
    (sandbox / "fuse").symlink_to("/fuse/f")
    (sandbox / "dead").symlink_to("/dead/f")
    real_stat = os.stat

    def failing_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        name = os.fspath(path)  # type: ignore[call-overload]
        for suffix, code in (("/fuse", errno.EACCES), ("/dead", errno.ENOTCONN)):
            if isinstance(name, str) and name.endswith(suffix):
                raise OSError(code, os.strerror(code), name)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", failing_stat)
    before = asyncio.run(sandbox_baseline(sandbox, "job"))
    assert before == {"input": real_stat(sandbox / "input").st_mtime}


def test_a_file_of_roots_renamed_onto_the_outfile_is_not_read(place: Path) -> None:
    """The plugin's outfile is its user's after the run: one that renames a file of
    root's (0600, from a directory it may write) onto its name gets nothing of it into
    the hold reason; the outfile is read as the user and only if it is still a file of
    the user's with one link."""
    secret = place / "pids" / "secret.ad"  # pids: 0777, not sticky
    secret.write_text('[ TransferSuccess = false; TransferError = "SECRET"; Url = "x"; '
                      'LocalFileName = "data.txt" ]\n')  # fmt: skip
    secret.chmod(0o600)
    table = node_plugin(place, GOOD.replace("sed -n", f'mv {secret} "$4"; exit 1\nsed -n'))
    result = download(place, [("url", "data.txt", "test://x/data.txt")], table=table)
    assert result.hold_code == 12, result.hold_reason
    assert "SECRET" not in result.hold_reason
    assert os.stat(place / "sandbox" / ".test_plugin.out").st_uid == 0  # it was moved there
