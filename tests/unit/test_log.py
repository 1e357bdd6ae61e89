"""Structured logs: JSON lines, context, levels, rotation, and no secrets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd import log
from execd.config.loader import parse_config_text
from execd.config.log_setup import configure_logging
from execd.config.settings import load_settings
from execd.errors import ConfigError

CLAIM_ID = '<127.0.0.1:9618?addrs=127.0.0.1-9618>#1700000000#3#[Integrity="YES";]' + "ab" * 32


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    yield
    log.configure(level="info", fmt="console", path=None)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_json_events_carry_bound_context(tmp_path: Path) -> None:
    path = tmp_path / "ExecdLog"
    log.configure(level="info", fmt="json", path=path)
    with log.bind_context(slot="slot1_2", job="12.0"):
        log.get_logger("slots").info(
            "slot_state_changed", old="Claimed/Busy", new="Preempting/Vacating", transition=13
        )
    (event,) = lines(path)
    assert event["event"] == "slot_state_changed"
    assert event["slot"] == "slot1_2"
    assert event["job"] == "12.0"
    assert event["transition"] == 13
    assert event["level"] == "info"


def test_claim_id_in_context_or_values_is_redacted(tmp_path: Path) -> None:
    path = tmp_path / "ExecdLog"
    log.configure(level="info", fmt="json", path=path)
    with log.bind_context(claim_id=CLAIM_ID):
        log.get_logger().info("claim_requested", note=f"from schedd with {CLAIM_ID}")
    text = path.read_text()
    assert "ab" * 32 not in text
    assert "#1700000000#" not in text
    (event,) = lines(path)
    assert event["claim_id"] == log.REDACTED


def test_level_filters(tmp_path: Path) -> None:
    path = tmp_path / "ExecdLog"
    log.configure(level="warning", fmt="json", path=path)
    log.get_logger().info("quiet")
    log.get_logger().warning("loud")
    assert [e["event"] for e in lines(path)] == ["loud"]


def test_console_format_is_for_a_person(tmp_path: Path) -> None:
    path = tmp_path / "ExecdLog"
    log.configure(level="info", fmt="console", path=path)
    log.get_logger().info("execd_started", slots=1)
    text = path.read_text()
    assert "execd_started" in text
    assert "slots=1" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_size_rotation_keeps_one_old_file(tmp_path: Path) -> None:
    path = tmp_path / "ExecdLog"
    log.configure(level="info", fmt="json", path=path, max_bytes=500)
    for i in range(20):
        log.get_logger().info("tick", i=i)
    assert (tmp_path / "ExecdLog.old").exists()
    assert path.stat().st_size < 500
    last = lines(path)[-1]
    assert last["i"] == 19


def test_reopen_follows_logrotate(tmp_path: Path) -> None:
    path = tmp_path / "ExecdLog"
    log.configure(level="info", fmt="json", path=path)
    log.get_logger().info("before")
    path.rename(tmp_path / "ExecdLog.1")
    log.reopen()
    log.get_logger().info("after")
    assert [e["event"] for e in lines(path)] == ["after"]


def test_settings_configure_logging(tmp_path: Path) -> None:
    conf = f"LOG = {tmp_path}/log\nEXECD_LOG_LEVEL = debug\n"
    configure_logging(load_settings(parse_config_text(conf, env={})))
    log.get_logger().debug("hello")
    assert lines(tmp_path / "log" / "ExecdLog")[0]["event"] == "hello"


def test_unwritable_log_is_a_config_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    conf = f"EXECD_LOG = {blocker}/sub/ExecdLog\n"
    with pytest.raises(ConfigError, match=str(blocker)):
        configure_logging(load_settings(parse_config_text(conf, env={})))


def test_bad_level_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown log level"):
        conf = "EXECD_LOG_LEVEL = chatty\nEXECD_LOG = -\n"
        configure_logging(load_settings(parse_config_text(conf, env={})))
