"""URL input files on the starter's side with real plugin processes: a scripted shadow
uploads an input sandbox with a URL item (TransferCommand 5) and a plain file after
it; execd's download runs the plugin (shell scripts speaking the multi-file protocol:
`-infile` ads in, `-outfile` ads out) as the job's user (nobody) in the sandbox. A
plugin that works delivers the file; one that hangs, crashes, writes garbage or
floods its output fails the transfer with a hold code, subcode and reason (the
conversation still runs to its end: both acks), and leaves no process behind."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.wire.classad_codec import decode_ad, encode_ad, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.filetransfer import TransferResult, download_sandbox
from execd.wire.plugin_runner import PluginJob
from execd.wire.transfer_plugins import (
    SUBCODE_NO_RESULT,
    PluginTable,
    discover_plugins,
)
from execd.wire.url_inputs import UrlInputs
from tests.starter_dirs import job_workdir

NOBODY = 65534
URL = "test://server/data.txt"
GOOD = r"""#!/bin/sh
[ "$1" = -classad ] && { echo 'SupportedMethods = "test"'; echo 'MultipleFileSupport = true'
  exit 0; }
sed -n 's/^\[ Url = "\([^"]*\)"; LocalFileName = "\([^"]*\)" \]$/\1 \2/p' "$2" |
while read url local; do
  echo "$url as $(id -u) in $(pwd)" > "$local"
  printf '[ TransferUrl = "%s"; TransferFileName = "%s"; TransferSuccess = true ]\n' \
    "$url" "$local" >> "$4"
