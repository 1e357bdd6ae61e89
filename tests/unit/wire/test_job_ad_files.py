"""The job's `.job.ad` and `.machine.ad` (execd/starter/ad_files.py): the long form
condor_starter writes (names in byte order, private attributes left out), written
without following a link the job's input put there, never sent back with the output;
the job ad as condor_starter holds it then (Orig*, the remapped stdio and Iwd).
Against the pool's condor_startd: tests/pool/test_pool_job_ad_files.py."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from execd.starter import ad_files
from execd.starter.ad_files import ad_file_env, write_ad_files
from execd.wire.classad_codec import from_values, long_form
from execd.wire.output_files import output_items
from execd.wire.shadow_job import job_env, starter_job_ad

SECRET = "<127.0.0.1:9618>#1#2#[Encryption=\"YES\";]0123456789abcdef"


def test_long_form_is_one_line_each_in_byte_order_without_private_attributes() -> None:
    ad = from_values({"b": 1, "Zeta": "z", "ClaimId": SECRET, "capability": SECRET,
                      "TransferKey": "k", "_condor_privSecret": "s", "Args": "a\nb",
                      "Alpha": True})  # fmt: skip
    assert long_form(ad) == 'Alpha = true\nArgs = "a\\nb"\nZeta = "z"\nb = 1\n'


def test_the_files_replace_an_inputs_link_without_following_it(tmp_path: Path) -> None:
    box, target = tmp_path / "dir_1", tmp_path / "precious"
    box.mkdir()
    target.write_text("keep\n")
    (box / ".job.ad").symlink_to(target)  # brought by the job's input
    write_ad_files(str(box), "A = 1\n", "Memory = 128\n", os.getuid(), os.getgid())
    assert target.read_text() == "keep\n"
    job_ad, machine_ad = box / ".job.ad", box / ".machine.ad"
    assert job_ad.read_text() == "A = 1\n" and machine_ad.read_text() == "Memory = 128\n"
    for path in (job_ad, machine_ad):
        st = path.lstat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert ad_file_env(str(box)) == {"_CONDOR_JOB_AD": str(job_ad),
                                     "_CONDOR_MACHINE_AD": str(machine_ad)}  # fmt: skip
    assert job_env({}, box).items() >= ad_file_env(str(box)).items()


def test_a_job_ad_value_that_is_not_utf8_is_written_as_its_bytes(tmp_path: Path) -> None:
    """The shadow's strings are decoded with surrogateescape: an Iwd in a latin-1
    submit directory goes into `.job.ad` as the bytes it came as (it raised before)."""
    job = {"Iwd": b'"/home/u/caf\xe9"'.decode("utf-8", "surrogateescape")}
    write_ad_files(str(tmp_path), long_form(job), "Memory = 128\n", os.getuid(), os.getgid())
    assert (tmp_path / ".job.ad").read_bytes() == b'Iwd = "/home/u/caf\xe9"\n'


def test_the_ads_never_go_back(tmp_path: Path) -> None:
    box = tmp_path / "dir_1"
    box.mkdir()
    for name in (".job.ad", ".machine.ad", ".update.ad", ".update.ad.tmp", "result.txt"):
        (box / name).write_text("x\n")
    changed = output_items(box, {}, [], {})
    assert [item.name for item in changed] == ["result.txt"]
    named = output_items(box, {"TransferOutput": ".job.ad,.machine.ad,result.txt"}, [], {})
    assert [item.name for item in named] == ["result.txt"]


def test_the_job_ad_as_condor_starter_holds_it(tmp_path: Path) -> None:
    job = {"Cmd": "/home/u/job.sh", "Iwd": "/home/u", "Out": "out.txt", "Err": "out.txt",
           "StreamOut": False, "StreamErr": False, "ClusterId": 7}  # fmt: skip
    ad = starter_job_ad(from_values(job), job, tmp_path, True, "/home/u")
    assert {k: ad[k] for k in ("OrigCmd", "OrigIwd", "Iwd", "Out", "Err", "OriginalOut",
                               "OriginalErr", "ClusterId")} == from_values({
        "OrigCmd": "/home/u/job.sh", "OrigIwd": "/home/u", "Iwd": str(tmp_path),
        "Out": "_condor_stdout", "Err": "_condor_stdout", "OriginalOut": "out.txt",
        "OriginalErr": "out.txt", "ClusterId": 7})  # fmt: skip
    assert ad["OSHomeDir"] == '"/home/u"'  # run_as_user's, no lookup of its own
    shared = starter_job_ad(from_values(job), job, tmp_path, False, "")
    assert (shared["Iwd"], shared["Out"]) == ('"/home/u"', '"out.txt"')  # no transfer
    assert "OSHomeDir" not in shared  # a user without a home directory


def test_a_link_put_there_after_the_unlink_fails_the_write(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the O_EXCL | O_NOFOLLOW open is for: a link made between the unlink and
    the open is neither followed nor written through."""
    box, target = tmp_path / "dir_1", tmp_path / "precious"
    box.mkdir()
    target.write_text("keep\n")
    unlink = os.unlink

    def unlink_then_link(path: str) -> None:
        unlink(path)
        os.symlink(target, path)  # the job wins the race

    monkeypatch.setattr(ad_files.os, "unlink", unlink_then_link)
    (box / ".job.ad").write_text("old\n")
    with pytest.raises(FileExistsError):
        ad_files.write_ad_file(str(box), ".job.ad", "A = 1\n", os.getuid(), os.getgid())
    assert target.read_text() == "keep\n"


def test_one_file_that_cannot_be_written_does_not_keep_the_other_out(tmp_path: Path) -> None:
    box = tmp_path / "dir_1"
    (box / ".job.ad").mkdir(parents=True)  # the job's input brought a directory of that name
    with pytest.raises(OSError) as raised:
        write_ad_files(str(box), "A = 1\n", "Memory = 128\n", os.getuid(), os.getgid())
    assert raised.value.errno in (errno.EISDIR, errno.EPERM) and ".job.ad" in str(raised.value)
    assert (box / ".machine.ad").read_text() == "Memory = 128\n"


def test_the_jobs_environment_cannot_move_the_ad_files(tmp_path: Path) -> None:
    job = {"Environment": "_CONDOR_JOB_AD=/x _CONDOR_MACHINE_AD=/y OTHER=1"}
    env = job_env(job, tmp_path)
    assert env["_CONDOR_JOB_AD"] == str(tmp_path / ".job.ad")
    assert env["_CONDOR_MACHINE_AD"] == str(tmp_path / ".machine.ad")
    assert env["OTHER"] == "1"
