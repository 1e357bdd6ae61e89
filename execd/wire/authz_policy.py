"""HTCondor's host and user authorization policy: ALLOW_<LEVEL> / DENY_<LEVEL>.

What a daemon's IpVerify decides, for execd's command port (the rules read from
condor_ipverify.cpp, condor_perms.cpp and SecMan::getSecSetting):

- Each level's list is the first of ALLOW_<LEVEL>_STARTD, ALLOW_<LEVEL>,
  ALLOW_DEFAULT_STARTD, ALLOW_DEFAULT that is defined and not empty (ADVERTISE_* levels
  try DAEMON's before DEFAULT's; with LEGACY_ALLOW_SEMANTICS DAEMON, and so ADVERTISE_*,
  tries WRITE's); the same for DENY_.
- An entry is `user@domain/host`, `user@domain` (any host), or a host alone (any
  user). A host is `*`, an IP address, a network (`10.0.0.0/8`, `10.0.0.0/255.0.0.0`,
  `10.0.*`, an IPv6 `/n`), or a host name: one without a wildcard stands for the
  addresses it resolves to when the policy is loaded (none when it does not resolve);
  one with a `*` is matched, case-blind, against the peer's forward-confirmed
  reverse-DNS names (execd.wire.peer_names). Users match case-blind with one `*`
  wildcard; `condor@x` and `condor_pool@x` stand for each other unless
  USE_POOL_USERNAME_EQUIVALENT is false.
- A matching DENY entry refuses, whatever else allows. `*` (or `*/*`) as the whole
  ALLOW list allows everyone not denied. A level other than READ and WRITE with no ALLOW
  list refuses everyone; a DENY list of `*` refuses everyone.
- A peer no entry names is allowed when a level that implies this one allows it
  (ADMINISTRATOR and DAEMON imply WRITE; WRITE, NEGOTIATOR, CONFIG and the ADVERTISE_*
  levels imply READ), else refused.

A pattern HTCondor could never match (a netmask out of range, a malformed address, an
address with a port, a netgroup, characters no host name has) is a ConfigError naming
the knob; HTCondor keeps such entries and matches nothing with them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from execd.errors import ConfigError
from execd.log import get_logger
from execd.wire.commands import IMPLIED_PERMISSION
from execd.wire.peer_names import Resolver, forward_addresses, normal_ip

log = get_logger("wire")

# The levels execd's commands are registered at, and those that imply them.
LEVELS = ("READ", "WRITE", "NEGOTIATOR", "ADMINISTRATOR", "CONFIG", "DAEMON",
          "ADVERTISE_STARTD", "ADVERTISE_SCHEDD", "ADVERTISE_MASTER")  # fmt: skip
SUBSYSTEM = "STARTD"
# With no ALLOW list in the search for a level, execd uses security:recommended's (the
# policy Debian's and HTCondor's packages ship, whose `use SECURITY:` line execd does not
# read), the administrators and schedulers of execd's older knobs standing in for
# condor@* and root@*: only when no knob of the level's search is defined at all (an
# empty `ALLOW_ADMINISTRATOR =` is defined, and denies everyone, as in HTCondor). Their
# entries are user patterns only, as before they became lists: `admin` names a user.
FALLBACKS = {"READ": "*", "WRITE": "*", "NEGOTIATOR": "condor@* condor@password"}
FALLBACK_KNOBS = {"ADMINISTRATOR": "EXECD_POOL_ADMINISTRATORS", "DAEMON": "EXECD_POOL_SCHEDULERS",
                  "ADVERTISE_STARTD": "EXECD_POOL_SCHEDULERS",
                  "ADVERTISE_SCHEDD": "EXECD_POOL_SCHEDULERS",
                  "ADVERTISE_MASTER": "EXECD_POOL_SCHEDULERS"}  # fmt: skip
_HOSTNAME = re.compile(r"^[A-Za-z0-9*_.-]+$")
_IPV4_WILD = re.compile(r"^(\d{1,3}\.){0,3}\*$")  # 128.105.*, 10.*

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def matches_wildcard(pattern: str, text: str) -> bool:
    """HTCondor's case-blind match with one `*` (a leading, a trailing, or one inside,
    which may be followed by a trailing one meaning "contains")."""
    pattern, text = pattern.lower(), text.lower()
    star = pattern.find("*")
    if star < 0:
        return pattern == text
    start, end = pattern[:star], pattern[star + 1:]
    contains = False
    if star == len(pattern) - 1:  # a trailing star only: a prefix
        return text.startswith(start)
    if end.endswith("*"):
        end, contains = end[:-1], True
    if not text.startswith(start):
        return False
    tail = text[len(start):]
    return end in tail if contains else tail.endswith(end)


def _network(host: str, knob: str, entry: str) -> Network | None:
    """The network a host part names, None for a host name; a ConfigError for
    something that looks like an address but is not a good one."""
    bad = f"{knob}: {entry!r}"
    if _IPV4_WILD.match(host):
        octets = host.split(".")[:-1]
        if any(int(o) > 255 for o in octets):
            raise ConfigError(f"{bad}: {host!r} is not an IPv4 address with a wildcard")
        base = ".".join([*octets, *["0"] * (4 - len(octets))])
        return ipaddress.IPv4Network(f"{base}/{8 * len(octets)}")
    if host.lower() == "{:local_ips:}" or (":" in host and "*" in host):
        raise ConfigError(f"{bad}: {host!r} (local addresses, IPv6 wildcards) is not "
                          "supported by execd; name the addresses or an IPv6 network /n")
    if any(c in host for c in "<>?") or re.fullmatch(r"[\w.-]+:\d+", host):
        raise ConfigError(f"{bad}: {host!r} looks like an address with a port (a sinful "
                          "string); name the host, its IP address or a network")
    if "/" in host or ":" in host or re.fullmatch(r"[\d.]+", host):
        try:
            return ipaddress.ip_network(host, strict=False)
        except ValueError as exc:
            raise ConfigError(f"{bad}: {host!r} is not an IP address or network ({exc})") from None
    return None


@dataclass(frozen=True)
class Entry:
    """One ALLOW_/DENY_ entry: a user pattern and a host (a network or a name pattern)."""

    user: str
    host: str
    network: Network | None
    any_host: bool = False
    pool_equivalent: bool = True  # USE_POOL_USERNAME_EQUIVALENT
    # a host name without a wildcard: the addresses it resolved to (none until resolved)
    addresses: frozenset[str] = frozenset()

    @property
    def host_name(self) -> bool:
        return not self.any_host and self.network is None

    @property
    def name_pattern(self) -> bool:
        """A host name with a wildcard: matched against the peer's names."""
        return self.host_name and "*" in self.host

    def names(self, user: str) -> bool:
        if matches_wildcard(self.user, user):
            return True
        if not self.pool_equivalent:
            return False
        for one, other in (("condor@", "condor_pool@"), ("condor_pool@", "condor@")):
            if self.user.lower().startswith(one) and matches_wildcard(
                    other + self.user[len(one):], user):  # fmt: skip
                return True
        return False

    def matches(self, user: str, ip: str, hostnames: Sequence[str]) -> bool:
        """`ip` is normal_ip's (an IPv4-mapped address as IPv4), `hostnames` the peer's
        forward-confirmed names."""
        if not self.names(user):
            return False
        if self.any_host:
            return True
        if self.network is not None:
            try:
                return ipaddress.ip_address(ip) in self.network
            except ValueError:
                return False
        if not self.name_pattern:
            return ip in self.addresses
        return any(matches_wildcard(self.host, name) for name in hostnames)


