"""ALLOW_<LEVEL>/DENY_<LEVEL> as HTCondor's IpVerify reads and applies them
(execd.wire.authz_policy): entry splitting, user and host matching, DENY over ALLOW,
the implied levels, the _STARTD and DEFAULT lists, execd's defaults, and the
ConfigError a pattern no peer could match gives, naming its knob."""

from __future__ import annotations

import asyncio
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
from execd.wire.peer_names import PeerNames
from execd.wire.server import Peer

NAMES = {"10.1.2.3": ["worker3.cs.example.org", "w3"], "127.0.0.1": ["localhost"]}


def policy(**knobs: str) -> AuthzPolicy:
    return AuthzPolicy.from_config(knobs.get)


def allowed(p: AuthzPolicy, level: str, user: str, ip: str = "127.0.0.1") -> bool:
    """`ip`'s (forward-confirmed) host names are NAMES's."""
    return p.verify(level, user, ip, NAMES.get(ip, [])).allowed


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
        method = "MATCH" if user == MATCH_SESSION_USER else "FS"
        peer = Peer(user=user, method=method, sid="s", address=address)
        return bool(PoolCommands.judge(cast(Any, commands), command, peer))

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


# -- the reviewer's findings: each test fails without its fix ------------------------------
CM = {"cm.example.org": ["192.0.2.1"]}


def test_a_host_name_entry_stands_for_the_addresses_it_resolves_to_not_a_ptr() -> None:
    """A peer whose PTR claims the central manager's name is not the central manager:
    host names without a wildcard match only the addresses they resolve to at load."""
    p = policy(ALLOW_ADMINISTRATOR="*@pool/cm.example.org", DENY_READ="nowhere.example.org")
    with capture_logs() as events:
        p = p.resolved(forward=lambda name: CM.get(name, ["198.51.100.1"]))
    assert p.verify("ADMINISTRATOR", "root@pool", "192.0.2.1").allowed
    assert not p.verify("READ", "alice@pool", "198.51.100.1").allowed  # DENY by name
    assert p.verify("READ", "alice@pool", "203.0.113.9", ["nowhere.example.org"]).allowed
    verdict = p.verify("ADMINISTRATOR", "mallory@pool", "203.0.113.9", ["cm.example.org"])
    assert not verdict.allowed, verdict.reason
    assert events == []


def test_a_host_name_that_does_not_resolve_is_logged_and_matches_nothing() -> None:
    def forward(name: str) -> list[str]:
        raise OSError(f"{name}: Name or service not known")

    with capture_logs() as events:
        p = policy(ALLOW_ADMINISTRATOR="*@pool/gone.example.org").resolved(forward=forward)
    assert not p.verify("ADMINISTRATOR", "root@pool", "192.0.2.1", ["gone.example.org"]).allowed
    assert [(e["event"], e["host"]) for e in events] == [
        ("authz_host_unresolved", "gone.example.org")]


def test_a_wildcard_host_entry_matches_only_the_names_it_is_given() -> None:
    """Wildcards match the peer's names, which execd.wire.peer_names confirms forward."""
    p = policy(ALLOW_ADMINISTRATOR="*@pool/*.example.org")
    assert p.wants_peer_names and not policy(ALLOW_ADMINISTRATOR="root@pool").wants_peer_names
    assert p.verify("ADMINISTRATOR", "root@pool", "192.0.2.1", ["cm.example.org"]).allowed
    assert not p.verify("ADMINISTRATOR", "root@pool", "192.0.2.1", []).allowed


@pytest.mark.parametrize(("address", "ip"), [
    ("[2001:db8::5]:4660", "2001:db8::5"),
    ("[::ffff:10.0.0.5]:4660", "10.0.0.5"),
    ("::ffff:10.0.0.5", "10.0.0.5"),
    ("2001:db8::5", "2001:db8::5"),
    ("[fe80::1%eth0]:22", "fe80::1"),
    ("(claim)", "(claim)"),
])  # fmt: skip
def test_peer_ip_reads_ipv6_and_ipv4_mapped_addresses(address: str, ip: str) -> None:
    assert peer_ip(address) == ip


def test_an_ipv4_mapped_peer_is_judged_as_its_ipv4_address() -> None:
    p = policy(ALLOW_READ="*", DENY_READ="10.0.0.5 */192.168.0.0/16")
    assert not allowed(p, "READ", "eve@pool", "::ffff:10.0.0.5")
    assert not allowed(p, "READ", "eve@pool", "::ffff:192.168.4.4")
    p = policy(ALLOW_READ="*", DENY_READ="2001:db8::/32")
    assert not allowed(p, "READ", "eve@pool", peer_ip("[2001:db8::5]:4660"))


