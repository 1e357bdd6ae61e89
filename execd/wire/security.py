"""The DC_AUTHENTICATE handshake, client side (HTCondor's SecManStartCommand).

New session (the exchange in htcondor-captures/pyupdate.pcap, ping.log):
  C: int 60010, policy ad (AuthMethods, Authentication, CryptoMethods, ECDHPublicKey,
     Encryption, Integrity, NewSession = "YES", Command = the real command, ...)
  S: its policy ad (Enact = "YES", chosen AuthMethodsList/CryptoMethods, ECDHPublicKey)
  C: int bitmask of methods          S: int the method it picked
  ... the method's own exchange (FS: auth_fs.py) ...
  S: int 0 (no key wrapped by the method: the key comes from ECDH)
  both: AES-256-GCM from here on; the first packet each way binds the handshake digests
  S: ad {ReturnCode = "AUTHORIZED", Sid, User, ValidCommands}
  C: the command's own payload follows.
Resumed session: C: int 60010, ad {UseSession = "YES", Sid, Nonce, Command, ...};
  S: ad {ReturnCode, Nonce, RemoteVersion} in clear; then AES-GCM with the cached key.

The policy execd asks for is HTCondor's default: authentication, encryption and
integrity REQUIRED; execd speaks only AES (AES-256-GCM) and refuses a server that
would not encrypt.
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass, field
from typing import Any

from execd.errors import RemoteProtocolError
from execd.wire.auth_fs import AuthenticationFailedError, FsIdentity, authenticate_fs
from execd.wire.auth_token import IdToken, authenticate_token, check_server_offer
from execd.wire.channel import DEFAULT_TIMEOUT_S, Channel
from execd.wire.claim_session import MATCH_SESSION_USER, ClaimSession
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values, to_classad
from execd.wire.commands import AUTH_METHOD_BITS, AuthMethod, Command
from execd.wire.crypto import EcdhKeyPair
from execd.wire.session import Session, SessionCache, parse_commands
from execd.wire.sinful import Sinful

# The version execd reports to its peers; they gate protocol features on it.
CONDOR_VERSION = "$CondorVersion: 25.0.0 2025-01-01 BuildID: execd $"
SUPPORTED_METHODS = ("FS",)


class SessionNotFoundError(RemoteProtocolError):
    """The server no longer knows the session we tried to resume (forgotten here too)."""


class NotAuthorizedError(RemoteProtocolError):
    """The server authenticated us but refused the command."""


@dataclass
class ClientSecurity:
    """What a client brings to every handshake: methods, identity, its session cache."""

    methods: tuple[str, ...] = SUPPORTED_METHODS
    fs: FsIdentity = field(default_factory=FsIdentity)
    token: IdToken | None = field(default=None, repr=False)  # for IDTOKENS
    subsystem: str = "STARTD"
    cache: SessionCache = field(default_factory=SessionCache)
    timeout_s: float = DEFAULT_TIMEOUT_S


def _str(value: str) -> str:
    return from_values({"V": value})["V"]


def _reply_attrs(ad: WireAd) -> dict[str, Any]:
    parsed = to_classad(ad)
    return {k: parsed.get(k) for k in ad}


async def connect(address: Sinful, *, client_name: str = "execd",
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> Channel:  # fmt: skip
    """A TCP connection to a daemon, through its shared port when the address says so."""
    channel = await Channel.connect(address.host, address.port, timeout_s=timeout_s)
    if address.shared_port_id:
        enc = channel.encoder().put_int(Command.SHARED_PORT_CONNECT)
        enc.put_string(address.shared_port_id).put_string(client_name)
        enc.put_int(int(timeout_s)).put_int(0)
        await channel.send(enc.payload())
        # The shared port daemon swallows that message: it is not part of the handshake.
        channel.reset_digests()
    return channel


async def start_command(
    channel: Channel,
    address: Sinful,
    command: int,
    security: ClientSecurity,
    *,
    auth_command: int | None = None,
    session: Session | None = None,
) -> Session:
    """Authenticate (or resume) for `command`; afterwards send its payload on `channel`.

    `session`: resume exactly this one (a claim id's session, claim_client_session()).

    `auth_command`: with command DC_SEC_QUERY, the command whose authorization to ask
    about (what condor_ping does); the server answers {AuthorizationSucceeded}.
    """
    if session is None:
        session = security.cache.lookup(str(address), command, time.monotonic())
    if session is not None and auth_command is None:
        await _resume(channel, address, command, session, security)
        return session
    return await _new_session(channel, address, command, security, auth_command)


def claim_client_session(claim: ClaimSession, address: Sinful) -> Session:
    """A client Session for a claim id's session, to pass to start_command()."""
    return Session(sid=claim.sid, key=claim.key, connect_addr=str(address),
                   user=MATCH_SESSION_USER, auth_method="MATCH", valid_commands=frozenset(),
                   remote_version="", expires_at=None)  # fmt: skip


def _wire_method_name(name: str) -> str:
    """The name a server matches: 25.x servers turn their own IDTOKENS into TOKEN but
    compare it with the client's name as sent, so IDTOKENS must travel as TOKEN."""
    return "TOKEN" if AUTH_METHOD_BITS.get(name.upper()) == AuthMethod.TOKEN else name.upper()


def _policy_ad(address: Sinful, command: int, security: ClientSecurity, pubkey: str,
               auth_command: int | None = None) -> WireAd:  # fmt: skip
    extra = {} if auth_command is None else {"AuthCommand": str(auth_command)}
    return extra | {
        "AuthMethods": _str(",".join(_wire_method_name(m) for m in security.methods)),
        "Authentication": _str("REQUIRED"),
        "AuthenticationNew": _str("REQUIRED"),
        "Command": str(command),
        "ConnectSinful": _str(str(address)),
        "CryptoMethods": _str("AES"),
        "ECDHPublicKey": _str(pubkey),
        "Enact": _str("NO"),
        "Encryption": _str("REQUIRED"),
        "Integrity": _str("REQUIRED"),
        "NegotiatedSession": "true",
        "NewSession": _str("YES"),
        "OutgoingNegotiation": _str("REQUIRED"),
        "RemoteVersion": _str(CONDOR_VERSION),
        "ServerPid": str(os.getpid()),
        "SessionDuration": _str("86400"),
        "SessionLease": "3600",
        "Subsystem": _str(security.subsystem),
    }


async def _new_session(
    channel: Channel,
    address: Sinful,
    command: int,
    security: ClientSecurity,
    auth_command: int | None = None,
) -> Session:
    keypair = EcdhKeyPair()
    enc = channel.encoder().put_int(Command.DC_AUTHENTICATE)
    encode_ad(enc, _policy_ad(address, command, security, keypair.public_b64(), auth_command))
    await channel.send(enc.payload())

    dec = channel.decoder(await channel.recv())
    reply = _reply_attrs(decode_ad(dec, "server policy ad"))
    dec.finish("server policy message")
    if reply.get("Enact") != "YES":
        raise RemoteProtocolError(f"{channel.peer} did not enact a security policy: {reply}")
    if reply.get("Encryption") != "YES":
        raise RemoteProtocolError(f"{channel.peer} would not encrypt (Encryption = "
                                  f"{reply.get('Encryption')!r}); execd requires it")  # fmt: skip
    crypto = str(reply.get("CryptoMethods", "")).split(",")[0].strip().upper()
    if crypto not in ("AES", "AESGCM"):
        raise RemoteProtocolError(
            f"{channel.peer} chose crypto method {crypto!r}; execd speaks AES"
        )
    server_key = reply.get("ECDHPublicKey")
    if not isinstance(server_key, str):
        raise RemoteProtocolError(f"{channel.peer} sent no ECDHPublicKey")

    method = "none"
    if reply.get("Authentication") == "YES":
        offered = reply.get("AuthMethodsList") or reply.get("AuthMethods") or ""
        method = await _authenticate(channel, address, str(offered), security, reply)
        await _read_exchanged_key(channel)
    channel.enable_crypto(keypair.session_key(server_key))

    dec = channel.decoder(await channel.recv())
    post = _reply_attrs(decode_ad(dec, "post-authentication ad"))
    dec.finish("post-authentication message")
    code = post.get("ReturnCode")
    if code != "AUTHORIZED":
        raise NotAuthorizedError(f"{channel.peer} answered {code!r} for command {command} "
                            f"as {post.get('User')!r} ({method})")  # fmt: skip
    sid = post.get("Sid")
    if not isinstance(sid, str) or not sid:
        raise RemoteProtocolError(f"{channel.peer} authorized us but sent no session id")
    duration = str(reply.get("SessionDuration", "") or "")
    session = Session(
        sid=sid,
        key=channel_key_of(channel),
        connect_addr=str(address),
        user=str(post.get("User", "")),
        auth_method=method,
        valid_commands=parse_commands(str(post.get("ValidCommands", ""))),
        remote_version=str(reply.get("RemoteVersion", "")),
        expires_at=time.monotonic() + int(duration) if duration.isdigit() else None,
    )
    security.cache.store(session, command)
    return session


def channel_key_of(channel: Channel) -> bytes:
    key = channel.session_key
    if key is None:
        raise RemoteProtocolError("no session key on the channel")  # pragma: no cover
    return key


async def _authenticate(channel: Channel, address: Sinful, offered: str,
                        security: ClientSecurity, reply: dict[str, Any]) -> str:  # fmt: skip
    server_methods = {AUTH_METHOD_BITS[m.strip().upper()] for m in offered.split(",")
                      if m.strip().upper() in AUTH_METHOD_BITS}  # fmt: skip
    usable = [m for m in security.methods if AUTH_METHOD_BITS[m.upper()] in server_methods
              and (AUTH_METHOD_BITS[m.upper()] != AuthMethod.TOKEN or security.token)]  # fmt: skip
    mask = 0
    for name in usable:
        mask |= AUTH_METHOD_BITS[name.upper()]
    if not mask:
        raise AuthenticationFailedError(
            f"{channel.peer} offers {offered or 'no methods'}; execd can use "
            f"{','.join(security.methods)}"
        )
    await channel.send(channel.encoder().put_int(mask).payload())
    dec = channel.decoder(await channel.recv())
    chosen = dec.get_int("chosen authentication method")
    dec.finish("method choice message")
    if chosen == AuthMethod.FS and mask & AuthMethod.FS:
        await authenticate_fs(channel, address, security.fs)
        return "FS"
    if chosen == AuthMethod.TOKEN and mask & AuthMethod.TOKEN and security.token:
        check_server_offer(security.token, reply.get("TrustDomain"), reply.get("IssuerKeys"))
        await authenticate_token(channel, security.token)
        return "IDTOKENS"
    if chosen == 0:
        raise AuthenticationFailedError(f"{channel.peer} accepts none of the methods {usable}")
    raise RemoteProtocolError(f"{channel.peer} picked method {chosen}, which execd did not offer")


async def _read_exchanged_key(channel: Channel) -> None:
    """The method's key exchange: an int flag, and if set a wrapped key execd ignores
    (the session key comes from ECDH, as HTCondor's own client does with a server key)."""
    dec = channel.decoder(await channel.recv())
    has_key = dec.get_int("key exchange flag")
    dec.finish("key exchange message")
    if has_key:
        dec = channel.decoder(await channel.recv())
        for what in ("key length", "key protocol", "key duration"):
            dec.get_int(what)
        length = dec.get_int32("wrapped key length")
        dec.get_bytes(length, "wrapped key")
        dec.finish("wrapped key message")


async def _resume(channel: Channel, address: Sinful, command: int, session: Session,
                  security: ClientSecurity) -> None:  # fmt: skip
    nonce = base64.b64encode(os.urandom(33)).decode("ascii")
    ad = {
        "Command": str(command),
        "ConnectSinful": _str(str(address)),
        "CryptoMethods": _str("AES"),
        "Nonce": _str(nonce),
        "RemoteVersion": _str(CONDOR_VERSION),
        "ResumeResponse": "true",
        "Sid": _str(session.sid),
        "UseSession": _str("YES"),
    }
    enc = channel.encoder().put_int(Command.DC_AUTHENTICATE)
    await channel.send(encode_ad(enc, ad).payload())
    dec = channel.decoder(await channel.recv())
    reply = _reply_attrs(decode_ad(dec, "resume response ad"))
    dec.finish("resume response message")
    code = reply.get("ReturnCode")
    if code == "SID_NOT_FOUND":
        security.cache.invalidate(session.sid)
        raise SessionNotFoundError(f"{channel.peer} no longer knows our session")
    if code not in ("AUTHORIZED", None):
        raise NotAuthorizedError(f"{channel.peer} answered {code!r} for command {command} "
                            f"on a resumed session")  # fmt: skip
    channel.enable_crypto(session.key)
