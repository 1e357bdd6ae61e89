"""Session crypto: ECDH + HKDF keys, AES-GCM packets, and the handshake digests in the
first AAD, pinned against a real condor_ping (ping.pcap + its security debug log)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from wire_captures import CAPTURES, stream
from wire_pairs import channel_pair

from execd.errors import RemoteProtocolError
from execd.wire.crypto import (
    IV_BYTES,
    TAG_BYTES,
    EcdhKeyPair,
    PacketOpener,
    PacketSealer,
    hkdf_key,
)
from execd.wire.framing import PacketParser, unframe_plain

KEY = bytes(range(32))


def _log_hex(pattern: str) -> bytes:
    text = (CAPTURES / "ping.log").read_text()
    found = re.search(pattern + r"((?: [0-9a-f]{2})+)", text)
    assert found, pattern
    return bytes.fromhex(found.group(1).replace(" ", ""))


def _rfc5869(secret: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    prk = hmac.new(salt, secret, hashlib.sha256).digest()
    okm, block = b"", b""
    for i in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        okm += block
    return okm[:length]


def test_hkdf_uses_htcondors_salt_and_info() -> None:
    assert hkdf_key(b"shared secret") == _rfc5869(b"shared secret", b"htcondor", b"keygen", 32)


def test_ecdh_both_sides_derive_one_key() -> None:
    client, server = EcdhKeyPair(), EcdhKeyPair()
    point = base64.b64decode(client.public_b64())
    assert len(point) == 65 and point[0] == 4  # uncompressed P-256, as "BA8/..." in captures
    assert client.session_key(server.public_b64()) == server.session_key(client.public_b64())


def test_ecdh_accepts_a_real_htcondor_public_key() -> None:
    # The collector's ECDHPublicKey from pyupdate.pcap is a valid point on P-256.
    reply = unframe_plain(stream("pyupdate.pcap", 2673, 5268))[0]
    key = re.search(rb'ECDHPublicKey = "([^"]+)"', reply)
    assert key is not None
    assert len(EcdhKeyPair().session_key(key.group(1).decode())) == 32


@pytest.mark.parametrize("bad", ["not base64!", base64.b64encode(b"\x04" + bytes(64)).decode(), ""])
def test_bad_peer_keys_are_protocol_errors(bad: str) -> None:
    with pytest.raises(RemoteProtocolError, match="ECDHPublicKey"):
        EcdhKeyPair().session_key(bad)


def test_iv_counter_matches_the_real_daemon() -> None:
    # ping.log: the first encrypted packet's IV (sent in the clear as its first 16 bytes)
    # and the IV of the next packet, whose first 4 bytes are the base plus 1.
    first_iv = _log_hex(r"IV used for incoming decrypt:")
    server = stream("ping.pcap", 2673, 22423)
    packets = PacketParser().feed(server)
    encrypted = packets[5]
    assert encrypted.header.hex() == "010000019b"  # length = IV + ciphertext + tag
    assert encrypted.body[:IV_BYTES] == first_iv
    assert encrypted.body[-TAG_BYTES:] == _log_hex(r"Incoming MAC :")
    assert len(packets[6].body) == 64 + TAG_BYTES  # later packets: no IV
    sealer = PacketSealer(KEY, base_iv=first_iv)
    opener = PacketOpener(KEY)
    one = sealer.seal(b"a", b"aad0")
    two = sealer.seal(b"b", b"aad1")
    assert one[:IV_BYTES] == first_iv and len(one) == IV_BYTES + 1 + TAG_BYTES
    assert len(two) == 1 + TAG_BYTES
    assert opener.open(one, b"aad0") == b"a" and opener.open(two, b"aad1") == b"b"
    # The second packet was sealed with IV 84 bc de 5d ... (ping.log's second IV).
    second_iv = bytes.fromhex("84bcde5d") + first_iv[4:]
    assert AESGCM(KEY).decrypt(second_iv, two, b"aad1") == b"b"


def test_iv_counter_wraps_its_first_four_bytes() -> None:
    base = b"\xff\xff\xff\xff" + bytes(12)
    sealer = PacketSealer(KEY, base_iv=base)
    sealer.seal(b"x", b"")
    assert AESGCM(KEY).decrypt(bytes(4) + bytes(12), sealer.seal(b"y", b""), b"") == b"y"


def test_tampered_packet_or_aad_fails_authentication() -> None:
    sealed = PacketSealer(KEY).seal(b"payload", b"hdr")
    with pytest.raises(RemoteProtocolError, match="bad tag"):
        PacketOpener(KEY).open(sealed, b"HDR")
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(RemoteProtocolError, match="bad tag"):
        PacketOpener(KEY).open(flipped, b"hdr")
    with pytest.raises(RemoteProtocolError, match="too short"):
        PacketOpener(KEY).open(b"short", b"hdr")


@pytest.mark.asyncio
async def test_handshake_digests_equal_the_real_clients() -> None:
    # Replay condor_ping's cleartext handshake through a Channel: after the shared-port
    # request (not part of the digest), the client sent 3 messages and received 5; the
    # AAD it then expected (ping.log) is SHA256(received) || SHA256(sent) || header.
    client_msgs = unframe_plain(stream("ping.pcap", 22423, 2673))
    server_bytes = stream("ping.pcap", 2673, 22423)
    server_plain = server_bytes[: sum(5 + n for n in (463, 8, 32, 8, 8))]
    ours, peer = await channel_pair()
    try:
        await ours.send(client_msgs[0])
        ours.reset_digests()
        for message in client_msgs[1:4]:
            await ours.send(message)
        peer.writer.write(server_plain)
        for _ in range(5):
            await ours.recv()
        ours.enable_crypto(KEY)
        assert ours.handshake_digests is not None
        sent, received = ours.handshake_digests
        expected = _log_hex(r"Expecting AAD with handshake digest")
        assert received + sent + b"\x01\x00\x00\x01\x9b" == expected
    finally:
        await ours.close()
        await peer.close()


@pytest.mark.asyncio
async def test_encrypted_channels_talk_both_ways() -> None:
    a, b = await channel_pair()
    try:
        await a.send(b"hello")
        assert await b.recv() == b"hello"
        a.enable_crypto(KEY)
        b.enable_crypto(KEY)
        big = bytes(range(256)) * 40  # 10240 bytes: three packets
        await a.send(big)
        await b.send(b"reply")
        assert await b.recv() == big
        assert await a.recv() == b"reply"
        await a.send(b"again")
        assert await b.recv() == b"again"
    finally:
        await a.close()
        await b.close()


@pytest.mark.asyncio
async def test_differing_handshake_views_fail_the_first_packet() -> None:
    # A man in the middle who changed a cleartext byte makes the two digests differ.
    a, b = await channel_pair()
    try:
        await a.send(b"policy")
        assert await b.recv() == b"policy"
        a.reset_digests()  # a's view of the handshake now differs from b's
        a.enable_crypto(KEY)
        b.enable_crypto(KEY)
        await a.send(b"secret")
        with pytest.raises(RemoteProtocolError, match="bad tag"):
            await b.recv()
    finally:
        await a.close()
        await b.close()


def test_no_plaintext_in_sealed_packets() -> None:
    assert b"s3cret-claim" not in PacketSealer(KEY).seal(b"s3cret-claim", b"")


@pytest.mark.asyncio
async def test_a_direction_with_nothing_sent_contributes_zero_bytes() -> None:
    # A schedd resuming a claim session without asking for an answer has received
    # nothing: HTCondor puts 32 zero bytes in the AAD for that direction, not SHA256("").
    a, b = await channel_pair()
    try:
        await a.send(b"resume request")
        assert await b.recv() == b"resume request"
        a.enable_crypto(KEY)
        b.enable_crypto(KEY)
        assert a.handshake_digests is not None and a.handshake_digests[1] == bytes(32)
        assert b.handshake_digests is not None and b.handshake_digests[0] == bytes(32)
        await a.send(b"REQUEST_CLAIM payload")
        assert await b.recv() == b"REQUEST_CLAIM payload"
    finally:
        await a.close()
        await b.close()
