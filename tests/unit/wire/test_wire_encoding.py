"""CEDAR value encoding pinned against messages real HTCondor daemons sent."""

from __future__ import annotations

import math

import pytest
from wire_captures import stream

from execd.errors import LocalProtocolError, RemoteProtocolError
from execd.wire.encoding import Decoder, Encoder
from execd.wire.framing import unframe_plain


def _messages(sport: int, dport: int, name: str = "pyupdate.pcap") -> list[bytes]:
    return unframe_plain(stream(name, sport, dport))


def test_shared_port_request_is_ints_and_strings() -> None:
    request = _messages(5268, 2673)[0]
    dec = Decoder(request)
    assert dec.get_int() == 75  # SHARED_PORT_CONNECT
    assert dec.get_string() == "collector"
    assert dec.get_string() == "pyprobe"
    assert dec.get_int() == 20  # deadline, seconds
    assert dec.get_int() == 0  # no more arguments
    dec.finish()
    rebuilt = Encoder().put_int(75).put_string("collector").put_string("pyprobe")
    assert rebuilt.put_int(20).put_int(0).payload() == request


def test_negative_ints_are_eight_byte_twos_complement() -> None:
    # job1.pcap: the schedd's shared-port request to the startd carries deadline -1.
    request = _messages(6615, 2673, "job1.pcap")[0]
    dec = Decoder(request)
    assert (dec.get_int(), dec.get_string(), dec.get_string()) == (75, "schedd_32201_ba75",
                                                                   "SUBMIT")  # fmt: skip
    assert dec.get_int() == -1
    assert Encoder().put_int(-1).payload() == b"\xff" * 8


def test_fs_exchange_messages() -> None:
    client = _messages(5268, 2673)
    server = _messages(2673, 5268)
    assert Decoder(client[2]).get_int() == 4  # method mask: FS
    assert Decoder(server[1]).get_int() == 4  # server picks FS
    dec = Decoder(server[2])
    assert dec.get_string() == "/tmp/FS_127.0.0.1_2673_XXXRRFcbX_"
    dec.finish()
    reply = Decoder(client[3])
    assert (reply.get_int(), reply.get_string()) == (0, "127.0.0.1:2673")
    assert Encoder().put_int(0).put_string("127.0.0.1:2673").payload() == client[3]
    assert [Decoder(m).get_int() for m in server[3:5]] == [0, 0]  # FS ok; no wrapped key


def test_double_is_frexp_mantissa_and_exponent() -> None:
    # 1.5 = 0.75 * 2^1; 0.75 * 2147483647 truncated = 0x5FFFFFFF.
    assert Encoder().put_double(1.5).payload().hex() == "000000005fffffff" + "0000000000000001"
    assert Encoder().put_double(0.0).payload() == bytes(16)
    # -0.1 = -0.8 * 2^-3; -0.8 * 2147483647 = -1717986917.6, truncated toward zero as C's
    # (int) cast does (not floored).
    neg = Encoder().put_double(-0.1).payload()
    assert neg[:8] == (-1717986917).to_bytes(8, "big", signed=True)
    assert neg[8:] == (-3).to_bytes(8, "big", signed=True)
    for value in (1.5, -0.1, 3.0e300, 5e-324, 123456.789):
        back = Decoder(Encoder().put_double(value).payload()).get_double()
        assert math.isclose(back, value, rel_tol=2**-30), value


def test_encrypted_strings_carry_their_length() -> None:
    enc = Encoder(encrypted=True).put_string("abc")
    assert enc.payload() == (4).to_bytes(8, "big") + b"abc\0"
    assert Decoder(enc.payload(), encrypted=True).get_string() == "abc"


def test_null_string_marker_reads_as_empty() -> None:
    """stream.cpp's BIN_NULL_CHAR is "\\255": octal, the byte 0xAD (not 0xFF)."""
    dec = Decoder(b"\xad" + b"next\0")
    assert dec.get_string() == ""
    assert dec.get_string() == "next"
    assert Decoder((1).to_bytes(8, "big") + b"\xad", encrypted=True).get_string() == ""


def test_null_string_is_written_as_htcondor_writes_it() -> None:
    assert Encoder().put_null_string().put_string("x").payload() == b"\xadx\0"
    assert Encoder(encrypted=True).put_null_string().payload() == \
        (1).to_bytes(8, "big") + b"\xad"


def test_non_utf8_bytes_round_trip() -> None:
    raw = b"caf\xe9"
    text = Decoder(raw + b"\0").get_string()
    assert Encoder().put_string(text).payload() == raw + b"\0"


@pytest.mark.parametrize(
    ("payload", "encrypted", "read", "problem"),
    [
        (b"\0\0\0", False, "int", "needs 8 bytes, 3 left"),
        (b"abc", False, "string", "no terminating NUL"),
        (b"", False, "string", "ends before"),
        ((0).to_bytes(8, "big"), True, "string", "bad length 0"),
        ((20_000_000).to_bytes(8, "big"), True, "string", "bad length 20000000"),
        ((10).to_bytes(8, "big") + b"ab", True, "string", "needs 10 bytes, 2 left"),
        ((1 << 40).to_bytes(8, "big") + bytes(8), False, "double", "does not fit in 32 bits"),
        ((1).to_bytes(8, "big") + (5000).to_bytes(8, "big"), False, "double", "overflows"),
    ],
)
def test_bad_values_name_the_problem(payload: bytes, encrypted: bool, read: str,
                                     problem: str) -> None:  # fmt: skip
    dec = Decoder(payload, encrypted=encrypted)
    with pytest.raises(RemoteProtocolError, match=problem):
        getattr(dec, f"get_{read}")()


def test_untouched_bytes_are_an_error() -> None:
    dec = Decoder(bytes(9))
    dec.get_int()
    with pytest.raises(RemoteProtocolError, match="1 untouched bytes"):
        dec.finish("reply")


def test_values_we_cannot_send_are_our_bug() -> None:
    with pytest.raises(LocalProtocolError, match="8 bytes"):
        Encoder().put_int(1 << 63)
    with pytest.raises(LocalProtocolError, match="NUL"):
        Encoder().put_string("a\0b")
    with pytest.raises(LocalProtocolError, match="no encoding"):
        Encoder().put_double(math.inf)