def parse_entry(text: str, knob: str) -> Entry:
    """`user/host`, `user/net/mask`, `user@domain`, `host` or `net/mask`, as
    IpVerify::split_entry reads them."""
    if text.startswith("+"):
        raise ConfigError(f"{knob}: {text!r}: netgroups are not supported by execd")
    parts = text.split("/")
    if len(parts) == 1:
        user, host = (text, "*") if "@" in text else ("*", text)
    elif len(parts) == 3:
        user, host = parts[0], f"{parts[1]}/{parts[2]}"
    elif len(parts) == 2:
        at = text.find("@")
        if (0 <= at < text.find("/")) or text.startswith("*"):
            user, host = parts
        else:
            try:
                ipaddress.ip_network(text, strict=False)
                user, host = "*", text
            except ValueError:
                user, host = parts
    else:
        raise ConfigError(f"{knob}: {text!r} has more than two '/' (user/network/mask at most)")
    if not user or not host:
        raise ConfigError(f"{knob}: {text!r} has an empty user or host part")
    any_host = host in ("*", "*/*")
    network = None if any_host else _network(host, knob, text)
    if network is None and not any_host and not _HOSTNAME.match(host):
        raise ConfigError(f"{knob}: {text!r}: {host!r} is not a host name, an IP address "
                          "or a network")  # fmt: skip
    return Entry(user=user, host=host, network=network, any_host=any_host)


