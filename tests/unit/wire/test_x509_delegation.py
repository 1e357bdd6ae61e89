"""File transfer command 4: the shadow delegates the job's X509 proxy. The sender here
follows HTCondor's x509_send_delegation with `cryptography`: it reads one message (a
length and a DER certificate request), signs a proxy certificate for the requested key
with the submitted credential's key, and answers one message: a length and, in DER, the
proxy, then the submitting certificate (a length of 0 when it fails). execd writes the
proxy file: the proxy, its new key (PKCS#8), the chain; 0600. A bad answer holds the job
(code 12) and the transfer goes on to its end."""

from __future__ import annotations

import asyncio
import datetime
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from execd.wire.classad_codec import decode_ad, encode_ad, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.filetransfer import HOLD_DOWNLOAD_FILE_ERROR, TransferResult, download_sandbox
from execd.wire.proxy_refresh import replace_proxy
from execd.wire.shadow_job import job_env

PROXY_CERT_INFO = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.14")  # RFC 3820
INHERIT_ALL = bytes.fromhex("300c300a06082b06010505071501")  # proxyPolicy: id-ppl-inheritAll
Answer = Callable[[bytes], bytes]


def _enc() -> Encoder:
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
        return _enc().put_int(len(blob)).put_bytes(blob).payload()


class Shadow:
    """The uploading shadow, scripted; a "recv" step may answer our last message."""

    def __init__(self, script: list[tuple[str, bytes | Answer]]) -> None:
        self.script = list(script)
        self.sent: list[bytes] = []

    async def send(self, payload: bytes) -> None:
        kind, _ = self.script.pop(0)
        assert kind == "send", f"sent {payload[:40]!r} where the shadow sends"
        self.sent.append(payload)

    async def recv(self, timeout_s: float | None = None) -> bytes:
        kind, payload = self.script.pop(0)
        assert kind == "recv", "waited where the shadow waits"
        return payload(self.sent[-1]) if callable(payload) else payload

    def encoder(self) -> Encoder:
        return _enc()

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload, encrypted=True)


def upload(answer: bytes | Answer, name: str = "proxy.pem") -> Shadow:
    """Header, command 4 and the name, GoAhead both ways, the request and the answer,
    then a plain file (after.txt: the transfer went on), finished, both acks."""
    header = encode_ad(_enc().put_int(0), {"SandboxSize": "1"}).payload()
    go = encode_ad(_enc(), {"Result": "2"}).payload()
    ack = encode_ad(_enc(), {"Result": "0"}).payload()

    def recv_int(value: int) -> tuple[str, bytes]:
        return ("recv", _enc().put_int(value).payload())

    return Shadow([("recv", header), recv_int(4), ("recv", _enc().put_string(name).payload()),
                   recv_int(300), ("send", b""), ("send", b""), ("recv", go),
                   ("send", b""), ("recv", answer),
                   recv_int(1), ("recv", _enc().put_string("after.txt").payload()),
                   recv_int(0o644), ("recv", _enc().put_int(1).put_int(262144).payload()),
                   ("recv", b"A"), recv_int(0), ("recv", ack), ("send", b"")])  # fmt: skip


def download(shadow: Shadow, sandbox: Path) -> tuple[TransferResult, dict[str, object]]:
    result = asyncio.run(download_sandbox(shadow, sandbox))
    assert not shadow.script  # the conversation ran to its end
    dec = Decoder(shadow.sent[-1], encrypted=True)
    return result, {k: v for k, v in to_classad(decode_ad(dec, "ack")).items()}


def test_a_delegated_proxy_is_written_for_a_key_made_here(tmp_path: Path) -> None:
    submitted = Credential()
    result, ack = download(upload(submitted.answer), tmp_path)
    assert result.ok and ack["Result"] == 0
    assert result.files == ["after.txt"]  # not a CEDAR file, as HTCondor counts them
    proxy = tmp_path / "proxy.pem"
    assert stat.S_IMODE(proxy.stat().st_mode) == 0o600
    text = proxy.read_bytes()
    certs = x509.load_pem_x509_certificates(text)
    key = serialization.load_pem_private_key(text, password=None)
    assert certs[1:] == [submitted.cert]
    certs[0].verify_directly_issued_by(submitted.cert)
    assert certs[0].public_key() == key.public_key()
    # the order x509_receive_delegation_finish writes: proxy, PKCS#8 key, chain
    blocks = [line for line in text.decode().splitlines() if line.startswith("-----BEGIN")]
    assert blocks == ["-----BEGIN CERTIFICATE-----", "-----BEGIN PRIVATE KEY-----",
                      "-----BEGIN CERTIFICATE-----"]  # fmt: skip
    assert (tmp_path / "after.txt").read_bytes() == b"A"


