"""Which sandbox entries go back and under which names (execd/wire/output_files.py):
directories as mkdir items before their contents, `dir/` as its contents, `sub/file`
as `file` (or with its parents under preserve_relative_paths), a missing name kept as
a failing item, FIFOs and sockets left out, links to directories marked unsendable.
The job user's rights, devices, deep and large trees: test_output_safety.py.
The pool tier compares the delivered result with condor_startd's
(tests/pool/test_pool_output_dirs.py)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from pathlib import Path

from wire_pairs import ScriptedPeer

from execd.wire.classad_codec import decode_ad, encode_ad, to_classad
from execd.wire.encoding import Decoder
from execd.wire.output_files import (
    OutputItem,
    expand_outputs,
    output_items,
    spooled_output_files,
)
from execd.wire.sandbox_upload import upload_sandbox


def sandbox(tmp_path: Path) -> Path:
    box = tmp_path / "dir_1"
    (box / "results/sub/deeper").mkdir(parents=True)
    (box / "results/empty_dir").mkdir()
    (box / "results/top.txt").write_text("top\n")
    (box / "results/sub/s.txt").write_text("s\n")
    (box / "results/sub/deeper/d.txt").write_text("d\n")
    (box / "newdir").mkdir()
    (box / "made.txt").write_text("made\n")
    os.mkfifo(box / "results/fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(box / "results/sock"))
    (box / "link").symlink_to("results")
    (box / "filelink").symlink_to("made.txt")
    return box


def shown(items: list[OutputItem]) -> list[str]:
    return [f"{i.name}/" if i.directory else i.name if not i.error else f"{i.name}!{i.error}"
            for i in items]  # fmt: skip


def test_a_directory_is_made_before_its_contents(tmp_path: Path) -> None:
    assert shown(expand_outputs(sandbox(tmp_path), ["results"])) == [
        "results/", "results/empty_dir/", "results/sub/", "results/sub/deeper/",
        "results/sub/deeper/d.txt", "results/sub/s.txt", "results/top.txt"]  # fmt: skip


def test_a_trailing_slash_sends_the_contents_only(tmp_path: Path) -> None:
    assert shown(expand_outputs(sandbox(tmp_path), ["results/"])) == [
        "empty_dir/", "sub/", "sub/deeper/", "sub/deeper/d.txt", "sub/s.txt", "top.txt"]


def test_a_file_in_a_subdirectory_comes_back_by_its_name(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    assert shown(expand_outputs(box, ["results/sub/s.txt"])) == ["s.txt"]
    assert shown(expand_outputs(box, ["results/sub/s.txt"], preserve=True)) == [
        "results/", "results/sub/", "results/sub/s.txt"]


def test_missing_names_and_links_to_directories_fail_when_sent(tmp_path: Path) -> None:
    items = expand_outputs(sandbox(tmp_path), ["nothere.txt", "link"])
    assert shown(items[:1]) == [f"nothere.txt!{errno.ENOENT}"]
    assert items[1].name == "link" and items[1].linked_directory


def test_without_transfer_output_files_subdirectories_stay(tmp_path: Path) -> None:
    items = output_items(sandbox(tmp_path), {"Out": "out.txt"}, [], {})
    assert shown(items) == ["filelink", "made.txt", f"_condor_stdout!{errno.ENOENT}"]


def test_without_transfer_output_files_a_rewritten_executable_stays(tmp_path: Path) -> None:
    # FindChangedFiles skips ExecFile: a job that rewrites its script gets the old one
    box = sandbox(tmp_path)
    (box / "job.sh").write_text("#!/bin/sh\n")
    before = {"job.sh": (box / "job.sh").stat().st_mtime - 10}  # then the job rewrote it
    job = {"Cmd": "/home/u/job.sh", "Out": "out.txt"}
    items = output_items(box, job, ["job.sh"], before)
    assert "job.sh" not in shown(items) and "made.txt" in shown(items)
    # not transferred (Cmd ran where it lies): a file of that name the job made is sent
    assert "job.sh" in shown(output_items(box, job, [], {}))


def test_without_transfer_output_files_the_x509_proxy_stays(tmp_path: Path) -> None:
    # FindChangedFiles skips the basename of the job's X509UserProxy, changed or not;
    # a job that names it in transfer_output_files gets it
    box = sandbox(tmp_path)
    (box / "x509up_u1000").write_text("proxy\n")
    before = {"x509up_u1000": (box / "x509up_u1000").stat().st_mtime - 10}  # refreshed
    job = {"x509userproxy": "/tmp/x509up_u1000", "Out": "out.txt"}  # as condor_submit sets it
    for inputs, mtimes in ((["x509up_u1000"], before), ([], {})):
        items = shown(output_items(box, job, inputs, mtimes))
        assert "x509up_u1000" not in items and "made.txt" in items
    assert "x509up_u1000" in shown(output_items(box, {"Out": "out.txt"}, [], {}))
    assert "x509up_u1000" not in shown(output_items(
        box, {"X509UserProxy": "x509up_u1000"}, [], {}))  # any case, any path
    named = {**job, "TransferOutput": "x509up_u1000"}
    assert "x509up_u1000" in shown(output_items(box, named, ["x509up_u1000"], before))


class Shadow(ScriptedPeer):
    """The downloading shadow's side: go ahead always, ack success; records what came."""

    def __init__(self) -> None:
        super().__init__()
        self.answers = [encode_ad(self.encoder(), {"Result": "2"}).payload(),
                        self.encoder().put_int(300).payload(),
                        encode_ad(self.encoder(), {"Result": "0"}).payload()]  # fmt: skip

    def items(self) -> list[tuple[int, str, int]]:
        """(command, name, mode) of each item, in the order sent."""
        messages = iter(self.sent[1:])  # after the header
        found = []
        while (command := Decoder(next(messages), encrypted=True).get_int()) != 0:
            name = Decoder(next(messages), encrypted=True).get_string()
            if not found:
                next(messages), next(messages)  # our alive interval and GoAhead
            mode = Decoder(next(messages), encrypted=True).get_int()
            found.append((command, name, mode))
            if command == 1:
                size = Decoder(next(messages), encrypted=True).get_int()
                for _ in range(1 if size == 0 else -(-size // 262144)):
                    next(messages)  # the chunks, or the 666 after an empty file
        return found


def test_upload_makes_directories_first_and_holds_for_a_missing_file(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    (box / "results/sub").chmod(0o750)
    (box / "results/sub/deeper").chmod(0o755)  # whatever the umask
    for name in ("results/sub/deeper/d.txt", "results/sub/s.txt", "made.txt"):
        (box / name).chmod(0o644)
    shadow = Shadow()
    result = asyncio.run(upload_sandbox(
        shadow, box, lambda: expand_outputs(box, ["results/sub", "nothere.txt", "made.txt"])))
    assert shadow.items() == [(6, "sub", 0o750), (6, "sub/deeper", 0o755),
                              (1, "sub/deeper/d.txt", 0o644), (1, "sub/s.txt", 0o644),
                              (1, "nothere.txt", 1 << 24), (1, "made.txt", 0o644)]  # fmt: skip
    assert (result.hold_code, result.hold_subcode) == (13, errno.ENOENT)
    assert result.hold_reason.endswith(
        f": |Error: 1 total failures: first failure: reading from file {box}/nothere.txt: "
        "(errno 2) No such file or directory")
    ack = to_classad(decode_ad(Decoder(shadow.sent[-1], encrypted=True)))
    assert ack["Result"] == -1 and ack["HoldReasonSubCode"] == errno.ENOENT
    # condor_starter's DoUpload counts every item sent, mkdirs and dummies included
    assert ack["TransferStats"]["CedarFilesCount"] == 6
    assert ack["HoldReason"].startswith("STARTER at ")


def test_spooled_output_files_names_the_top_level_items_sent_but_stdout_and_stderr() -> None:
    # as condor_starter's transfer lists them in SpooledOutputFiles (a directory once,
    # not its contents), in the order sent
    sent = ["_condor_stdout", "results", "results/top.txt", "out.bin", "_condor_stderr"]
    assert spooled_output_files(sent) == "results,out.bin"
    assert spooled_output_files(["_condor_stdout"]) == ""  # sent empty, as condor_starter's
