"""Chirp's request lines as condor_starter reads them (io_proxy_handler.cpp), and its
answer codes (condor_chirp/chirp_protocol.h).

A request is one line of at most LINE_MAX bytes. condor_starter tries its requests in
a fixed order, each a literal prefix followed by words (sscanf_chirp: `%s` is a word in
which a backslash escapes the next character; whitespace in the pattern skips any; words
after the last are ignored), and serves the first that matches among those enabled for
the job. A prefix match, not a word match: with updates enabled,
`get_job_attr_delayed X` is taken for `get_job_attr` of the attribute `_delayed`
(which comes before `get_job_attr_delayed` in that order), as condor_starter 25.14.1
answers it (UNDEFINED, compared in the pool). execd keeps that order and reading.
"""

from __future__ import annotations

import errno as errnos
import re
from dataclasses import dataclass

LINE_MAX = 5120  # CHIRP_LINE_MAX
ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a job attribute's name: fullmatch
NUMBER = re.compile(r"[+-]?[0-9]+")  # a word %d reads whole
CHIRP_VERSION = 2

NOT_AUTHENTICATED = -1
NOT_AUTHORIZED = -2
DOESNT_EXIST = -3
TOO_BIG = -5
NO_MEMORY = -7
INVALID_REQUEST = -8
TRY_AGAIN = -11
OFFLINE = -17
UNKNOWN = -127

# io_proxy_handler's convert(): the shadow's errno as Chirp's error.
_ERRNO_TO_CHIRP = {
    errnos.EPERM: NOT_AUTHORIZED, errnos.EACCES: NOT_AUTHORIZED,
    errnos.ENOENT: DOESNT_EXIST, errnos.EEXIST: -4, errnos.EFBIG: TOO_BIG,
    errnos.ENOSPC: -6, errnos.ENOMEM: -7, errnos.E2BIG: INVALID_REQUEST,
    errnos.EINVAL: INVALID_REQUEST, errnos.EMFILE: -9, errnos.ENFILE: -9,
    errnos.EBUSY: -10, errnos.ETXTBSY: -10, errnos.EAGAIN: TRY_AGAIN,
    errnos.EINTR: TRY_AGAIN, errnos.EBADF: -12, errnos.EISDIR: -13, errnos.ENOTDIR: -14,
    errnos.ENOTEMPTY: -15, errnos.EXDEV: -16, errnos.ETIMEDOUT: OFFLINE,
}  # fmt: skip

UPDATES, DELAYED, FILES = "updates", "delayed", "files"
# The requests execd serves, in condor_starter's order: (prefix, its words, enabled by);
# a word is "s" (%s: any) or "d" (%d: a number, else the next request is tried).
REQUESTS = (
    ("open", "ssd", FILES),
    ("close", "d", FILES),
    ("lseek", "ddd", FILES),
    ("unlink", "s", FILES),
    ("rename", "ss", FILES),
    ("mkdir", "sd", FILES),
    ("rmdir", "s", FILES),
    ("fsync", "d", FILES),
    ("lookup", "s", FILES),
    ("set_job_attr_delayed", "ss", DELAYED),
    ("set_job_attr", "ss", UPDATES),
    ("get_job_attr", "s", UPDATES),
    ("get_job_attr_delayed", "s", DELAYED),
    ("constrain", "s", UPDATES),
    ("read", "dd", FILES),
    ("write", "dd", FILES),
    ("ulog", "s", UPDATES),
    ("pread", "ddd", FILES),
    ("pwrite", "ddd", FILES),
    ("sread", "ddddd", FILES),
    ("swrite", "ddddd", FILES),
    ("rmall", "s", FILES),
    ("fstat", "d", FILES),
    ("fstatfs", "d", FILES),
    ("fchown", "ddd", FILES),
    ("fchmod", "dd", FILES),
    ("ftruncate", "dd", FILES),
    ("getfile", "s", FILES),
    ("putfile", "sdd", FILES),
    ("getlongdir", "s", FILES),
    ("getdir", "s", FILES),
    ("whoami", "d", FILES),
    ("whoareyou", "sd", FILES),
    ("link", "ss", FILES),
    ("symlink", "ss", FILES),
    ("readlink", "sd", FILES),
    ("statfs", "s", FILES),
    ("stat", "s", FILES),
    ("lstat", "s", FILES),
    ("access", "sd", FILES),
    ("chmod", "sd", FILES),
    ("chown", "sdd", FILES),
    ("lchown", "sdd", FILES),
    ("truncate", "sd", FILES),
    ("utime", "sdd", FILES),
)


# C's isspace() in the "C" locale, which sscanf_chirp splits on: no Unicode spaces.
SEPARATORS = frozenset(" \t\n\v\f\r")


def as_sent(text: str) -> bytes:
    """The bytes of a string the shadow sent (a path, a URL, a job attribute's value):
    the wire decodes them with surrogateescape, as they need not be UTF-8, and the job
    is answered them as they came (condor_starter passes them on as they are)."""
    return text.encode("utf-8", "surrogateescape")


def chirp_error(unix_errno: int) -> int:
    return _ERRNO_TO_CHIRP.get(unix_errno, UNKNOWN)


def words(text: str, count: int) -> list[str] | None:
    """The first `count` words of `text`, separated by ASCII whitespace (SEPARATORS), a
    backslash escaping the next character (sscanf_chirp's %s); None if there are fewer."""
    found: list[str] = []
    i, n = 0, len(text)
    while len(found) < count:
        while i < n and text[i] in SEPARATORS:
            i += 1
        if i >= n:
            return None
        word: list[str] = []
        while i < n and text[i] not in SEPARATORS:
            if text[i] == "\\":
                i += 1
                if i >= n:
                    break
            word.append(text[i])
            i += 1
        found.append("".join(word))
    return found


@dataclass(frozen=True)
class Request:
    command: str  # one of REQUESTS' prefixes, or "version"
    args: list[str]


def read_request(text: str, enabled: frozenset[str]) -> Request | None:
    """The request `text` is taken for, with `enabled` (UPDATES, DELAYED, FILES); None: none
    (condor_starter answers INVALID_REQUEST)."""
    for prefix, kinds, needs in REQUESTS:
        if needs in enabled and text.startswith(prefix):
            args = words(text[len(prefix):], len(kinds))
            if args is not None and all(kind == "s" or NUMBER.fullmatch(word)
                                        for kind, word in zip(kinds, args, strict=True)):
                return Request(prefix, args)
    if UPDATES in enabled and text.startswith("version"):  # strncmp(line, "version", 7)
        return Request("version", [])
    return None