done
"""
BEHAVIOURS = {
    "hangs": "echo $$ > {pids}/hung; sleep 600 & echo $! >> {pids}/hung; wait",
    "crashes": "kill -SEGV $$",
    "garbage": 'printf "[ TransferSuccess = tr" > "$4"; exit 0',
    "floods": 'head -c 50000000 /dev/zero | tr "\\0" x; echo "[ TransferUrl = \\"{url}\\"; '
              'TransferSuccess = false; TransferError = \\"flooded\\" ]" > "$4"; exit 1',
}  # fmt: skip


def enc() -> Encoder:
    return Encoder(encrypted=True)


class Shadow:
    """The uploading shadow, scripted: "recv" steps are what we read, "send" steps
    take what we send."""

    def __init__(self, script: list[tuple[str, bytes]]) -> None:
        self.script = script
        self.sent: list[bytes] = []

    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None:
        kind, _ = self.script.pop(0)
        assert kind == "send", f"sent {payload[:40]!r} where the shadow sends"
        self.sent.append(payload)

    async def recv(self, timeout_s: float | None = None) -> bytes:
        kind, payload = self.script.pop(0)
        assert kind == "recv", "waited where the shadow waits"
        return payload

    def encoder(self) -> Encoder:
        return enc()

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload, encrypted=True)


def upload(url: str) -> Shadow:
    """Header; command 5, the name, GoAhead both ways, the URL; a plain file after.txt;
    finished; the shadow's ack, ours."""
    header = encode_ad(enc().put_int(0), {"SandboxSize": "1"}).payload()

    def recv_int(value: int) -> tuple[str, bytes]:
        return ("recv", enc().put_int(value).payload())

    return Shadow([
        ("recv", header), recv_int(5), ("recv", enc().put_string("data.txt").payload()),
        recv_int(300), ("send", b""), ("send", b""),
        ("recv", encode_ad(enc(), {"Result": "2"}).payload()),
        ("recv", enc().put_string(url).payload()),
        recv_int(1), ("recv", enc().put_string("after.txt").payload()), recv_int(0o644),
        ("recv", enc().put_int(1).put_int(262144).payload()), ("recv", b"A"),
        recv_int(0), ("recv", encode_ad(enc(), {"Result": "0"}).payload()), ("send", b""),
    ])  # fmt: skip


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory nobody can traverse: plugins/, sandbox/ (root's 0700, as execd's)."""
    with job_workdir("execd-url-") as path:
        (path / "plugins").mkdir(mode=0o755)
        (path / "pids").mkdir()
        (path / "pids").chmod(0o777)
        (path / "sandbox").mkdir(mode=0o700)
        yield path


def plugin(place: Path, name: str, body: str) -> str:
    path = place / "plugins" / name
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def download(place: Path, table: PluginTable | None, url: str = URL, *,
             timeout_s: float = 30) -> tuple[TransferResult, dict[str, object]]:  # fmt: skip
    sandbox = place / "sandbox"
    urls = UrlInputs(table, PluginJob(sandbox, (NOBODY, NOBODY), {"PATH": os.defpath},
                                      timeout_s))  # fmt: skip
    shadow = upload(url)
    result = asyncio.run(download_sandbox(shadow, sandbox, urls=urls))
    assert not shadow.script  # the conversation ran to its end
    ack = to_classad(decode_ad(Decoder(shadow.sent[-1], encrypted=True), "ack"))
    assert (sandbox / "after.txt").read_bytes() == b"A"  # the CEDAR file all the same
    return result, {k: ack[k] for k in ack}


def table_of(*paths: str) -> PluginTable:
    return discover_plugins(paths, user=(NOBODY, NOBODY))


def test_a_plugin_fetches_the_url_as_the_job_user_in_the_sandbox(place: Path) -> None:
    result, ack = download(place, table_of(plugin(place, "test_plugin", GOOD)))
    sandbox = place / "sandbox"
    assert result.ok and ack["Result"] == 0
    assert sorted(result.files) == ["after.txt", "data.txt"]
    assert (sandbox / "data.txt").read_text() == f"{URL} as {NOBODY} in {sandbox}\n"
    assert not list(sandbox.glob(".test_plugin.*"))  # removed after a success, as condor
    # the URL is not a CEDAR file in the stats the shadow gets (condor counts 1 here)
    assert ack["TransferStats"]["CedarFilesCount"] == 1  # type: ignore[index]


def behaving(place: Path, how: str) -> PluginTable:
    body = GOOD.split("\nsed", 1)[0] + "\n" + BEHAVIOURS[how].format(pids=place / "pids", url=URL)
    return table_of(plugin(place, "test_plugin", body + "\n"))


def test_a_plugin_that_hangs_is_killed_with_its_children_and_the_job_held(place: Path) -> None:
    started = time.monotonic()
    result, ack = download(place, behaving(place, "hangs"), timeout_s=1)
    assert time.monotonic() - started < 10
    assert (result.hold_code, result.hold_subcode) == (12, errno.ETIME)
    # condor_starter reads the outfile of the plugin it killed: no ads, "exit code" ETIME
    out = place / "sandbox" / ".test_plugin.out"
    assert result.hold_reason.endswith(f"exited (exit code {errno.ETIME}), no valid classads "
                                       f"in output file {out}")  # fmt: skip
    assert ack["Result"] == -1 and ack["HoldReasonSubCode"] == errno.ETIME
    for pid in (place / "pids" / "hung").read_text().split():
        assert not Path(f"/proc/{pid}").exists() or \
            "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]  # fmt: skip


def test_a_plugin_that_crashes_holds_the_job_with_its_signal(place: Path) -> None:
    result, _ = download(place, behaving(place, "crashes"))
    assert (result.hold_code, result.hold_subcode) == (12, 11)
    assert "exited (signal 11), no valid classads in output file" in result.hold_reason


def test_garbage_in_the_outfile_holds_the_job(place: Path) -> None:
    result, _ = download(place, behaving(place, "garbage"))
    assert (result.hold_code, result.hold_subcode) == (12, SUBCODE_NO_RESULT)
    out = place / "sandbox" / ".test_plugin.out"
    assert result.hold_reason.endswith(f"exited (exit code 0), no valid classads in output "
                                       f"file {out}")  # fmt: skip


def test_a_plugin_flooding_its_output_is_read_to_its_end_and_its_error_kept(
        place: Path) -> None:  # fmt: skip
    result, _ = download(place, behaving(place, "floods"))
    assert (result.hold_code, result.hold_subcode) == (12, 1 << 8)
    assert "|Error: flooded ( URL file = test://server/data.txt )|" in result.hold_reason


def test_a_url_without_a_plugin_holds_the_job_and_the_transfer_goes_on(place: Path) -> None:
    result, ack = download(place, table_of(plugin(place, "test_plugin", GOOD)),
                           "gopher://server/data.txt")  # fmt: skip
    assert (result.hold_code, ack["Result"]) == (12, -1)
    assert "plugin for type gopher not found" in result.hold_reason


def test_url_transfers_off_hold_the_job_naming_the_knob(place: Path) -> None:
    result, _ = download(place, None)
    assert result.hold_code == 12 and "URL transfers are disabled by configuration" \
        in result.hold_reason  # fmt: skip


def test_plugins_that_cannot_be_asked_are_left_out_and_their_errors_follow_a_failure(
        place: Path) -> None:  # fmt: skip
    broken = plugin(place, "broken_plugin", "#!/bin/sh\necho 'not a classad'\n")
    silent = plugin(place, "silent_plugin", "#!/bin/sh\nexit 0\n")
    missing = str(place / "plugins" / "missing_plugin")
    table = table_of(broken, silent, missing, plugin(place, "test_plugin", GOOD))
    assert table.methods_attr() == "test"
    assert table.errors == [
        f"FILETRANSFER:1:{broken} -classad did not produce a valid classad, ignoring",
        f"FILETRANSFER:1:No output from {silent} -classad, ignoring",
        f"FILETRANSFER:1:FILETRANSFER: Failed to execute {missing} -classad: No such file "
        "or directory skipping",
    ]  # fmt: skip
    result, _ = download(place, table, "gopher://x/y")
    # condor_starter's error stack: the newest first; a missing plugin is a vacate
    assert result.hold_subcode == -1001
    assert result.hold_reason == (
        f"STARTER at 127.0.0.1 - |Error: receiving file {place / 'sandbox' / 'data.txt'}: "
        "FILETRANSFER:1:FILETRANSFER: plugin for type gopher not found!|"
        + "|".join(reversed(table.errors)))


SINGLE = r"""#!/bin/sh
[ "$1" = -classad ] && { echo 'SupportedMethods = "test"'; exit 0; }
case "$1" in
  */missing.txt) echo "TransferUrl = \"$1\""; echo 'TransferError = "not there"'; exit 3;;