@dataclass(frozen=True)
class LevelPolicy:
    """One level's lists and the knobs they came from (None: not defined)."""

    allow: tuple[Entry, ...] = ()
    deny: tuple[Entry, ...] = ()
    allow_knob: str | None = None
    deny_knob: str | None = None
    behaviour: str = "table"  # "allow" (anyone), "deny" (no one), "only-denies", "table"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def _config_order(level: str, legacy: bool) -> list[str]:
    if level.startswith("ADVERTISE_"):  # DCpermissionHierarchy::nextConfig
        return [level, "DAEMON", "WRITE", "DEFAULT"] if legacy else [level, "DAEMON", "DEFAULT"]
    if level == "DAEMON" and legacy:
        return ["DAEMON", "WRITE", "DEFAULT"]
    return [level, "DEFAULT"]


def _setting(get: Callable[[str], str | None], prefix: str, level: str,
             legacy: bool) -> tuple[str | None, str | None, bool]:  # fmt: skip
    """(the value, its knob's name, whether any knob of the search is defined, even
    empty): SecMan::getSecSetting's search, where param() skips an empty value."""
    defined = False
    for name in _config_order(level, legacy):
        for knob in (f"{prefix}_{name}_{SUBSYSTEM}", f"{prefix}_{name}"):
            raw = get(knob)
            defined = defined or raw is not None
            value = (raw or "").strip()
            if value:
                return value, knob, True
    return None, None, defined


def _split(value: str) -> list[str]:
    return [e for e in re.split(r"[\s,]+", value) if e]


def _entries(value: str, knob: str, pool_equivalent: bool) -> tuple[Entry, ...]:
    return tuple(dataclasses.replace(parse_entry(e, knob), pool_equivalent=pool_equivalent)
                 for e in _split(value))  # fmt: skip


def _user_entries(value: str, pool_equivalent: bool) -> tuple[Entry, ...]:
    """A deprecated knob's entries: user patterns from any host, whatever they hold."""
    return tuple(Entry(user=e, host="*", network=None, any_host=True,
                       pool_equivalent=pool_equivalent) for e in _split(value))  # fmt: skip