def _message(blob: bytes) -> bytes:
    return _enc().put_int(len(blob)).put_bytes(blob).payload()


def _for_another_key(request_message: bytes) -> bytes:
    submitted = Credential()
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    del request_message
    return _message(submitted.proxy_for(other).public_bytes(serialization.Encoding.DER))


@pytest.mark.parametrize(("answer", "why"), [
    (_message(b""), "the sender failed to delegate the proxy (empty answer)"),
    (_message(b"\x30\x82\x01"), "bad DER length at byte 0 of the answer"),
    (_message(b"\x30\x03abc"), "the answer is not DER certificates"),
    (_enc().put_int(10).put_bytes(b"short").payload(), "message ends inside delegated proxy"),
    (_for_another_key, "the delegated certificate is not for the key we sent"),
])  # fmt: skip
def test_a_bad_delegation_holds_the_job_and_the_transfer_ends(tmp_path: Path,
                                                              answer: bytes | Answer,
                                                              why: str) -> None:  # fmt: skip
    result, ack = download(upload(answer), tmp_path)
    assert (result.hold_code, result.hold_subcode) == (HOLD_DOWNLOAD_FILE_ERROR, 0)
    assert result.hold_reason.startswith("receiving file proxy.pem: X509 proxy delegation "
                                         f"failed: {why}"), result.hold_reason  # fmt: skip
    assert ack["Result"] == -1 and ack["HoldReasonCode"] == HOLD_DOWNLOAD_FILE_ERROR
    assert not (tmp_path / "proxy.pem").exists()
    assert (tmp_path / "after.txt").read_bytes() == b"A"


def test_a_proxy_outside_the_sandbox_is_consumed_not_written(tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    result, _ = download(upload(Credential().answer, "../proxy.pem"), sandbox)
    assert result.hold_code == HOLD_DOWNLOAD_FILE_ERROR
    assert "illegal sandbox path" in result.hold_reason
    assert os.listdir(tmp_path) == ["sandbox"]


def test_a_link_in_place_of_the_proxy_is_not_followed(tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "proxy.pem").symlink_to(tmp_path / "elsewhere")
    result, _ = download(upload(Credential().answer), sandbox)
    assert result.hold_code == HOLD_DOWNLOAD_FILE_ERROR and result.hold_subcode == 17  # EEXIST
    assert not (tmp_path / "elsewhere").exists()


def test_the_job_sees_its_proxy_as_condor_starter_sets_it() -> None:
    # build_job_env: with file transfer the base name in the sandbox, over the job's own
    # X509_USER_PROXY; without, the job ad's path under the Iwd
    job: dict[str, object] = {"x509userproxy": "/home/u/job1/proxy.pem", "Iwd": "/home/u/job1",
                              "Environment": "X509_USER_PROXY=/elsewhere A=1"}  # fmt: skip
    assert job_env(job, Path("/ex/dir_1"))["X509_USER_PROXY"] == "/ex/dir_1/proxy.pem"
    assert job_env(job, Path("/ex/dir_1"), transfer=False)["X509_USER_PROXY"] == \
        "/home/u/job1/proxy.pem"
    relative: dict[str, object] = {"X509UserProxy": "p.pem", "Iwd": "/iwd"}
    assert job_env(relative, Path("/s"), transfer=False)["X509_USER_PROXY"] == "/iwd/p.pem"
    assert "X509_USER_PROXY" not in job_env({"Iwd": "/iwd"}, Path("/s"))


def test_a_refreshed_proxy_replaces_the_old_one_through_no_link(tmp_path: Path) -> None:
    # DELEGATE_GSI_CRED_STARTER: written to <name>.tmp, then renamed over the proxy; a
    # link the job left at the .tmp name is replaced, not followed
    (tmp_path / "proxy.pem").write_bytes(b"old")
    (tmp_path / "proxy.pem.tmp").symlink_to(tmp_path / "elsewhere")
    replace_proxy(str(tmp_path), "proxy.pem", b"new", os.getuid())
    assert (tmp_path / "proxy.pem").read_bytes() == b"new"
    assert stat.S_IMODE((tmp_path / "proxy.pem").stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["proxy.pem"]
