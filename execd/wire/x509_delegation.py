"""X509 proxy delegation, the receiving side (file transfer command 4, DelegateX509).

With DELEGATE_JOB_GSI_CREDENTIALS (true by default) the shadow does not copy the job's
x509userproxy: it signs a new proxy for a key that only the execute side holds
(ReliSock::get_x509_delegation, x509_receive_delegation and X509Credential in
condor_utils). After the file's name (and the GoAhead, as for any first file), with no
mode or size:

- the receiver makes a new RSA key (2048 bits) and sends one message: an 8-byte length
  and a DER certificate request (version 1, empty subject, signed with SHA-256);
- the sender answers with one message: an 8-byte length and, back to back in DER, the
  new proxy certificate, the certificate that signed it and that one's chain; a length
  of 0 says the sender failed. Its lifetime (DELEGATE_JOB_GSI_CREDENTIALS_LIFETIME) is
  the sender's to set: the request carries none.

The receiver writes the proxy file as HTCondor does: the new certificate, its key
(unencrypted PKCS#8, "PRIVATE KEY"), then the chain, all PEM, created 0600 and never
through a link. The conversation stays at a message boundary whatever the answer was,
so a bad answer fails this file only (DelegationError) and the transfer goes on.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from execd.errors import RemoteProtocolError
from execd.wire.shadow_syscalls import MessageChannel

CMD_X509 = 4  # TransferCommand::XferX509
RSA_BITS = 2048  # X509Credential::GenerateKey
_SEQUENCE = 0x30


class DelegationError(RemoteProtocolError):
    """The sender's answer to our certificate request is not a proxy for our key."""


def proxy_request() -> tuple[rsa.RSAPrivateKey, bytes]:
    """A new key and the DER certificate request for it (CPU-bound: ~0.1 s)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    request = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])) \
        .sign(key, hashes.SHA256())  # fmt: skip
    return key, request.public_bytes(serialization.Encoding.DER)


def split_der(blob: bytes) -> list[bytes]:
    """Certificates sent back to back in DER, each one ASN.1 SEQUENCE."""
    items = []
    pos = 0
    while pos < len(blob):
        if blob[pos] != _SEQUENCE or pos + 2 > len(blob):
            raise DelegationError(f"no DER certificate at byte {pos} of the answer")
        first = blob[pos + 1]
        head = 2
        length = first
        if first & 0x80:
            count = first & 0x7F
            if not 1 <= count <= 4 or pos + 2 + count > len(blob):
                raise DelegationError(f"bad DER length at byte {pos} of the answer")
            length = int.from_bytes(blob[pos + 2:pos + 2 + count], "big")
            head += count
        end = pos + head + length
        if end > len(blob):
            raise DelegationError(f"DER certificate at byte {pos} runs past the answer's end")
        items.append(blob[pos:end])
        pos = end
    return items


def proxy_file_text(key: rsa.RSAPrivateKey, answer: bytes) -> bytes:
    """The proxy file for `answer` (the sender's DER certificates) and our `key`."""
    try:
        certs = [x509.load_der_x509_certificate(der) for der in split_der(answer)]
    except ValueError as exc:
        raise DelegationError(f"the answer is not DER certificates: {exc}") from None
    if not certs:
        raise DelegationError("the answer holds no certificate")
    ours = key.public_key().public_numbers()
    try:
        theirs = certs[0].public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:  # e.g. an unknown key algorithm
        raise DelegationError(f"the delegated certificate's key is unreadable: {exc}") \
            from None  # fmt: skip
    if not isinstance(theirs, rsa.RSAPublicKey) or theirs.public_numbers() != ours:
        raise DelegationError("the delegated certificate is not for the key we sent")
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    return certs[0].public_bytes(pem) + key_pem + b"".join(c.public_bytes(pem)
                                                           for c in certs[1:])  # fmt: skip


async def receive_proxy(ch: MessageChannel) -> bytes:
    """Request a proxy from the sender; its file's contents (secret: never log them).
    DelegationError: the sender failed or answered something that is not our proxy."""
    key, request = await asyncio.to_thread(proxy_request)
    await ch.send(ch.encoder().put_int(len(request)).put_bytes(request).payload())
    dec = ch.decoder(await ch.recv())
    try:
        size = dec.get_int("delegated proxy length")
        answer = dec.get_bytes(size, "delegated proxy") if size > 0 else b""
        dec.finish("delegated proxy message")
    except RemoteProtocolError as exc:  # still one whole message: the stream is in step
        raise DelegationError(str(exc)) from None
    if not answer:
        raise DelegationError("the sender failed to delegate the proxy (empty answer)")
    return await asyncio.to_thread(proxy_file_text, key, answer)


def write_proxy(target: Path, text: bytes, owner: tuple[int, int] | None = None) -> None:
    """Create the proxy file, 0600, as x509_receive_delegation_finish (O_EXCL), and
    never through a link the sandbox might hold; given `owner`, it is that user's
    (the job's: its plugins read it as X509_USER_PROXY)."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