@dataclass(frozen=True)
class AuthzPolicy:
    levels: dict[str, LevelPolicy] = field(default_factory=dict)

    @classmethod
    def from_config(cls, get: Callable[[str], str | None], *,
                    legacy: bool = False, pool_equivalent: bool = True) -> AuthzPolicy:
        """Every level's lists from `get` (a knob's expanded value, None if undefined,
        Settings.get_str); a bad entry is a ConfigError naming its knob. Host names
        without a wildcard match nothing until resolved()."""
        levels: dict[str, LevelPolicy] = {}
        for level in LEVELS:
            allow, allow_knob, defined = _setting(get, "ALLOW", level, legacy)
            deprecated = False
            if not defined and level in FALLBACKS:  # nothing in the search: execd's
                allow, allow_knob = FALLBACKS[level], f"execd's default ALLOW_{level}"
            elif not defined and level in FALLBACK_KNOBS:
                allow_knob = FALLBACK_KNOBS[level]
                allow = (get(allow_knob) or "").strip() or None
                allow_knob, deprecated = (allow_knob, True) if allow else (None, False)
            deny, deny_knob, _ = _setting(get, "DENY", level, legacy)
            if deprecated:
                allowed = _user_entries(allow or "", pool_equivalent)
            else:
                allowed = _entries(allow, allow_knob or "", pool_equivalent) if allow else ()
            denied = _entries(deny, deny_knob or "", pool_equivalent) if deny else ()
            allow_all, deny_all = allow in ("*", "*/*"), deny in ("*", "*/*")
            if deny_all or (allow is None and level not in ("READ", "WRITE")):
                behaviour = "deny"
            elif allow_all:
                behaviour = "only-denies" if deny else "allow"
            else:
                behaviour = "table"
            levels[level] = LevelPolicy(allowed, denied, allow_knob, deny_knob, behaviour)
        return cls(levels)

    def host_names(self) -> set[str]:
        """The host names without a wildcard that resolved() looks up."""
        return {e.host for p in self.levels.values() for e in (*p.allow, *p.deny)
                if e.host_name and not e.name_pattern}  # fmt: skip

    @property
    def wants_peer_names(self) -> bool:
        """Whether an entry is a host name pattern, matched against the peer's names."""
        return any(e.name_pattern for p in self.levels.values() for e in (*p.allow, *p.deny))

    def resolved(self, forward: Resolver = forward_addresses) -> AuthzPolicy:
        """This policy with every host name without a wildcard standing for the
        addresses it resolves to (blocking: call it off the event loop). A name that
        does not resolve is logged and matches nothing."""
        found: dict[str, frozenset[str]] = {}
        for name in sorted(self.host_names()):
            try:
                found[name] = frozenset(filter(None, map(normal_ip, forward(name))))
            except (OSError, UnicodeError) as exc:
                log.warning("authz_host_unresolved", host=name, reason=str(exc) or
                            type(exc).__name__)  # fmt: skip
                found[name] = frozenset()

        def resolve(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
            return tuple(dataclasses.replace(e, addresses=found[e.host])
                         if e.host in found and e.host_name and not e.name_pattern else e
                         for e in entries)  # fmt: skip

        return AuthzPolicy({level: dataclasses.replace(p, allow=resolve(p.allow),
                                                       deny=resolve(p.deny))
                            for level, p in self.levels.items()})  # fmt: skip

    def verify(self, level: str, user: str, ip: str,
               hostnames: Sequence[str] = ()) -> Verdict:  # fmt: skip
        """May `user` connecting from `ip` (whose forward-confirmed host names are
        `hostnames`) send a command of `level`? And why."""
        return self._verify(level, user or "*", normal_ip(ip) or ip, tuple(hostnames))

    def _verify(self, level: str, user: str, ip: str,
                hostnames: Sequence[str]) -> Verdict:  # fmt: skip
        policy = self.levels.get(level)
        if policy is None:
            return Verdict(False, f"{level} is not an authorization level execd knows")
        if policy.behaviour == "allow":
            return Verdict(True, f"{level} authorization policy allows access by anyone")
        if policy.behaviour == "deny":
            why = f"{policy.deny_knob} denies everyone" if policy.deny_knob and \
                policy.allow_knob else f"no ALLOW_{level} is defined, or it is empty"
            return Verdict(False, f"{level} authorization policy denies all access ({why})")
        if any(e.matches(user, ip, hostnames) for e in policy.deny):
            return Verdict(False, f"{level} authorization policy denies {user} from {ip} "
                                  f"(an entry of {policy.deny_knob})")  # fmt: skip
        if policy.behaviour == "only-denies":
            return Verdict(True, f"{level} authorization policy does not deny, so allowing")
        if any(e.matches(user, ip, hostnames) for e in policy.allow):
            return Verdict(True, f"{level} authorization policy allows {user} from {ip} "
                                 f"(an entry of {policy.allow_knob})")  # fmt: skip
        for parent in implied_by(level):
            verdict = self._verify(parent, user, ip, hostnames)
            if verdict.allowed:
                return Verdict(True, f"{level} is implied by {parent}; {verdict.reason}")
        where = policy.allow_knob or f"ALLOW_{level} (undefined)"
        return Verdict(False, f"{level} authorization policy contains no matching ALLOW "
                              f"entry for {user} from {ip} ({where})")  # fmt: skip


def policy_from_settings(settings: Any) -> AuthzPolicy:
    """The policy a daemon's Settings define; a ConfigError names a bad entry's knob,
    and the file and line that define it."""
    try:
        return AuthzPolicy.from_config(
            settings.get_str, legacy=settings.get_bool("LEGACY_ALLOW_SEMANTICS", False),
            pool_equivalent=settings.get_bool("USE_POOL_USERNAME_EQUIVALENT", True))
    except ConfigError as exc:
        found = settings.config.definition(exc.message.split(":", 1)[0])
        if found is None:
            raise
        raise ConfigError(exc.message, found.origin.file, found.origin.line) from None


def implied_by(level: str) -> list[str]:
    """The levels that directly imply `level` (DirectlyImpliedBy)."""
    return [p for p in LEVELS if IMPLIED_PERMISSION.get(p) == level]


def peer_ip(address: str) -> str:
    """The IP of a Channel's peer text (`1.2.3.4:567`, `[::1]:567`, a bare address), an
    IPv4-mapped IPv6 one as IPv4; text that holds no IP address comes back as it is
    (no network or host entry matches it)."""
    if address.startswith("["):
        host = address[1:].split("]", 1)[0]
    elif address.count(":") == 1:
        host = address.rsplit(":", 1)[0]
    else:
        host = address
    return normal_ip(host.split("%", 1)[0]) or address
