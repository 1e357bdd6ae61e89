"""The cryptography of a CEDAR session, on the `cryptography` library.

- Key exchange: ECDH on P-256. Each side sends its public key as base64 (no newlines)
  of the 65-byte uncompressed point in its policy ad (ECDHPublicKey). The shared secret
  goes through HKDF-SHA256 with salt "htcondor" and info "keygen" to a 32-byte key
  (HTCondor's Condor_Crypt_Base::hkdf); the same HKDF turns a claim id's secret into
  the key of a claim-id session.
- Packets: AES-256-GCM with a 16-byte IV. The first packet a side sends carries its
  random base IV before the ciphertext; packet k (from 0) uses the base IV with k added
  to its first 4 bytes (big-endian, wrapping). Body = [IV] + ciphertext + 16-byte tag,
  and the header's length field is that whole body's length. The AAD is the 5-byte
  header, except for the first encrypted packet in each direction, whose AAD is
  SHA256(every byte I sent before encryption) || SHA256(every byte I received) ||
  header: it binds the cleartext handshake (policy ads, ECDH keys) to the session.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from execd.errors import LocalProtocolError, RemoteProtocolError

KEY_BYTES = 32
IV_BYTES = 16
TAG_BYTES = 16
HKDF_SALT = b"htcondor"
HKDF_INFO = b"keygen"
_COUNTER_LIMIT = 0xFFFFFFFF


def hkdf_key(secret: bytes, length: int = KEY_BYTES) -> bytes:
    """HTCondor's key derivation: HKDF-SHA256(salt "htcondor", info "keygen")."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=HKDF_SALT,
                info=HKDF_INFO).derive(secret)  # fmt: skip


class EcdhKeyPair:
    """One side's ephemeral P-256 key for one handshake."""

    def __init__(self) -> None:
        self._private = ec.generate_private_key(ec.SECP256R1())

    def public_b64(self) -> str:
        point = self._private.public_key().public_bytes(
            Encoding.X962, PublicFormat.UncompressedPoint
        )
        return base64.b64encode(point).decode("ascii")

    def session_key(self, peer_public_b64: str) -> bytes:
        """The 32-byte AES key both sides derive; RemoteProtocolError for a bad peer key."""
        try:
            point = base64.b64decode(peer_public_b64, validate=True)
            peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        except (binascii.Error, ValueError) as exc:
            raise RemoteProtocolError(f"peer's ECDHPublicKey is not a P-256 point: {exc}") from None
        return hkdf_key(self._private.exchange(ec.ECDH(), peer))


def _iv_for(base: bytes, counter: int) -> bytes:
    (first,) = struct.unpack("!I", base[:4])
    return struct.pack("!I", (first + counter) & 0xFFFFFFFF) + base[4:]


class PacketSealer:
    """Encrypts the packets of one direction of one connection."""

    def __init__(self, key: bytes, base_iv: bytes | None = None) -> None:
        if len(key) != KEY_BYTES:
            raise LocalProtocolError(f"AES-256-GCM key must be {KEY_BYTES} bytes")
        self._aead = AESGCM(key)
        self._base_iv = base_iv if base_iv is not None else os.urandom(IV_BYTES)
        self._counter = 0

    @property
    def position(self) -> tuple[bytes, int]:
        """(base IV, packets sealed): with the key, all it takes to go on sealing."""
        return self._base_iv, self._counter

    @classmethod
    def resumed(cls, key: bytes, base_iv: bytes, counter: int) -> PacketSealer:
        sealer = cls(key, base_iv)
        sealer._counter = counter
        return sealer

    def body_length(self, plain_length: int) -> int:
        return plain_length + TAG_BYTES + (IV_BYTES if self._counter == 0 else 0)

    def seal(self, plain: bytes, aad: bytes) -> bytes:
        if self._counter >= _COUNTER_LIMIT:
            raise LocalProtocolError("AES-GCM packet counter exhausted on this connection")
        iv = _iv_for(self._base_iv, self._counter)
        sealed = self._aead.encrypt(iv, plain, aad)
        prefix = iv if self._counter == 0 else b""
        self._counter += 1
        return prefix + sealed


class PacketOpener:
    """Decrypts and authenticates the packets of one direction of one connection."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise LocalProtocolError(f"AES-256-GCM key must be {KEY_BYTES} bytes")
        self._aead = AESGCM(key)
        self._base_iv: bytes | None = None
        self._counter = 0

    @property
    def position(self) -> tuple[bytes | None, int]:
        """(the peer's base IV once known, packets opened)."""
        return self._base_iv, self._counter

    @classmethod
    def resumed(cls, key: bytes, base_iv: bytes, counter: int) -> PacketOpener:
        opener = cls(key)
        opener._base_iv, opener._counter = base_iv, counter
        return opener

    def open(self, body: bytes, aad: bytes) -> bytes:
        if self._counter >= _COUNTER_LIMIT:
            raise RemoteProtocolError("AES-GCM packet counter exhausted on this connection")
        if self._base_iv is None:
            if len(body) < IV_BYTES + TAG_BYTES:
                raise RemoteProtocolError(
                    f"first encrypted packet has {len(body)} bytes, too short for IV and tag"
                )
            self._base_iv, body = body[:IV_BYTES], body[IV_BYTES:]
        elif len(body) < TAG_BYTES:
            raise RemoteProtocolError(f"encrypted packet has {len(body)} bytes, no room for tag")
        iv = _iv_for(self._base_iv, self._counter)
        try:
            plain = self._aead.decrypt(iv, body, aad)
        except InvalidTag:
            raise RemoteProtocolError(
                f"encrypted packet {self._counter} failed authentication (bad tag)"
            ) from None
        self._counter += 1
        return plain
