"""Starting a job's Chirp proxy (execd/wire/chirp_proxy.py): as the job starts, and
after a restart in place on the listening socket the old image handed over.

The hand-over (ChirpProxy.export_listener, kept with the shadow's connection in the
state store: execd/daemon/pool_conversation.py) keeps the port bound through the exec,
so nobody else on the node can take it in between and a connection made meanwhile
waits in its backlog. Nothing is read back from `.chirp.config`: the job owns its
sandbox and runs on through the restart.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from execd.log import get_logger
from execd.wire.chirp_address import COOKIE_LENGTH
from execd.wire.chirp_config import CHIRP_DEFAULTS, ChirpConfig, job_grants
from execd.wire.chirp_proxy import ChirpProxy, ChirpShadow
from execd.wire.handover import inherited_fd

log = get_logger("wire")

_COOKIE = re.compile(f"[a-z]{{{COOKIE_LENGTH}}}")


async def open_chirp_proxy(shadow: ChirpShadow, job: Mapping[str, object], global_job_id: str,
                           sandbox: Path, *, owner: tuple[int, int],
                           connected: Callable[[], bool],
                           job_wire: Mapping[str, str] | None = None,
                           config: ChirpConfig = CHIRP_DEFAULTS,
                           ) -> ChirpProxy | None:  # fmt: skip
    """A job's proxy, listening, its `.chirp.config` written; None (logged) where that
    fails: the job runs without one, as condor_starter's does when its proxy fails.
    None too for a job that gets none (chirp_config.job_grants: the job ad and the
    ENABLE_CHIRP* knobs, `config`), as condor_starter makes none."""
    grants = job_grants(job, config)
    if grants is None:
        log.debug("chirp_proxy_not_wanted", job=global_job_id, enabled=config.enabled)
        return None
    proxy = ChirpProxy(shadow, job, global_job_id=global_job_id, connected=connected,
                       job_wire=job_wire, config=config)  # fmt: skip
    try:
        await proxy.listen()
        proxy.write_config(sandbox, *owner)
    except OSError as exc:
        log.error("chirp_proxy_failed", job=global_job_id, error=str(exc))
        await proxy.close()
        return None
    return proxy


async def adopt_chirp_proxy(record: Mapping[str, Any], shadow: ChirpShadow,
                            job: Mapping[str, object], global_job_id: str, *,
                            connected: Callable[[], bool],
                            job_wire: Mapping[str, str] | None = None,
                            config: ChirpConfig = CHIRP_DEFAULTS,
                            ) -> ChirpProxy | None:  # fmt: skip
    """After a restart in place: the proxy again on the listening socket the old image
    handed over (ChirpProxy.export_listener), with its cookie and the ENABLE_CHIRP*
    knobs as the job started (a record without them: `config`): the job's
    .chirp.config stays true, and the port was never free for anyone else to take.
    Nothing is read from the sandbox (the job owns it). None (logged) where the record
    is unusable."""
    fd = inherited_fd(dict(record))
    if fd is None:
        log.error("chirp_proxy_not_restored", job=global_job_id,
                  error="no listening socket inherited from the old image")  # fmt: skip
        return None
    cookie = record.get("cookie")
    sock: socket.socket | None = None
    try:
        sock = socket.socket(fileno=fd)
        sock.set_inheritable(False)
        if not isinstance(cookie, str) or not _COOKIE.fullmatch(cookie):
            raise ValueError("the handed-over record holds no cookie")
        kept = ChirpConfig.from_record(record["config"]) if "config" in record else config
        if kept is None:
            raise ValueError("the handed-over record's Chirp settings are unreadable")
        proxy = ChirpProxy(shadow, job, global_job_id=global_job_id, cookie=cookie,
                           connected=connected, job_wire=job_wire, config=kept)  # fmt: skip
        await proxy.listen(sock=sock)
    except Exception as exc:  # whatever it is, the job goes on without its proxy
        log.error("chirp_proxy_not_restored", job=global_job_id, error=str(exc))
        with contextlib.suppress(OSError):
            sock.close() if sock is not None else os.close(fd)
        return None
    return proxy
