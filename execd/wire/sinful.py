"""HTCondor daemon addresses ("sinful strings"): <host:port?key=value&flag&...>.

e.g. <127.0.0.1:9618?addrs=127.0.0.1-9618&alias=node&noUDP&sock=collector>. The `sock`
parameter names the daemon behind a shared port; `alias` is the daemon's host name
(HOST_ALIAS, default FULL_HOSTNAME): a client keeps it when it rewrites the address,
checks an SSL host certificate against it and records the host it authenticated under
that name (known_hosts). A plain "host:port" (COLLECTOR_HOST) is accepted too. IPv6
hosts are bracketed: <[fd00::2]:9618>.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from execd.errors import ExecdError


class AddressError(ExecdError):
    """A daemon address that cannot be parsed (names the address)."""


@dataclass(frozen=True)
class Sinful:
    host: str
    port: int
    params: dict[str, str] = field(default_factory=dict)

    @property
    def shared_port_id(self) -> str | None:
        return self.params.get("sock") or None

    @property
    def host_port(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        query = "&".join(k if v == "" else f"{k}={quote(v, safe='-.:_+[]')}"
                         for k, v in self.params.items())  # fmt: skip
        return f"<{self.host_port}{'?' + query if query else ''}>"


def with_alias(address: str, alias: str) -> str:
    """`address` with `alias=` (none: as it is), its parameters in HTCondor's order (by
    name, as its Sinful's map writes them: addrs, alias, noUDP, sock)."""
    if not alias:
        return address
    parsed = parse_sinful(address)
    params = dict(sorted({**parsed.params, "alias": alias}.items()))
    return str(Sinful(parsed.host, parsed.port, params))


def parse_sinful(text: str) -> Sinful:
    raw = text.strip()
    if raw.startswith("<") and raw.endswith(">"):
        raw = raw[1:-1]
    hostport, _, query = raw.partition("?")
    if hostport.startswith("["):
        host, sep, rest = hostport[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise AddressError(f"bad daemon address {text!r}: unterminated [IPv6] host")
        port_text = rest[1:]
    else:
        host, sep, port_text = hostport.rpartition(":")
        if not sep:
            raise AddressError(f"bad daemon address {text!r}: no port")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AddressError(f"bad daemon address {text!r}: host or port missing or invalid")
    params: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        params[unquote(key)] = unquote(value)
    return Sinful(host, int(port_text), params)


DEFAULT_COLLECTOR_PORT = 9618


def collector_address(text: str) -> Sinful:
    """COLLECTOR_HOST as HTCondor reads it: "host", "host:port" or a sinful string; a
    comma/space-separated list names several collectors, of which this is the first."""
    first = text.replace(",", " ").split()
    if not first:
        raise AddressError("COLLECTOR_HOST is empty")
    word = first[0]
    if word.startswith("<"):
        return parse_sinful(word)
    if word.startswith("["):
        return parse_sinful(word if "]:" in word else f"{word}:{DEFAULT_COLLECTOR_PORT}")
    if word.count(":") == 1:
        return parse_sinful(word)
    return Sinful(word, DEFAULT_COLLECTOR_PORT)  # a host name (or a bare IPv6 address)


def _route(protocol: str, host: str, port: int, extra: str) -> str:
    return f'[ p="{protocol}"; a="{host}"; port={port}; n="Internet";{extra} ]'


def v1_address(address: str) -> str:
    """`AddressV1`: the address as HTCondor's Sinful writes its v1 form (a list of
    source routes): the primary host and port first, then each of `addrs` (else the
    host itself when it is an IP literal), each with the address's alias, shared-port
    id and noUDP. e.g. <127.0.0.1:5?addrs=127.0.0.1-5&alias=node&noUDP> is
    {[ p="primary"; a="127.0.0.1"; port=5; n="Internet"; alias="node"; noUDP=true; ],
     [ p="IPv4"; a="127.0.0.1"; port=5; n="Internet"; alias="node"; noUDP=true; ]}"""
    parsed = parse_sinful(address)
    named = (("alias", "alias"), ("sock", "spid"))  # the address's name, the route's
    extra = "".join(f' {key}="{parsed.params[name]}";' for name, key in named
                    if parsed.params.get(name))  # fmt: skip
    if "noUDP" in parsed.params:
        extra += " noUDP=true;"
    publics: list[tuple[str, int]] = []
    if "addrs" in parsed.params:
        for item in filter(None, parsed.params["addrs"].split("+")):
            host, _, port = item.rpartition("-")
            if host and port.isdigit():
                publics.append((host.strip("[]"), int(port)))
    elif not parsed.params and _ip_literal(parsed.host):
        publics.append((parsed.host, parsed.port))
    routes = [_route("primary", parsed.host, parsed.port, extra)]
    routes += [_route("IPv6" if ":" in h else "IPv4", h, p, extra) for h, p in publics]
    return "{" + ", ".join(routes) + "}"


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
