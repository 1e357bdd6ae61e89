"""File transfer command 4: the shadow delegates the job's X509 proxy. The sender here
follows HTCondor's x509_send_delegation with `cryptography`: it reads one message (a
length and a DER certificate request), signs a proxy certificate for the requested key
with the submitted credential's key, and answers one message: a length and, in DER, the
proxy, then the submitting certificate (a length of 0 when it fails). execd writes the
proxy file: the proxy, its new key (PKCS#8), the chain; 0600. A bad answer holds the job
(code 12) and the transfer goes on to its end."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from x509_sender import Answer, Credential, Shadow, enc

from execd.wire.classad_codec import decode_ad, encode_ad, to_classad
from execd.wire.encoding import Decoder
from execd.wire.filetransfer import HOLD_DOWNLOAD_FILE_ERROR, TransferResult, download_sandbox
from execd.wire.shadow_job import job_env


def upload(answer: bytes | Answer, name: str = "proxy.pem") -> Shadow:
    """Header, command 4 and the name, GoAhead both ways, the request and the answer,
    then a plain file (after.txt: the transfer went on), finished, both acks."""
    header = encode_ad(enc().put_int(0), {"SandboxSize": "1"}).payload()
    go = encode_ad(enc(), {"Result": "2"}).payload()
    ack = encode_ad(enc(), {"Result": "0"}).payload()

    def recv_int(value: int) -> tuple[str, bytes]:
        return ("recv", enc().put_int(value).payload())

    return Shadow([("recv", header), recv_int(4), ("recv", enc().put_string(name).payload()),
                   recv_int(300), ("send", b""), ("send", b""), ("recv", go),
                   ("send", b""), ("recv", answer),
                   recv_int(1), ("recv", enc().put_string("after.txt").payload()),
                   recv_int(0o644), ("recv", enc().put_int(1).put_int(262144).payload()),
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
    return enc().put_int(len(blob)).put_bytes(blob).payload()


def _for_another_key(request_message: bytes) -> bytes:
    submitted = Credential()
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    del request_message
    return _message(submitted.proxy_for(other).public_bytes(serialization.Encoding.DER))


RSA_ENCRYPTION = bytes.fromhex("06092a864886f70d010101")  # OID 1.2.840.113549.1.1.1


def _unknown_key_algorithm(request_message: bytes) -> bytes:
    """Our proxy, its key's algorithm renamed 1.2.840.113549.1.1.99 (no such thing)."""
    blob = Decoder(Credential().answer(request_message), encrypted=True)
    der = blob.get_bytes(blob.get_int())
    assert der.count(RSA_ENCRYPTION) == 2  # the proxy's key and the submitted one's
    return _message(der.replace(RSA_ENCRYPTION, RSA_ENCRYPTION[:-1] + b"\x63", 1))


@pytest.mark.parametrize(("answer", "why"), [
    (_message(b""), "the sender failed to delegate the proxy (empty answer)"),
    (_message(b"\x30\x82\x01"), "bad DER length at byte 0 of the answer"),
    (_message(b"\x30\x03abc"), "the answer is not DER certificates"),
    (enc().put_int(10).put_bytes(b"short").payload(), "message ends inside delegated proxy"),
    (_for_another_key, "the delegated certificate is not for the key we sent"),
    (_unknown_key_algorithm, "the delegated certificate's key is unreadable"),
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
