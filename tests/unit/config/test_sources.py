"""Where the configuration comes from: --config, CONDOR_CONFIG, /etc, the shipped file."""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.config.sources import SHIPPED_CONFIG, find_config_file
from execd.errors import ConfigError


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    names = ("cli", "env", "system", "shipped")
    out = {n: tmp_path / n for n in names}
    for path in out.values():
        path.write_text("")
    return out


def test_cli_wins(files: dict[str, Path]) -> None:
    got = find_config_file(
        str(files["cli"]), {"CONDOR_CONFIG": str(files["env"])},
        system=files["system"], shipped=files["shipped"],
    )
    assert got == files["cli"]


def test_condor_config_next(files: dict[str, Path]) -> None:
    got = find_config_file(
        None, {"CONDOR_CONFIG": str(files["env"])}, system=files["system"], shipped=files["shipped"]
    )
    assert got == files["env"]


def test_system_file_then_shipped(files: dict[str, Path], tmp_path: Path) -> None:
    assert find_config_file(None, {}, system=files["system"], shipped=files["shipped"]) == (
        files["system"]
    )
    absent = tmp_path / "absent"
    assert find_config_file(None, {}, system=absent, shipped=files["shipped"]) == files["shipped"]


def test_named_but_missing_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="from --config"):
        find_config_file(str(tmp_path / "nope"), {})
    with pytest.raises(ConfigError, match="from CONDOR_CONFIG"):
        find_config_file(None, {"CONDOR_CONFIG": str(tmp_path / "nope")})


def test_nothing_found_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--config"):
        find_config_file(None, {}, system=tmp_path / "a", shipped=tmp_path / "b")


def test_the_project_ships_a_default() -> None:
    assert SHIPPED_CONFIG.is_file()
