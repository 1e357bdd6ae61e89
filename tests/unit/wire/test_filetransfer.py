"""The file transfer protocol, starter's side, against job1.pcap: execd receives the
real shadow's input upload (the executable, GoAhead, mode, size, chunk, acks) and sends
the output exactly as HTCondor's starter did (`_condor_stdout` "hi\\n", an empty
`_condor_stderr` with its 666 marker), byte for byte."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from test_shadow_syscalls import Replay, real_claim_key
from wire_captures import decrypt_conversation

from execd.wire.classad_codec import decode_ad, encode_ad, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.filetransfer import (
    HOLD_DOWNLOAD_FILE_ERROR,
    download_sandbox,
)
from execd.wire.output_files import OutputItem, output_items, std_files
from execd.wire.sandbox_upload import upload_sandbox

INPUT, OUTPUT, SHADOW = 20473, 26671, 2673


def names(items: list[OutputItem]) -> list[str]:
    return [item.name for item in items]


def conversation(port: int) -> tuple[list[bytes], list[bytes]]:
    starter, shadow = decrypt_conversation("job1.pcap", port, SHADOW, real_claim_key())
    assert Decoder(starter[0], encrypted=True).get_string() == "1#6b02cc24fd556f9283444d1"
    return starter[1:], shadow  # the TransferKey is sent before the protocol starts


def test_input_download_of_the_real_shadows_upload(tmp_path: Path) -> None:
    starter, shadow = conversation(INPUT)
    # The order on the wire: header, command, name, alive interval from the shadow; our
    # GoAhead and alive interval; its GoAhead; mode, size, data, finished, its ack; ours.
    script = [("recv", m) for m in shadow[:4]] + [("send", starter[0]), ("send", starter[1])]
    script += [("recv", m) for m in shadow[4:]] + [("send", starter[2])]
    replay = Replay(script)
    result = asyncio.run(download_sandbox(replay, tmp_path, executable="/bin/echo"))
    assert not replay.script
    assert result.ok and result.files == ["echo"] and result.bytes == 43464
    echo = tmp_path / "echo"
    assert echo.read_bytes() == shadow[7] and echo.read_bytes()[:4] == b"\x7fELF"
    assert stat.S_IMODE(echo.stat().st_mode) == 0o755


def test_output_upload_equals_the_real_starters(tmp_path: Path) -> None:
    starter, shadow = conversation(OUTPUT)
    (tmp_path / "_condor_stdout").write_bytes(b"hi\n")
    (tmp_path / "_condor_stderr").write_bytes(b"")
    for name in ("_condor_stdout", "_condor_stderr"):
        os.chmod(tmp_path / name, 0o644)
    # header, command, name, our alive interval; its GoAhead and alive interval; ours...
    script = [("send", m) for m in starter[:4]] + [("recv", shadow[0]), ("recv", shadow[1])]
    script += [("send", m) for m in starter[4:]] + [("recv", shadow[2])]
    replay = Replay(script)
    result = asyncio.run(upload_sandbox(replay, tmp_path, lambda: output_items(
        tmp_path, {"Out": "out.txt", "Err": "err.txt"}, [], {})))
    assert not replay.script
    assert result.ok and result.files == ["_condor_stdout", "_condor_stderr"]


def test_std_files_as_condor_starter_remaps_them(tmp_path: Path) -> None:
    # Out and Err: their own files; the same file: stderr into stdout's; unset or
    # /dev/null: discarded, and not sent back
    assert std_files({"Out": "o", "Err": "e"}) == ("_condor_stdout", "_condor_stderr")
    assert std_files({"Out": "both", "Err": "both"}) == ("_condor_stdout", "_condor_stdout")
    assert std_files({"Out": "/dev/null", "Err": "/dev/null"}) == (None, None)
    assert std_files({"Err": "e"}) == (None, "_condor_stderr")
    assert std_files({"Out": "o"}) == ("_condor_stdout", None)
    (tmp_path / "_condor_stdout").write_text("both\n")
    (tmp_path / "made.txt").write_text("x\n")
    assert names(output_items(tmp_path, {"Out": "both", "Err": "both"}, [], {})) == \
        ["made.txt", "_condor_stdout"]
    assert names(output_items(tmp_path, {}, [], {})) == ["made.txt"]


def _enc() -> Encoder:
    return Encoder(encrypted=True)


def _int(value: int) -> tuple[str, bytes]:
    return ("recv", _enc().put_int(value).payload())


def test_subdirectories_and_an_escaping_name(tmp_path: Path) -> None:
    header = encode_ad(_enc().put_int(0), {"SandboxSize": "2"}).payload()
    go = encode_ad(_enc(), {"Result": "2"}).payload()
    ack = encode_ad(_enc(), {"Result": "0"}).payload()

    def file(name: str, data: bytes, command: int = 1) -> list[tuple[str, bytes]]:
        steps = [_int(command), ("recv", _enc().put_string(name).payload())]
        if command == 6:
            return [*steps, _int(0o750)]
        steps += [_int(0o640), ("recv", _enc().put_int(len(data)).put_int(262144).payload())]
        return steps + ([("recv", data)] if data else [_int(666)])

    script = [("recv", header), *file("dir", b"", 6)][:3]
    script += [_int(300), ("any", b""), ("any", b""), ("recv", go), _int(0o750)]
    script += file("dir/a.txt", b"A") + file("empty", b"") + file("../evil", b"x")
    script += [_int(0), ("recv", ack), ("any", b"")]

    class Loose(Replay):
        async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None:
            kind, _ = self.script.pop(0)
            assert kind == "any"
            self.sent.append(payload)

    replay = Loose(script)
    result = asyncio.run(download_sandbox(replay, tmp_path))
    assert (tmp_path / "dir").is_dir() and stat.S_IMODE((tmp_path / "dir").stat().st_mode) == 0o750
    assert (tmp_path / "dir" / "a.txt").read_bytes() == b"A"
    assert (tmp_path / "empty").read_bytes() == b""
    assert not (tmp_path.parent / "evil").exists()
    assert (result.hold_code, result.hold_subcode) == (HOLD_DOWNLOAD_FILE_ERROR, 1)  # EPERM
    ours = to_classad(decode_ad(Decoder(replay.sent[-1], encrypted=True)))
    assert ours["Result"] == -1 and ours["HoldReasonCode"] == 12
    assert "illegal sandbox path: ../evil" in ours["HoldReason"]
