"""FS authentication, both sides (HTCondor's condor_auth_fs.cpp): proof by mkdir.

The server names a directory it would have to see created, e.g.
/tmp/FS_127.0.0.1_9618_XXXAbc123_. A name ending in "_" asks the client to append its
view of the server's endpoint (channel binding): "ip:port", plus "?sock=<id>" when it
went through a shared port. The client creates the directory with mode 0700, replies
int 0 (or -1) and that suffix, and the server lstat()s the directory: its owner is the
client's identity. The server answers int 0 for success; the client removes the
directory either way.

execd only creates directories directly under `fs_dir` (/tmp, HTCondor's FS_LOCAL_DIR
default) whose name starts with "FS_": a server cannot make root mkdir elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import tempfile
from dataclasses import dataclass
from pathlib import PurePosixPath

from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.sinful import Sinful


class AuthenticationFailedError(RemoteProtocolError):
    """The peer refused our identity (or we could not prove it)."""


@dataclass(frozen=True)
class FsIdentity:
    """Who the directory says we are: its owner (None: this process's own ids)."""

    uid: int | None = None
    gid: int | None = None
    fs_dir: str = "/tmp"


def endpoint_suffix(channel: Channel, connect: Sinful) -> str:
    host, port = channel.peer_address
    shown = f"[{host}]" if ":" in host else host
    suffix = f"{shown}:{port}"
    if connect.shared_port_id:
        suffix += f"?sock={connect.shared_port_id}"
    return suffix


def _checked_path(name: str, suffix: str, identity: FsIdentity) -> str:
    path = PurePosixPath(name + suffix)
    if (str(path.parent) != identity.fs_dir.rstrip("/") or not path.name.startswith("FS_")
            or ".." in path.parts or "/" in suffix):  # fmt: skip
        raise RemoteProtocolError(
            f"FS server asked for directory {name!r}, not an FS_ name directly under "
            f"{identity.fs_dir}"
        )
    return str(path)


async def authenticate_fs(channel: Channel, connect: Sinful, identity: FsIdentity) -> None:
    """Run the client side; AuthenticationFailedError when the server does not accept us."""
    dec = channel.decoder(await channel.recv())
    name = dec.get_string("FS directory name")
    dec.finish("FS directory message")
    if not name:
        raise AuthenticationFailedError(f"{channel.peer}: FS server could not make its directory")
    suffix = endpoint_suffix(channel, connect) if name.endswith("_") else ""
    path = _checked_path(name, suffix, identity)
    created = False
    try:
        try:
            os.mkdir(path, 0o700)
            created = True
            if identity.uid is not None:
                os.chown(path, identity.uid, identity.gid if identity.gid is not None else -1)
            result = 0
        except OSError:
            result = -1
        enc = channel.encoder().put_int(result)
        if suffix:
            enc.put_string(suffix)
        await channel.send(enc.payload())
        dec = channel.decoder(await channel.recv())
        server_result = dec.get_int("FS server result")
        dec.finish("FS result message")
    finally:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(path)
    if result != 0:
        raise AuthenticationFailedError(f"{channel.peer}: could not create FS directory {path}")
    if server_result != 0:
        raise AuthenticationFailedError(
            f"{channel.peer} refused FS authentication (its log names the reason)"
        )


# ----- server side -------------------------------------------------------------------
def _new_server_name(channel: Channel, fs_dir: str) -> str:
    """A fresh name the client must create: made unique by creating and removing a file,
    as HTCondor's condor_mkstemp does; the trailing "_" invites channel binding."""
    host, port = channel.local_address
    fd, path = tempfile.mkstemp(prefix=f"FS_{host}_{port}_", dir=fs_dir)
    os.close(fd)
    os.unlink(path)
    return path + "_"


def _suffix_matches(channel: Channel, suffix: str, shared_port_id: str | None) -> bool:
    """The client's view of our endpoint ("ip:port[?sock=id]") must be ours."""
    if "/" in suffix:
        return False
    endpoint, _, sock = suffix.partition("?sock=")
    host, port = channel.local_address
    shown = f"[{host}]" if ":" in host else host
    if endpoint != f"{shown}:{port}":
        return False
    return not sock or sock == shared_port_id


def _owner_of(path: str) -> str | None:
    """The user who made `path` the way FS demands (a real 0700 directory), or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if (not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o700
            or st.st_nlink not in (1, 2)):  # fmt: skip
        return None
    try:
        return pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        return None


async def serve_fs(channel: Channel, *, fs_dir: str = "/tmp",
                   shared_port_id: str | None = None) -> str:  # fmt: skip
    """Run the server side; the client's user name, or AuthenticationFailedError."""
    name = _new_server_name(channel, fs_dir)
    await channel.send(channel.encoder().put_string(name).payload())
    dec = channel.decoder(await channel.recv())
    client_result = dec.get_int("FS client result")
    suffix = "" if dec.at_end() else dec.get_string("FS client suffix")
    dec.finish("FS client message")
    owner = None
    if client_result == 0 and (not suffix or _suffix_matches(channel, suffix, shared_port_id)):
        owner = _owner_of(name + suffix)
    await channel.send(channel.encoder().put_int(0 if owner else -1).payload())
    if owner is None:
        raise AuthenticationFailedError(
            f"{channel.peer} failed FS authentication (directory {name + suffix!r} missing, "
            "not ours to trust, or a suffix that is not our endpoint)"
        )
    return owner
