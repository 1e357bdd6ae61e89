"""CEDAR's encoding of values inside a message (HTCondor's stream.cpp, as on the wire).

- Every integer type travels as an 8-byte big-endian signed integer.
- A char is one byte.
- A double is two integers: the frexp() mantissa times 2147483647 truncated to an int,
  then the exponent. Decoding computes ldexp(mantissa / 2147483647, exponent); the round
  trip keeps 31 bits of mantissa, as HTCondor's does.
- A string is its bytes and a NUL. Once the connection is encrypted every string is
  preceded by an integer length (NUL included). A lone 0xAD byte (or a 0xAD first byte
  of an encrypted string: stream.cpp's BIN_NULL_CHAR, "\255" in octal) is HTCondor's NULL
  string, read as "".

Decoder errors are RemoteProtocolError naming the value and offset; the Decoder never
raises anything else on any input (tests/unit/wire/test_wire_fuzz.py).
"""

from __future__ import annotations

import math
import struct

from execd.errors import LocalProtocolError, RemoteProtocolError

FRAC_CONST = 2147483647
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
# HTCondor refuses an encrypted string longer than this (stream.cpp get_string_ptr).
MAX_STRING_BYTES = 10_000_000
NULL_STRING_MARK = 0xAD  # BIN_NULL_CHAR, "\255": octal

_I64 = struct.Struct("!q")


class Encoder:
    """Builds one message payload. `encrypted`: strings carry a length prefix."""

    def __init__(self, *, encrypted: bool = False) -> None:
        self.encrypted = encrypted
        self._buf = bytearray()

    def put_int(self, value: int) -> Encoder:
        if not INT64_MIN <= value <= INT64_MAX:
            raise LocalProtocolError(f"integer {value} does not fit in 8 bytes")
        self._buf += _I64.pack(value)
        return self

    def put_char(self, value: int) -> Encoder:
        if not 0 <= value <= 255:
            raise LocalProtocolError(f"char {value} is not one byte")
        self._buf.append(value)
        return self

    def put_double(self, value: float) -> Encoder:
        if not math.isfinite(value):
            raise LocalProtocolError(f"double {value} cannot be sent (HTCondor has no encoding)")
        mantissa, exponent = math.frexp(value)
        return self.put_int(int(mantissa * FRAC_CONST)).put_int(exponent)

    def put_string(self, value: str | bytes) -> Encoder:
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        if b"\0" in raw:
            raise LocalProtocolError("a CEDAR string cannot contain a NUL byte")
        if self.encrypted:
            self.put_int(len(raw) + 1)
        self._buf += raw + b"\0"
        return self

    def put_null_string(self) -> Encoder:
        """CEDAR's null string (put_nullstr(NULL)): "no value at all", not even ""."""
        if self.encrypted:
            self.put_int(1)
        self._buf.append(NULL_STRING_MARK)
        return self

    def put_bytes(self, value: bytes) -> Encoder:
        self._buf += value
        return self

    def payload(self) -> bytes:
        return bytes(self._buf)

    def __len__(self) -> int:
        return len(self._buf)


class Decoder:
    """Reads values from one message payload; `finish()` checks it was all consumed."""

    def __init__(self, payload: bytes, *, encrypted: bool = False) -> None:
        self.encrypted = encrypted
        self._data = payload
        self._pos = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self._pos

    def _take(self, n: int, what: str) -> bytes:
        if n > self.remaining:
            raise RemoteProtocolError(
                f"message ends inside {what} at offset {self._pos}: "
                f"needs {n} bytes, {self.remaining} left"
            )
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def get_int(self, what: str = "an integer") -> int:
        value: int = _I64.unpack(self._take(8, what))[0]
        return value

    def get_int32(self, what: str = "an integer") -> int:
        """An integer the peer's C++ code holds in an int: out of range is an error."""
        value = self.get_int(what)
        if not INT32_MIN <= value <= INT32_MAX:
            raise RemoteProtocolError(f"{what} {value} does not fit in 32 bits")
        return value

    def get_char(self, what: str = "a char") -> int:
        return self._take(1, what)[0]

    def get_double(self, what: str = "a double") -> float:
        mantissa = self.get_int32(f"mantissa of {what}")
        exponent = self.get_int32(f"exponent of {what}")
        try:
            return math.ldexp(mantissa / FRAC_CONST, exponent)
        except OverflowError:
            raise RemoteProtocolError(
                f"{what} overflows: mantissa {mantissa}, exponent {exponent}"
            ) from None

    def get_raw_string(self, what: str = "a string") -> bytes:
        if self.encrypted:
            length = self.get_int(f"length of {what}")
            if not 1 <= length <= MAX_STRING_BYTES:
                raise RemoteProtocolError(f"{what} has bad length {length}")
            raw = self._take(length, what)
            if raw[0] == NULL_STRING_MARK:
                return b""
            return raw.split(b"\0", 1)[0]
        if self.remaining < 1:
            raise RemoteProtocolError(f"message ends before {what} at offset {self._pos}")
        if self._data[self._pos] == NULL_STRING_MARK:
            self._pos += 1
            return b""
        end = self._data.find(b"\0", self._pos)
        if end < 0:
            raise RemoteProtocolError(f"{what} at offset {self._pos} has no terminating NUL")
        raw = self._data[self._pos : end]
        self._pos = end + 1
        return raw

    def get_string(self, what: str = "a string") -> str:
        return self.get_raw_string(what).decode("utf-8", "surrogateescape")

    def get_bytes(self, n: int, what: str = "bytes") -> bytes:
        if n < 0:
            raise RemoteProtocolError(f"{what} has negative length {n}")
        return self._take(n, what)

    def at_end(self) -> bool:
        return self.remaining == 0

    def finish(self, what: str = "message") -> None:
        """HTCondor's end_of_message on read: untouched bytes are a protocol error."""
        if self.remaining:
            raise RemoteProtocolError(f"{what} has {self.remaining} untouched bytes at its end")
