"""The node's name, as HTCondor daemons find it (Machine, slot Names, FULL_HOSTNAME).

NETWORK_HOSTNAME, when set, is the name as given. Otherwise the kernel's host name is
looked up forward (getaddrinfo with AI_CANONNAME) and its canonical name kept: the name
/etc/hosts or DNS gives that host name itself. Python's socket.getfqdn() instead looks
the address back up and takes the first name of the line it lands on, which on a node
whose /etc/hosts puts `127.0.0.1 localhost` before `127.0.0.1 <name>` is "localhost":
every such node would advertise slot1@localhost and collide in the collector. A name
without a dot gets DEFAULT_DOMAIN_NAME appended. (HTCondor's NO_DNS fake names, built from
the IP address, are not implemented.)
"""

from __future__ import annotations

import socket


def local_fqdn(network_hostname: str | None = None, default_domain: str | None = None) -> str:
    """The node's fully qualified name under NETWORK_HOSTNAME and DEFAULT_DOMAIN_NAME."""
    name = network_hostname or canonical_name(socket.gethostname())
    if "." not in name and default_domain:
        name += default_domain if default_domain.startswith(".") else f".{default_domain}"
    return name


def canonical_name(host: str) -> str:
    """host's canonical name by forward lookup; host itself where the lookup fails."""
    try:
        found = socket.getaddrinfo(host, None, flags=socket.AI_CANONNAME)
    except (OSError, UnicodeError):
        return host
    return next((canon for *_, canon, _addr in found if canon), host)
