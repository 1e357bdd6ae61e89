"""Host names as HTCondor daemons find them: the node's own (Machine, slot Names,
FULL_HOSTNAME) and a peer's (a claim's ClientMachine).

NETWORK_HOSTNAME, when set, is the name as given. Otherwise the kernel's host name is
looked up forward (getaddrinfo with AI_CANONNAME) and its canonical name kept: the name
/etc/hosts or DNS gives that host name itself. Python's socket.getfqdn() instead looks
the address back up and takes the first name of the line it lands on, which on a node
whose /etc/hosts puts `127.0.0.1 localhost` before `127.0.0.1 <name>` is "localhost":
every such node would advertise slot1@localhost and collide in the collector. A name
without a dot gets DEFAULT_DOMAIN_NAME appended. (HTCondor's NO_DNS fake names, built from
the IP address, are not implemented for the node's own name.)
"""

from __future__ import annotations

import socket


def local_fqdn(network_hostname: str | None = None, default_domain: str | None = None) -> str:
    """The node's fully qualified name under NETWORK_HOSTNAME and DEFAULT_DOMAIN_NAME."""
    return qualified(network_hostname or canonical_name(socket.gethostname()), default_domain)


def qualified(name: str, default_domain: str | None) -> str:
    """name, with DEFAULT_DOMAIN_NAME appended where it has no dot."""
    if "." in name or not default_domain:
        return name
    return f"{name}.{default_domain.lstrip('.')}"


def canonical_name(host: str) -> str:
    """host's canonical name by forward lookup; host itself where the lookup fails."""
    try:
        found = socket.getaddrinfo(host, None, flags=socket.AI_CANONNAME)
    except (OSError, UnicodeError):
        return host
    return next((canon for *_, canon, _addr in found if canon), host)


def client_machine(peer: str, *, no_dns: bool = False, default_domain: str = "") -> str:
    """The host name condor_startd records for a claiming peer (`ip:port`): a reverse
    lookup's names that resolve back to the address, the first with a dot; else the
    first with DEFAULT_DOMAIN_NAME appended; else the address. Blocks on DNS."""
    ip = peer.rpartition(":")[0].strip("[]") or peer
    if no_dns:  # HTCondor's fake host name: the address's digits joined by '-'
        if not default_domain:
            return ip
        fake = ip.replace(".", "-").replace(":", "-") + "." + default_domain.lstrip(".")
        return "0" + fake if fake.startswith("-") else fake
    try:
        name, aliases, _ = socket.gethostbyaddr(ip)
    except OSError:
        return ip
    names = [n for n in [name, *aliases] if _resolves_to(n, ip)]
    if not names:
        return ip
    dotted = next((n for n in names if "." in n), None)
    if dotted is not None or default_domain:
        return qualified(dotted or names[0], default_domain)
    return ip


def _resolves_to(name: str, ip: str) -> bool:
    try:
        return any(info[4][0] == ip for info in socket.getaddrinfo(name, None))
    except OSError:
        return False
