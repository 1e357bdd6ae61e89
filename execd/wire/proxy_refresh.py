"""DELEGATE_GSI_CRED_STARTER (500): the shadow delegates a renewed X509 proxy to a
running job (RemoteResource::checkX509Proxy: the submitted proxy file changed, or the
delegated one nears its end), on the claim's session, to the starter's address.

The exchange is command 4's (execd/wire/x509_delegation.py), then our int reply and
the end of the message: 1 the proxy was replaced, 0 it was not (condor_starter's
updateX509Proxy). The new proxy goes to `<name>.tmp` in the job's sandbox and is
renamed over the job's proxy, as condor_starter does; the daemon is root and the job
owns that directory, so both are done relative to the sandbox opened without following
a link, the temporary file is created exclusively and never through a link, and it is
given to the job's user before it is renamed into place. Only a job with file transfer
has its proxy in its sandbox; any other job's refresh is answered 0, as is one for a
claim with no running job. UPDATE_GSI_CRED (487, the proxy copied as a file, which the
shadow tries after a failed delegation) is not served: the shadow logs that failure
and the job goes on with the proxy it has.
"""

from __future__ import annotations

import contextlib
import os

from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.server import Peer
from execd.wire.shadow_link import LIVE_LINKS, ShadowLinks
from execd.wire.x509_delegation import DelegationError, receive_proxy

log = get_logger("shadow")
REFRESHED, NOT_REFRESHED = 1, 0


def replace_proxy(sandbox: str, name: str, text: bytes, uid: int) -> None:
    """Write `text` to sandbox/name.tmp (the sandbox's owner and group, 0600) and rename
    it over sandbox/name; OSError if the job's directory does not allow it."""
    tmp = f"{name}.tmp"
    dir_fd = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        gid = os.fstat(dir_fd).st_gid
        with contextlib.suppress(FileNotFoundError):  # a stale one (unlink follows nothing)
            os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=dir_fd)  # fmt: skip
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]
            os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


async def serve_proxy_refresh(channel: Channel, peer: Peer,
                              links: ShadowLinks = LIVE_LINKS) -> None:  # fmt: skip
    """One DELEGATE_GSI_CRED_STARTER from the shadow (already authorized)."""
    link = links.by_session(peer.sid)
    place = None if link is None or link.closed or link.files is None \
        or link.proxy_name is None else (link.files, link.proxy_name)  # fmt: skip
    job = link.global_job_id if link is not None else None
    reply = NOT_REFRESHED
    try:
        text = await receive_proxy(channel)  # the exchange runs whatever we do with it
    except DelegationError as exc:
        log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job, why=str(exc))
    else:
        if place is None:
            log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job,
                        why="no running job with a proxy in its sandbox under this claim")
        else:
            files, name = place
            try:
                replace_proxy(str(files.sandbox), name, text, files.uid)
            except OSError as exc:
                log.warning("x509_proxy_refresh_failed", peer=peer.address, job=job,
                            why=f"{name}: {exc.strerror}")  # fmt: skip
            else:
                reply = REFRESHED
                log.info("x509_proxy_refreshed", job=job, file=name)
    await channel.send(channel.encoder().put_int(reply).payload())