esac
echo "$1 as $(id -u)" > "$2"
"""


def test_a_single_file_plugin_runs_once_a_url_with_the_url_and_the_file(place: Path) -> None:
    table = table_of(plugin(place, "single_plugin", SINGLE))
    result, _ = download(place, table)
    assert result.ok and sorted(result.files) == ["after.txt", "data.txt"]
    assert (place / "sandbox" / "data.txt").read_text() == f"{URL} as {NOBODY}\n"


def test_a_single_file_plugins_failure_holds_with_its_printed_error(place: Path) -> None:
    table = table_of(plugin(place, "single_plugin", SINGLE))
    result, _ = download(place, table, "test://server/missing.txt")
    assert (result.hold_code, result.hold_subcode) == (12, 3 << 8)
    assert result.hold_reason == (
        f"STARTER at 127.0.0.1 - |Error: receiving file {place / 'sandbox' / 'data.txt'}: "
        "FILETRANSFER:1:non-zero exit (3) "
        f"from {place / 'plugins' / 'single_plugin'}. |Error: not there ( URL file = "
        "test://server/missing.txt )|")  # fmt: skip


def test_a_plugin_gets_the_jobs_variables_named_for_it_and_the_sites_proxy(
        place: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """condor's mergePluginSpecificEnvironment: the job's TEST_* variables reach
    test_plugin (any case), its others do not; execd's http_proxy does."""
    from execd.wire.url_inputs import job_environment, plugin_env

    monkeypatch.setenv("http_proxy", "http://proxy.site:3128")
    body = GOOD.replace('echo "$url as $(id -u) in $(pwd)" > "$local"',
                        'env | grep -E "^(TEST_|test_|OTHER|http_proxy)" | sort > "$local"')
    sandbox = place / "sandbox"
    job = {"Environment": "TEST_DEBUG=1 test_low=2 OTHER=3"}
    urls = UrlInputs(table_of(plugin(place, "test_plugin", body)), PluginJob(
        sandbox, (NOBODY, NOBODY), plugin_env(job, sandbox), 30, None, job_environment(job)))
    asyncio.run(download_sandbox(upload(URL), sandbox, urls=urls))
    assert (sandbox / "data.txt").read_text() == \
        "TEST_DEBUG=1\nhttp_proxy=http://proxy.site:3128\ntest_low=2\n"  # fmt: skip


def test_a_plugin_that_cannot_be_run_is_acked_as_try_again(place: Path) -> None:
    """condor_starter's ack after an exec failure: Result = 1 ("not our fault, try
    again elsewhere"), subcode -1003."""
    path = plugin(place, "test_plugin", GOOD)
    table = table_of(path)
    Path(path).chmod(0o644)  # asked, then no longer runnable
    result, ack = download(place, table)
    assert (result.hold_code, result.hold_subcode) == (12, -1003)
    assert ack["Result"] == 1 and ack["HoldReasonSubCode"] == -1003
