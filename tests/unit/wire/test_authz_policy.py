"""ALLOW_<LEVEL>/DENY_<LEVEL> as HTCondor's IpVerify reads and applies them
(execd.wire.authz_policy): entry splitting, user and host matching, DENY over ALLOW,
the implied levels, the _STARTD and DEFAULT lists, execd's defaults, and the
ConfigError a pattern no peer could match gives, naming its knob."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.pool_commands import PoolCommands
from execd.daemon.pool_settings import pool_settings
from execd.errors import ConfigError
from execd.wire.authz_policy import AuthzPolicy, matches_wildcard, parse_entry, peer_ip
from execd.wire.claim_session import MATCH_SESSION_USER
from execd.wire.commands import Command, within_limits
from execd.wire.server import Peer

NAMES = {"10.1.2.3": ["worker3.cs.example.org", "w3"], "127.0.0.1": ["localhost"]}


def policy(**knobs: str) -> AuthzPolicy:
    return AuthzPolicy.from_config(knobs.get, resolver=lambda ip: NAMES.get(ip, []))


def allowed(p: AuthzPolicy, level: str, user: str, ip: str = "127.0.0.1") -> bool:
    return p.verify(level, user, ip).allowed


@pytest.mark.parametrize(("pattern", "text", "expected"), [
    ("condor@*", "condor@pool.example", True),
    ("condor@*", "CONDOR@Pool", True),  # case-blind
    ("*@cs.example.org", "alice@cs.example.org", True),
    ("*@cs.example.org", "alice@physics.example.org", False),
    ("a*e@x", "alice@x", True),
    ("a*e@x", "alice@y", False),
    ("*lic*", "alice@x", True),  # a leading and a trailing star: contains
    ("al*", "alice@x", True),
    ("alice@x", "alice@x", True),
    ("alice@x", "alice@xy", False),
    ("*", "anyone@anywhere", True),
])  # fmt: skip
def test_one_wildcard_matches_as_htcondor_matches(pattern: str, text: str,
                                                  expected: bool) -> None:  # fmt: skip
    assert matches_wildcard(pattern, text) is expected


@pytest.mark.parametrize(("entry", "user", "host"), [
    ("alice@x", "alice@x", "*"),
    ("10.0.0.0/8", "*", "10.0.0.0/8"),
    ("alice@x/10.0.0.0/8", "alice@x", "10.0.0.0/8"),
    ("alice@x/10.0.0.0/255.0.0.0", "alice@x", "10.0.0.0/255.0.0.0"),
    ("*/worker3.cs.example.org", "*", "worker3.cs.example.org"),
    ("alice@x/*.cs.example.org", "alice@x", "*.cs.example.org"),
    ("128.105.*", "*", "128.105.*"),
    ("*", "*", "*"),
])  # fmt: skip
def test_entries_split_into_user_and_host(entry: str, user: str, host: str) -> None:
    parsed = parse_entry(entry, "ALLOW_READ")
    assert (parsed.user, parsed.host) == (user, host)


def test_hosts_match_by_address_network_wildcard_or_reverse_name() -> None:
    p = policy(ALLOW_ADMINISTRATOR="*@x/10.0.0.0/8 *@y/192.168.1.0/255.255.255.0 "
                                   "*@z/172.16.* *@w/*.cs.example.org bob@x/127.0.0.1")
    assert allowed(p, "ADMINISTRATOR", "alice@x", "10.200.0.1")
    assert not allowed(p, "ADMINISTRATOR", "alice@x", "11.0.0.1")
    assert allowed(p, "ADMINISTRATOR", "alice@y", "192.168.1.77")
    assert not allowed(p, "ADMINISTRATOR", "alice@y", "192.168.2.77")
    assert allowed(p, "ADMINISTRATOR", "alice@z", "172.16.9.9")
    assert not allowed(p, "ADMINISTRATOR", "alice@z", "172.17.9.9")
    assert allowed(p, "ADMINISTRATOR", "alice@w", "10.1.2.3")  # worker3.cs.example.org
    assert not allowed(p, "ADMINISTRATOR", "alice@w", "127.0.0.1")  # localhost
    assert allowed(p, "ADMINISTRATOR", "bob@x", "127.0.0.1")
    assert not allowed(p, "ADMINISTRATOR", "bob@x", "127.0.0.2")


def test_deny_wins_over_allow_and_over_an_implying_level() -> None:
    p = policy(ALLOW_READ="*", DENY_READ="eve@pool", ALLOW_ADMINISTRATOR="eve@pool")
    verdict = p.verify("READ", "eve@pool", "127.0.0.1")
    assert not verdict.allowed
    assert verdict.reason == "READ authorization policy denies eve@pool from 127.0.0.1 " \
        "(an entry of DENY_READ)"
    assert allowed(p, "READ", "alice@pool")
    assert allowed(p, "ADMINISTRATOR", "eve@pool")  # DENY_READ is READ's alone


def test_a_level_is_allowed_by_the_levels_that_imply_it() -> None:
    """ADMINISTRATOR implies WRITE implies READ; DAEMON implies WRITE too."""
    p = policy(ALLOW_READ="alice@pool", ALLOW_WRITE="bob@pool", ALLOW_ADMINISTRATOR="root@pool",
               ALLOW_DAEMON="condor@pool")  # fmt: skip
    for user in ("alice@pool", "bob@pool", "root@pool", "condor@pool"):
        assert allowed(p, "READ", user), user
    assert not allowed(p, "READ", "mallory@pool")
    verdict = p.verify("READ", "root@pool", "127.0.0.1")
    assert verdict.reason.startswith("READ is implied by WRITE; WRITE is implied by "
                                     "ADMINISTRATOR;"), verdict.reason
    assert not allowed(p, "ADMINISTRATOR", "bob@pool")  # nothing implies ADMINISTRATOR
    refused = p.verify("READ", "mallory@pool", "127.0.0.1")
    assert refused.reason == "READ authorization policy contains no matching ALLOW entry " \
        "for mallory@pool from 127.0.0.1 (ALLOW_READ)"


def test_startd_lists_come_first_then_the_level_then_default() -> None:
    p = policy(ALLOW_ADMINISTRATOR_STARTD="alice@pool", ALLOW_ADMINISTRATOR="bob@pool")
    assert allowed(p, "ADMINISTRATOR", "alice@pool")
    assert not allowed(p, "ADMINISTRATOR", "bob@pool")
    p = policy(ALLOW_DEFAULT="carol@pool", DENY_DEFAULT_STARTD="*@evil")
    assert allowed(p, "ADMINISTRATOR", "carol@pool")
    assert not allowed(p, "DAEMON", "x@evil")
    assert p.levels["DAEMON"].deny_knob == "DENY_DEFAULT_STARTD"
    p = policy(DENY_READ_STARTD="eve@pool", DENY_READ="alice@pool")
    assert allowed(p, "READ", "alice@pool") and not allowed(p, "READ", "eve@pool")


def test_execd_defaults_are_security_recommended_with_the_old_knobs_as_lists() -> None:
    """Nothing defined: READ and WRITE for everyone; ADMINISTRATOR and DAEMON are
    EXECD_POOL_ADMINISTRATORS / EXECD_POOL_SCHEDULERS, read only when no ALLOW list of
    the level is defined (ALLOW_DEFAULT counts)."""
    p = policy(EXECD_POOL_ADMINISTRATORS="root@*", EXECD_POOL_SCHEDULERS="condor@*")
    assert allowed(p, "READ", "anyone@anywhere")
    assert allowed(p, "ADMINISTRATOR", "root@node") and not allowed(p, "ADMINISTRATOR", "a@b")
    assert allowed(p, "DAEMON", "condor@node") and not allowed(p, "DAEMON", "root@node")
    assert allowed(p, "DAEMON", "condor_pool@node")  # USE_POOL_USERNAME_EQUIVALENT
    p = policy(EXECD_POOL_ADMINISTRATORS="root@*", ALLOW_ADMINISTRATOR="alice@pool")
    assert not allowed(p, "ADMINISTRATOR", "root@node")
    p = policy(EXECD_POOL_ADMINISTRATORS="root@*", ALLOW_DEFAULT="alice@pool")
    assert not allowed(p, "ADMINISTRATOR", "root@node")
    nobody = policy().verify("ADMINISTRATOR", "root@node", "127.0.0.1")
    assert not nobody.allowed and "no ALLOW_ADMINISTRATOR is defined" in nobody.reason


def test_a_deny_list_of_star_refuses_everyone_and_star_allows_all_not_denied() -> None:
    p = policy(ALLOW_READ="*", DENY_READ="*")
    assert not allowed(p, "READ", "alice@pool")
    p = policy(ALLOW_READ="*", DENY_READ="*/10.0.0.0/8")
    assert allowed(p, "READ", "alice@pool") and not allowed(p, "READ", "alice@pool", "10.1.2.3")


def test_legacy_semantics_give_daemon_the_write_list() -> None:
    p = AuthzPolicy.from_config({"ALLOW_WRITE": "bob@pool"}.get, legacy=True)
    assert allowed(p, "DAEMON", "bob@pool")
    assert not allowed(AuthzPolicy.from_config({"ALLOW_WRITE": "bob@pool"}.get), "DAEMON",
                       "bob@pool")  # fmt: skip


@pytest.mark.parametrize(("value", "problem"), [
    ("*/10.0.0.0/33", "is not an IP address or network"),
    ("alice@x/10.0.0.0/255.0.255.0", "is not an IP address or network"),
    ("300.1.2.3", "is not an IP address or network"),
    ("127.0.0.1:9618", "looks like an address with a port"),
    ("<127.0.0.1:9618>", "looks like an address with a port"),
    ("+admins", "netgroups are not supported"),
    ("{:local_ips:}", "is not supported by execd"),
    ("*/fe80::*", "is not supported by execd"),
    ("a/b/c/d", "more than two '/'"),
    ("alice@x/", "empty user or host part"),
    ("alice@x/bad!host", "is not a host name"),
])  # fmt: skip
def test_a_pattern_no_peer_could_match_is_an_error_naming_its_knob(value: str,
                                                                   problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        policy(ALLOW_READ="*", DENY_READ_STARTD=f"ok@pool {value}")
    assert str(caught.value).startswith(f"DENY_READ_STARTD: {value!r}")
    assert problem in str(caught.value)


def test_pool_settings_refuse_a_bad_list_naming_the_knob_file_and_line() -> None:
    config = parse_config_text("COLLECTOR_HOST = 127.0.0.1:9618\n"
                               "ALLOW_ADMINISTRATOR = root@x/10.0.0.0/40\n",
                               filename="execd.conf", env={})  # fmt: skip
    with pytest.raises(ConfigError,
                       match=r"^execd\.conf:2: ALLOW_ADMINISTRATOR: 'root@x/10\.0\.0\.0/40'"):
        pool_settings(load_settings(config))


def test_peer_ip_of_a_channel_address() -> None:
    assert peer_ip("127.0.0.1:4242") == "127.0.0.1"
    assert peer_ip("[::1]:4242") == "::1"


def test_pool_commands_are_judged_at_condor_startds_levels() -> None:
    """PoolCommands.authorize: READ for queries, history and config values, ADMINISTRATOR
    for drain, vacate, reconfig and shutdown, DAEMON for claim commands except on a claim
    id's session (condor_startd's DAEMON hole for the match session); a refusal is
    logged with the level and the policy's reason."""
    config = pool_settings(load_settings(parse_config_text(
        "COLLECTOR_HOST = 127.0.0.1:9618\n"
        "DENY_READ = eve@pool\n"
        "ALLOW_ADMINISTRATOR = eve@pool/127.0.0.1\n"
        "DENY_DAEMON = condor@pool\n", filename="execd.conf", env={})))  # fmt: skip
    commands = SimpleNamespace(member=SimpleNamespace(config=config), owners=None)

    def may(user: str, command: int, address: str = "127.0.0.1:5") -> bool:
        peer = Peer(user=user, method="FS", sid="s", address=address)
        return bool(PoolCommands.authorize(cast(Any, commands), command, peer))

    with capture_logs() as events:
        for command in (Command.QUERY_STARTD_ADS, Command.GET_HISTORY, Command.CONFIG_VAL,
                        Command.DC_CONFIG_VAL):  # fmt: skip
            assert may("alice@pool", command) and not may("eve@pool", command)
        for command in (Command.DRAIN_JOBS, Command.VACATE_ALL_CLAIMS, Command.DC_RECONFIG_FULL,
                        Command.DC_OFF_GRACEFUL):  # fmt: skip
            assert may("eve@pool", command) and not may("alice@pool", command)
            assert not may("eve@pool", command, "10.0.0.1:5")  # not from that host
        assert not may("condor@pool", Command.REQUEST_CLAIM)  # DENY_DAEMON
        assert may(MATCH_SESSION_USER, Command.REQUEST_CLAIM)  # the claim id's session
        assert not may("alice@pool", 99999)  # a command with no level: not served
    refused = [e for e in events if e["event"] == "pool_command_refused"]
    assert refused[0]["authz_level"] == "READ" and refused[0]["why"] == (
        "READ authorization policy denies eve@pool from 127.0.0.1 (an entry of DENY_READ)")
    assert {e["authz_level"] for e in refused} == {"READ", "ADMINISTRATOR", "DAEMON", None}


def test_a_token_scoped_to_a_level_reaches_the_daemon_core_commands_of_that_level() -> None:
    assert within_limits(Command.DC_CONFIG_VAL, frozenset({"READ"}))
    assert within_limits(Command.DC_RECONFIG_FULL, frozenset({"ADMINISTRATOR"}))
    assert not within_limits(Command.DC_RECONFIG_FULL, frozenset({"READ"}))
