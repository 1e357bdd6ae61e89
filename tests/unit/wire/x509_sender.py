"""The shadow's side of X509 proxy delegation, scripted for unit tests: the submitted
credential that signs a proxy for the receiver's request (x509_send_delegation's
answer) and a channel that plays a script of messages."""

from __future__ import annotations

import datetime
from collections.abc import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from execd.wire.encoding import Decoder, Encoder

PROXY_CERT_INFO = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14")  # RFC 3820
INHERIT_ALL = bytes.fromhex("300c300a06082b06010505071501")  # proxyPolicy: id-ppl-inheritAll
Answer = Callable[[bytes], bytes]


def enc() -> Encoder:
    return Encoder(encrypted=True)


class Credential:
    """The submitted credential: a self-signed certificate and its key."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "execd unit test")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = x509.CertificateBuilder().subject_name(name).issuer_name(name) \
            .public_key(self.key.public_key()).serial_number(1).not_valid_before(now) \
            .not_valid_after(now + datetime.timedelta(days=2)) \
            .sign(self.key, hashes.SHA256())  # fmt: skip

    def proxy_for(self, public_key: rsa.RSAPublicKey) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([*self.cert.subject,
                             x509.NameAttribute(NameOID.COMMON_NAME, "12345")])  # fmt: skip
        return x509.CertificateBuilder().subject_name(subject) \
            .issuer_name(self.cert.subject).public_key(public_key).serial_number(12345) \
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=24)) \
            .add_extension(x509.UnrecognizedExtension(PROXY_CERT_INFO, INHERIT_ALL), True) \
            .sign(self.key, hashes.SHA256())  # fmt: skip

    def answer(self, request_message: bytes) -> bytes:
        """x509_send_delegation's answer to the receiver's request message."""
        dec = Decoder(request_message, encrypted=True)
        der = dec.get_bytes(dec.get_int())
        dec.finish()
        request = x509.load_der_x509_csr(der)
        assert request.is_signature_valid and request.subject == x509.Name([])
        public_key = request.public_key()
        assert isinstance(public_key, rsa.RSAPublicKey) and public_key.key_size == 2048
        blob = b"".join(c.public_bytes(serialization.Encoding.DER)
                        for c in (self.proxy_for(public_key), self.cert))  # fmt: skip
        return enc().put_int(len(blob)).put_bytes(blob).payload()


class Shadow:
    """The uploading shadow, scripted; a "recv" step may answer our last message."""

    def __init__(self, script: list[tuple[str, bytes | Answer]]) -> None:
        self.script = list(script)
        self.sent: list[bytes] = []

    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None:
        kind, _ = self.script.pop(0)
        assert kind == "send", f"sent {payload[:40]!r} where the shadow sends"
        self.sent.append(payload)

    async def recv(self, timeout_s: float | None = None) -> bytes:
        kind, payload = self.script.pop(0)
        assert kind == "recv", "waited where the shadow waits"
        return payload(self.sent[-1]) if callable(payload) else payload

    def encoder(self) -> Encoder:
        return enc()

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload, encrypted=True)
