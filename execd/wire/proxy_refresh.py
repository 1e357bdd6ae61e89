"""DELEGATE_GSI_CRED_STARTER (500): the shadow delegates a renewed X509 proxy to a
running job (RemoteResource::checkX509Proxy: the submitted proxy file changed, or the
delegated one nears its end), on the claim's session, to the starter's address.

The exchange is command 4's (execd/wire/x509_delegation.py), then our int reply and
the end of the message: 1 the proxy was replaced, 0 it was not (condor_starter's
updateX509Proxy). The new proxy goes to `<name>.tmp` in the job's sandbox and is
renamed over the job's proxy, as condor_starter does; the daemon is root and the job
owns that directory, so both are done relative to the sandbox opened without following
a link, the temporary file is created exclusively and never through a link, and it is
given to the job's user before it is renamed into place. The sandbox opened must be
the directory recorded when the job started (or was resumed): same device and inode,
owned by the job's user, never root's, so a job that swapped its sandbox for a link or
another directory gets no file written there. A temporary file left by a failed write
is removed (it holds a private key). Only a job with file transfer has its proxy in its
sandbox; a peer whose session is no such job's claim gets no exchange at all (no key is
made for it) and the connection is closed; a job that ends during the exchange gets no
file and the reply 0. UPDATE_GSI_CRED (487) is the shadow's
fallback when the delegation did not succeed, and its only way with
DELEGATE_JOB_GSI_CREDENTIALS = false (RemoteResource::updateX509Proxy): the proxy
itself as one file (ReliSock::put_file), then the same int reply, and the same
writing. As condor_starter's JICShadow::updateX509Proxy: a job of the claim without
file transfer is answered 2 at once (declined: the shadow stops checking its proxy for
good), one without a proxy gets no answer, and a file that could not be received (cut
off, late, larger than 1 MiB: not read beyond its size) or written is answered 0.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.filetransfer import receive_small_file
from execd.wire.sandbox_file import replace_sandbox_file
from execd.wire.server import Peer
from execd.wire.shadow_link import LIVE_LINKS, ShadowLink, ShadowLinks
from execd.wire.x509_delegation import DelegationError, receive_proxy

log = get_logger("shadow")
REFRESHED, NOT_REFRESHED, DECLINED = 1, 0, 2  # DCStarter::X509UpdateStatus
MAX_PROXY_BYTES = 1 << 20  # a proxy file is a few KiB


@dataclass(frozen=True)
class ProxyTarget:
    """Where a job's refreshed proxy goes: its sandbox (the path, unresolved, and the
    directory's identity when recorded), the proxy's name there, the job's user."""

    sandbox: str
    name: str
    uid: int
    dev: int
    ino: int


def proxy_target(sandbox: str, name: str | None) -> ProxyTarget | None:
    """The target for the sandbox as it is now (lstat: a link is no sandbox), or None."""
    if name is None:
        return None
    try:
        st = os.lstat(sandbox)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return ProxyTarget(sandbox, name, st.st_uid, st.st_dev, st.st_ino)


def replace_proxy(target: ProxyTarget, text: bytes) -> None:
    """Write `text` to <name>.tmp in the sandbox (the job's user and the sandbox's
    group, 0600) and rename it over <name>; OSError if the sandbox is not the recorded
    directory or the job's directory does not allow it. No .tmp is left behind."""
    replace_sandbox_file(target.sandbox, (target.dev, target.ino, target.uid), target.name,
                         text, mode=0o600)  # fmt: skip


def _live_target(link: ShadowLink | None) -> ProxyTarget | None:
    return None if link is None or link.closed else link.proxy


async def serve_proxy_refresh(channel: Channel, peer: Peer,
                              links: ShadowLinks = LIVE_LINKS) -> None:  # fmt: skip
    """One DELEGATE_GSI_CRED_STARTER from the shadow (already authorized)."""
    link = links.by_session(peer.sid)
    if _live_target(link) is None:  # no key is made for a peer with no job to give it
        _refused(peer, link)
        return
    await _refresh(channel, peer, link, receive_proxy(channel))


async def serve_proxy_update(channel: Channel, peer: Peer,
                             links: ShadowLinks = LIVE_LINKS) -> None:  # fmt: skip
    """One UPDATE_GSI_CRED from the shadow (already authorized): the proxy as a file
    (ReliSock::put_file). A job of this claim without file transfer is answered 2 at
    once, as condor_starter does: the shadow stops trying."""
    link = links.by_session(peer.sid)
    if link is None or link.closed or not link.file_transfer or link.proxy_name is None:
        _refused(peer, link)
        if link is not None and not link.closed and not link.file_transfer:
            await channel.send(channel.encoder().put_int(DECLINED).payload())
        return
    await _refresh(channel, peer, link, _proxy_file(channel))


async def _proxy_file(channel: Channel) -> bytes:
    try:
        text = await receive_small_file(channel, MAX_PROXY_BYTES)
    except (ProtocolError, TimeoutError) as exc:  # condor_starter answers 0 all the same
        raise DelegationError(f"the proxy file was not received: {exc}") from None
    if text is None:
        raise DelegationError(f"the proxy file is larger than {MAX_PROXY_BYTES} bytes")
    return text


def _refused(peer: Peer, link: ShadowLink | None) -> None:
    log.warning("x509_proxy_refresh_refused", peer=peer.address,
                job=link.global_job_id if link is not None else None,
                why="no running job with a proxy in its sandbox under this session")  # fmt: skip


async def _refresh(channel: Channel, peer: Peer, link: ShadowLink | None,
                   receiving: Coroutine[Any, Any, bytes]) -> None:  # fmt: skip
    """Receive the proxy, write it if the job is still there, reply 1 or 0."""
    job = link.global_job_id if link is not None else None
    reply = NOT_REFRESHED
    try:
        text = await receiving
    except DelegationError as exc:
        log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job, why=str(exc))
    else:
        target = _live_target(link)  # again: the job may have ended during the exchange
        if target is None:
            ended = link is None or link.closed
            log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job,
                        why="the job ended during the exchange" if ended else
                        "the job's sandbox was not its directory when it started or resumed")
        else:
            try:
                replace_proxy(target, text)
            except OSError as exc:
                log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job,
                            why=f"{target.name}: {exc.strerror}")  # fmt: skip
            except ValueError as exc:  # a NUL in the job's x509userproxy
                log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job,
                            why=f"{target.name!r}: {exc}")  # fmt: skip
            else:
                reply = REFRESHED
                log.info("x509_proxy_refreshed", job=job, file=target.name)
    await channel.send(channel.encoder().put_int(reply).payload())
