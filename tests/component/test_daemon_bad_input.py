"""`execd run` refuses to start on bad input: non-zero exit, the problem named on stderr."""

from __future__ import annotations

from pathlib import Path

from tests.component.daemon_harness import RunningDaemon


def blocker(tmp_path: Path) -> Path:
    """A plain file: no directory can be made below it, not even by root."""
    path = tmp_path / "file"
    path.write_text("")
    return path


def test_bad_config_line_at_startup_exits_nonzero_naming_file_and_line(tmp_path: Path) -> None:
    bad = RunningDaemon(tmp_path, "this line is not configuration\n")
    line = bad.config.read_text().splitlines().index("this line is not configuration") + 1
    done = bad.execd("run", timeout=30)
    assert done.returncode == 2
    assert f"{bad.config}:{line}: expected 'NAME = value'" in done.stderr
    assert not bad.log.exists() or "execd_started" not in bad.log.read_text()


def test_unusable_log_directory_is_named(tmp_path: Path) -> None:
    where = blocker(tmp_path)
    bad = RunningDaemon(tmp_path, f"LOG = {where}/log\n")
    done = bad.execd("run", timeout=30)
    assert done.returncode == 2
    assert f"cannot create LOG directory {where}/log" in done.stderr


def test_unwritable_log_file_is_named(tmp_path: Path) -> None:
    bad = RunningDaemon(tmp_path)
    bad.log.mkdir()  # EXECD_LOG names a directory: it cannot be opened for writing
    done = bad.execd("run", timeout=30)
    assert done.returncode == 2
    assert f"cannot write the log file {bad.log}" in done.stderr


def test_unusable_execute_directory_is_named(tmp_path: Path) -> None:
    where = blocker(tmp_path)
    bad = RunningDaemon(tmp_path, f"EXECUTE = {where}/execute\n")
    done = bad.execd("run", timeout=30)
    assert done.returncode == 2
    assert f"cannot create EXECUTE directory {where}/execute" in done.stderr
