"""Host names for the authorization policy, looked up off the event loop.

As HTCondor's IpVerify: a host-name entry without a wildcard stands for the addresses
it resolves to when the policy is loaded (ExpandHostAddresses); an entry with a wildcard
is matched against the peer's host names, and a name the peer's reverse DNS (PTR) gives
counts only if it resolves forward to the peer's address again
(get_hostname_with_alias), so whoever controls the PTR zone of their address cannot
name themselves into a policy.

Lookups run on one daemon thread (execd.wire.blocking_worker), each within a time
limit: a slow or hostile zone costs the command that waits for it, never the loop.
Confirmed names are kept a while for a bounded number of addresses; a failed lookup
is not kept, so a transient failure does not outlive the command it cost.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from execd.wire.blocking_worker import BlockingWorker

LOOKUP_TIMEOUT_S = 5.0
CACHE_SIZE = 1024  # addresses
CACHE_TTL_S = 300.0

Resolver = Callable[[str], Sequence[str]]


def normal_ip(text: str) -> str | None:
    """`text` as an IP address string (an IPv4-mapped IPv6 one as IPv4), or None."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def forward_addresses(name: str) -> list[str]:
    """The addresses `name` resolves to (blocking); OSError when it does not."""
    infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    found = {normal_ip(str(info[4][0]).split("%", 1)[0]) for info in infos}
    return sorted(a for a in found if a is not None)


def confirmed_names(ip: str, forward: Resolver = forward_addresses,
                    reverse: Callable[[str], tuple[str, list[str], list[str]]]
                    = socket.gethostbyaddr) -> list[str]:  # fmt: skip
    """The peer's reverse-DNS name and aliases that resolve forward to `ip` again
    (blocking); OSError when the reverse lookup fails."""
    name, aliases, _ = reverse(ip)
    kept = []
    for candidate in dict.fromkeys([name, *aliases]):
        try:
            if ip in forward(candidate):
                kept.append(candidate)
        except OSError:
            continue
    return kept


class PeerNames:
    """A peer address's confirmed host names, cached per address for CACHE_TTL_S."""

    def __init__(self, lookup: Resolver = confirmed_names, *,
                 timeout_s: float = LOOKUP_TIMEOUT_S, size: int = CACHE_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.lookup = lookup
        self.timeout_s = timeout_s
        self.size = size
        self.clock = clock
        self.cache: OrderedDict[str, tuple[float, tuple[str, ...]]] = OrderedDict()
        self.worker = BlockingWorker("execd-dns")

    async def of(self, ip: str) -> tuple[str, ...]:
        """The names of `ip`; none for text that is not an IP address, or when the
        lookup fails or takes longer than the time limit."""
        if normal_ip(ip) is None:
            return ()
        now = self.clock()
        cached = self.cache.get(ip)
        if cached is not None and cached[0] > now:
            self.cache.move_to_end(ip)
            return cached[1]
        try:
            names = tuple(await self.worker.run(self.timeout_s, self.lookup, ip))
        except (OSError, TimeoutError, UnicodeError):
            self.cache.pop(ip, None)
            return ()
        self.cache[ip] = (now + CACHE_TTL_S, names)
        self.cache.move_to_end(ip)
        while len(self.cache) > self.size:
            self.cache.popitem(last=False)
        return names
