"""`execd config-val` and `execd config-check` as an admin uses them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "etc" / "execd" / "execd_config"


def execd(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
    if config is not None:
        env["CONDOR_CONFIG"] = str(config)
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "execd", *args], env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )


def test_config_val_prints_expanded_values_of_the_default_config() -> None:
    done = execd("config-val", "START", "SLOT_TYPE_1", "MaxJobRetirementTime", config=DEFAULT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True", "100%", "2147483647"]


def test_config_val_undefined_name() -> None:
    done = execd("config-val", "NO_SUCH_KNOB", config=DEFAULT)
    assert done.returncode == 1
    assert done.stderr.strip() == "Not defined: NO_SUCH_KNOB"


def test_config_val_verbose_says_where_as_condor_config_val_does(tmp_path: Path) -> None:
    # condor_config_val 25.14.1 -v on this file prints exactly these blocks
    conf = tmp_path / "c"
    conf.write_text("A = 1\nstart = $(A) > 0 && \\\n  B\n")
    done = execd("config-val", "-v", "START", "startidletime", "UPDATE_INTERVAL", config=conf)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "start = 1 > 0 && B",
        f" # at: {conf}, line 3",
        " # raw: start = $(A) > 0 && B",
        "",
        "StartIdleTime = 15 * 60",
        " # at: <Default>",
        " # raw: StartIdleTime = 15 * $(MINUTE)",
        "",
        "UPDATE_INTERVAL = 300",
        " # at: <Default>",
        " # raw: UPDATE_INTERVAL = 300",
        "",
    ]


def test_config_val_default_of_unset_registered_knob() -> None:
    done = execd("config-val", "UPDATE_INTERVAL", config=DEFAULT)
    assert done.stdout.strip() == "300"


def test_config_val_dump_lists_every_name_and_file() -> None:
    done = execd("config-val", "-dump", config=DEFAULT)
    assert done.returncode == 0, done.stderr
    assert "SLOT_TYPE_1_PARTITIONABLE = true" in done.stdout.splitlines()
    assert "START = True" in done.stdout.splitlines()
    assert f"#\t{DEFAULT}" in done.stdout


def test_config_val_dump_prints_as_condor_config_val_does(tmp_path: Path) -> None:
    # condor_config_val 25.14.1 -dump MYX, -dump -expand MYX and -dump -v MYX on this file
    conf = tmp_path / "c"
    conf.write_text("A = 1\nMYX = $(A) + 1\n")
    head = ["# Configuration from machine: " + execd("config-val", "FULL_HOSTNAME",
                                                     config=conf).stdout.strip(),
            "", "# Parameters with names that match MYX:"]
    files = ["# Contributing configuration file(s):", f"#\t{conf}"]
    done = execd("config-val", "-dump", "MYX", config=conf)
    assert done.stdout.splitlines() == [*head, "MYX = $(A) + 1", *files]
    done = execd("config-val", "-dump", "-expand", "MYX", config=conf)
    assert done.stdout.splitlines() == [*head, "MYX = 1 + 1", *files]
    done = execd("config-val", "-dump", "-v", "MYX", config=conf)
    assert done.stdout.splitlines() == [
        *head, "MYX = $(A) + 1", f" # at: {conf}, line 2", " # expanded: 1 + 1"]


def test_global_config_flag_wins_over_environment(tmp_path: Path) -> None:
    conf = tmp_path / "c"
    conf.write_text("START = False\n")
    done = execd("--config", str(conf), "config-val", "START", config=DEFAULT)
    assert done.stdout.strip() == "False"


def test_config_check_accepts_the_default_and_the_examples() -> None:
    done = execd("config-check", str(DEFAULT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OK: {DEFAULT}")
    for example in sorted((REPO / "etc" / "execd" / "examples").iterdir()):
        done = execd("config-check", str(example))
        assert done.returncode == 0, f"{example}: {done.stderr}"


def test_config_check_names_file_line_and_problem(tmp_path: Path) -> None:
    conf = tmp_path / "bad"
    conf.write_text("START = True\nPREEMPT = (KeyboardIdle <\n")
    done = execd("config-check", str(conf))
    assert done.returncode == 1
    assert f"{conf}:2: PREEMPT" in done.stderr
    assert "Traceback" not in done.stderr


def test_config_check_names_a_bad_authorization_entry_with_its_file_and_line(
        tmp_path: Path) -> None:  # fmt: skip
    conf = tmp_path / "bad"
    conf.write_text("ALLOW_READ = *\nDENY_READ_STARTD = eve@pool */10.0.0.0/33\n")
    done = execd("config-check", str(conf))
    assert done.returncode == 1
    assert done.stderr.startswith(f"execd: {conf}:2: DENY_READ_STARTD: '*/10.0.0.0/33': "
                                  "'10.0.0.0/33' is not an IP address or network"), done.stderr


def test_config_check_syntax_error(tmp_path: Path) -> None:
    conf = tmp_path / "bad"
    conf.write_text("if defined X\nSTART = True\n")
    done = execd("config-check", str(conf))
    assert done.returncode == 1
    assert f"{conf}:1: 'if' without a matching 'endif'" in done.stderr


def test_status_local_computes_slots_from_a_real_config(tmp_path: Path) -> None:
    conf = tmp_path / "c"
    conf.write_text(
        f"EXECUTE = {tmp_path}\nNUM_CPUS = 4\nMEMORY = 4096\n"
        "use FEATURE : StaticSlots\nfavorite_color = \"blue\"\nSTARTD_ATTRS = favorite_color\n"
    )
    done = execd("status", "--local", "-af", "Name", "Cpus", "Memory", "favorite_color",
                 config=conf)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [r[0].split("@")[0] for r in rows] == ["slot1", "slot2", "slot3", "slot4"]
    assert all(r[1:] == ["1", "1024", "blue"] for r in rows), rows


def test_status_local_default_config_is_one_partitionable_slot(tmp_path: Path) -> None:
    conf = tmp_path / "c"
    conf.write_text(f"include : {DEFAULT}\nEXECUTE = {tmp_path}\n")
    done = execd("status", "--local", "-af", "Name", "PartitionableSlot", config=conf)
    assert done.returncode == 0, done.stderr
    (row,) = [line.split() for line in done.stdout.splitlines()]
    assert row[0].startswith("slot1@")
    assert row[1] == "true"
