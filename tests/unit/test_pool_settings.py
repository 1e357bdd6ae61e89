"""Pool mode's configuration: off without a collector, on with CONDOR_HOST, and every bad
value refused at startup naming its knob."""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.pool_settings import pool_settings
from execd.errors import ConfigError

# a syntactically valid JWT that condor_token_create could have written (not a real key)
TOKEN = ("eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ."
         "eyJpc3MiOiJ2bSIsInN1YiI6ImNvbmRvckB2bSIsImlhdCI6MTcwMDAwMDAwMH0."
         "c2lnbmF0dXJlLWJ5dGVzLWhlcmUtMzItYnl0ZXMtbG9uZyE")


def settings(text: str) -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def test_standalone_without_a_collector() -> None:
    assert pool_settings(settings("UID_DOMAIN = example.org\n")) is None


def test_condor_host_names_the_collector_and_defaults_apply() -> None:
    config = pool_settings(settings("CONDOR_HOST = cm.example.org\nUPDATE_INTERVAL = 60\n"))
    assert config is not None
    assert (config.collector.host, config.collector.port) == ("cm.example.org", 9618)
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 0)
    assert config.interval_s == 60
    admin = config.authz.levels["ADMINISTRATOR"]  # EXECD_POOL_ADMINISTRATORS' default
    assert [(e.user, e.host) for e in admin.allow] == [("root@*", "*"), ("condor@*", "*")]
    assert config.token is None


def test_token_file_is_read(tmp_path: Path) -> None:
    token = tmp_path / "pool.token"
    token.write_text(TOKEN + "\n")
    config = pool_settings(settings(f"COLLECTOR_HOST = 127.0.0.1:9\n"
                                    f"EXECD_POOL_TOKEN_FILE = {token}\n"))  # fmt: skip
    assert config is not None and config.token is not None
    assert config.token.subject == "condor@vm"
    assert TOKEN not in repr(config)


@pytest.mark.parametrize(("text", "named"), [
    ("COLLECTOR_HOST = 127.0.0.1:9\nEXECD_COMMAND_ADDRESS = nowhere\n", "EXECD_COMMAND_ADDRESS"),
    ("COLLECTOR_HOST = 127.0.0.1:9\nEXECD_COMMAND_ADDRESS = h:99999\n", "EXECD_COMMAND_ADDRESS"),
    ("COLLECTOR_HOST = <127.0.0.1>\n", "COLLECTOR_HOST"),
    ("COLLECTOR_HOST = 127.0.0.1:9\nEXECD_POOL_TOKEN_FILE = /nonexistent/token\n",
     "EXECD_POOL_TOKEN_FILE"),
    ("COLLECTOR_HOST = 127.0.0.1:9\nENABLE_STARTD_DAEMON_AD = sometimes\n",
     "ENABLE_STARTD_DAEMON_AD"),
])  # fmt: skip
def test_bad_values_are_refused_naming_the_knob(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        pool_settings(settings(text))


@pytest.mark.parametrize("line", ["", "DAEMON_SOCKET_DIR = auto\n"])
def test_daemon_socket_dir_auto_is_lock_daemon_sock(line: str, tmp_path: Path) -> None:
    # HTCondor's default, auto: the shared port's file sockets are in $(LOCK)/daemon_sock
    (tmp_path / "daemon_sock").mkdir()
    config = pool_settings(settings(f"COLLECTOR_HOST = 127.0.0.1:9\nLOCK = {tmp_path}\n"
                                    f"EXECD_SHARED_PORT = 127.0.0.1:9618\n{line}"))  # fmt: skip
    assert config is not None and config.shared_port is not None
    assert config.shared_port[2] == f"{tmp_path}/daemon_sock"


def test_daemon_socket_dir_auto_without_the_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"DAEMON_SOCKET_DIR '{tmp_path}/daemon_sock'"):
        pool_settings(settings(f"COLLECTOR_HOST = 127.0.0.1:9\nLOCK = {tmp_path}\n"
                               "EXECD_SHARED_PORT = 127.0.0.1:9618\n"))  # fmt: skip