def test_pool_username_equivalence_follows_its_knob() -> None:
    """condor@x names condor_pool@x only while USE_POOL_USERNAME_EQUIVALENT is true
    (its default), as fill_table adds the reciprocal entries."""
    def daemon_ok(user: str, **knobs: str) -> bool:
        config = load_settings(parse_config_text(
            "COLLECTOR_HOST = 127.0.0.1:9618\n" +
            "".join(f"{k} = {v}\n" for k, v in knobs.items()), filename="c", env={}))
        settings = pool_settings(config)
        assert settings is not None
        return settings.authz.verify("DAEMON", user, "127.0.0.1").allowed

    assert daemon_ok("condor_pool@node")  # EXECD_POOL_SCHEDULERS' default condor@*
    assert not daemon_ok("condor_pool@node", USE_POOL_USERNAME_EQUIVALENT="false")
    assert daemon_ok("condor@node", USE_POOL_USERNAME_EQUIVALENT="false")
    assert not daemon_ok("condor_pool@node", USE_POOL_USERNAME_EQUIVALENT="false",
                         ALLOW_DAEMON="condor@*")  # fmt: skip


def test_the_deprecated_knobs_name_users_never_hosts() -> None:
    """`admin` in EXECD_POOL_ADMINISTRATORS was a user pattern that matched no
    user@domain; it must not become a host entry a PTR record can satisfy."""
    p = policy(EXECD_POOL_ADMINISTRATORS="admin root@*/10.0.0.0/8 op*")
    assert not p.verify("ADMINISTRATOR", "mallory@pool", "10.1.2.3", ["admin"]).allowed
    assert not p.verify("ADMINISTRATOR", "root@pool", "10.1.2.3").allowed
    assert p.verify("ADMINISTRATOR", "operator@pool", "192.0.2.7").allowed  # op*: a user


def test_an_empty_allow_list_is_defined_and_denies_everyone() -> None:
    """`ALLOW_ADMINISTRATOR =` (after security:recommended) denies all in HTCondor:
    it does not fall back to the deprecated knobs or execd's defaults."""
    p = policy(ALLOW_ADMINISTRATOR="", EXECD_POOL_ADMINISTRATORS="root@*")
    verdict = p.verify("ADMINISTRATOR", "root@node", "127.0.0.1")
    assert not verdict.allowed and verdict.reason == "ADMINISTRATOR authorization policy " \
        "denies all access (no ALLOW_ADMINISTRATOR is defined, or it is empty)"
    p = policy(ALLOW_DAEMON_STARTD=" ", EXECD_POOL_SCHEDULERS="condor@*")
    assert not allowed(p, "DAEMON", "condor@node")
    p = policy(ALLOW_NEGOTIATOR="")
    assert not allowed(p, "NEGOTIATOR", "condor@node")
    assert allowed(policy(), "NEGOTIATOR", "condor@node")  # undefined: the default


def test_legacy_semantics_give_advertise_levels_the_write_list_after_daemons() -> None:
    p = AuthzPolicy.from_config({"ALLOW_WRITE": "bob@pool"}.get, legacy=True)
    assert allowed(p, "ADVERTISE_STARTD", "bob@pool")
    assert not allowed(AuthzPolicy.from_config({"ALLOW_WRITE": "bob@pool"}.get),
                       "ADVERTISE_STARTD", "bob@pool")  # fmt: skip


def test_only_a_claim_ids_session_skips_the_daemon_lists() -> None:
    """A pool-signed token whose subject is execute-side@matchsession is judged by
    ALLOW_DAEMON like any identity; only the MATCH session is the claim holder's."""
    config = pool_settings(load_settings(parse_config_text(
        "COLLECTOR_HOST = 127.0.0.1:9618\nALLOW_DAEMON = condor@*\n", filename="c",
        env={})))  # fmt: skip
    commands = cast(Any, SimpleNamespace(member=SimpleNamespace(config=config), owners=None))
    token = Peer(user=MATCH_SESSION_USER, method="IDTOKENS", sid="s", address="127.0.0.1:5")
    match = Peer(user=MATCH_SESSION_USER, method="MATCH", sid="s", address="127.0.0.1:5")
    with capture_logs() as events:
        assert not PoolCommands.judge(commands, Command.REQUEST_CLAIM, token)
        assert PoolCommands.judge(commands, Command.REQUEST_CLAIM, match)
    assert [e["method"] for e in events] == ["IDTOKENS"]


def test_authorize_looks_names_up_off_the_loop_only_for_name_patterns() -> None:
    """PoolCommands.authorize awaits the peer's confirmed names (never for a peer text
    that is no IP address, such as a claim session's old "(claim)")."""
    asked: list[str] = []

    def lookup(ip: str) -> list[str]:
        asked.append(ip)
        return NAMES.get(ip, [])

    config = pool_settings(load_settings(parse_config_text(
        "COLLECTOR_HOST = 127.0.0.1:9618\nALLOW_ADMINISTRATOR = *@pool/*.cs.example.org\n",
        filename="c", env={})))  # fmt: skip
    commands = SimpleNamespace(member=SimpleNamespace(config=config), owners=None,
                               peer_names=PeerNames(lookup))  # fmt: skip
    commands.judge = lambda *a: PoolCommands.judge(cast(Any, commands), *a)

    def may(address: str) -> bool:
        peer = Peer(user="root@pool", method="FS", sid="s", address=address)
        return asyncio.run(PoolCommands.authorize(cast(Any, commands), Command.DRAIN_JOBS,
                                                  peer))  # fmt: skip

    assert may("10.1.2.3:5") and not may("127.0.0.1:5") and not may("(claim)")
    assert asked == ["10.1.2.3", "127.0.0.1"]
