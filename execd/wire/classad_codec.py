"""Old-syntax ClassAds on the wire (HTCondor's classad_oldnew.cpp putClassAd/getClassAd).

An ad is: integer N, N strings "Attr = <expression in old ClassAd syntax>", then two
strings, always "" today (the historical MyType/TargetType slots; MyType and TargetType
travel as ordinary attributes). A private attribute on an unencrypted connection
travels as the marker string "ZKM" followed by its line (as a secret string: encrypted
by itself where the connection has a non-AES key, in clear where it has none, e.g. the
startd's local socket to its starter); on an AES-GCM connection every byte is encrypted
already and it travels as it is.

Private attributes: ClaimId, Capability, ChildClaimIds, ClaimIdList, ClaimIds,
TransferKey (HTCondor's V1 list) and any name starting with "_condor_priv" (V2), all
case-insensitive. A public ad is encoded with `exclude_private=True` (they never leave);
execd refuses to send a private attribute on an unencrypted connection unless the
caller asks for HTCondor's marked form (`mark_secrets`).

The wire form is text: `WireAd` maps names to expression text exactly as sent, so the
codec round-trips bytes; `to_classad`/`from_classad` convert to and from classad2 with
the real library's old-syntax parser and unparser.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from execd._htcondor import classad2
from execd.errors import LocalProtocolError, RemoteProtocolError
from execd.wire.encoding import Decoder, Encoder

SECRET_MARKER = "ZKM"  # noqa: S105 - a marker string, not a password
PRIVATE_V1 = frozenset(
    n.lower() for n in ("Capability", "ChildClaimIds", "ClaimId", "ClaimIdList", "ClaimIds",
                        "TransferKey")
)  # fmt: skip
PRIVATE_V2_PREFIX = "_condor_priv"
# getClassAd refuses more attributes than this (a count is 8 bytes, a peer could say 2^62).
MAX_ATTRS = 1_000_000

WireAd = dict[str, str]


def is_private(name: str) -> bool:
    lowered = name.lower()
    return lowered in PRIVATE_V1 or lowered.startswith(PRIVATE_V2_PREFIX)


def _valid_name(name: str) -> bool:
    if not name or not (name[0].isalpha() or name[0] == "_"):
        return False
    return all(c.isalnum() or c in "_." for c in name) and name.isascii()


def _line_name(name: str) -> bool:
    return bool(name) and name[0] not in " '" and not any(c in name for c in "=\n\r")


def split_line(line: str) -> tuple[str, str]:
    """'Attr = expr' -> (Attr, expr); RemoteProtocolError naming a malformed line."""
    name, sep, expr = line.partition("=")
    name, expr = name.strip(), expr.strip()
    if not sep or not _valid_name(name) or not expr:
        shown = line if len(line) <= 80 else line[:77] + "..."
        raise RemoteProtocolError(f"ClassAd line {shown!r} is not 'Attr = expression'")
    return name, expr


def encode_ad(
    enc: Encoder,
    ad: Mapping[str, str] | Sequence[tuple[str, str]],
    *,
    exclude_private: bool = False,
    mark_secrets: bool = False,
    names_as_read: bool = False,
) -> Encoder:
    """Append one ad (name -> old-syntax expression text) to `enc`.

    On an unencrypted connection a private attribute is refused, unless the caller
    says the connection is one where HTCondor itself sends secrets behind the "ZKM"
    marker in clear (`mark_secrets`: a local socket between startd and starter).
    `names_as_read`: a name may be any text ClassAd::Insert took from a file's
    `name = expr` line (`My Attr`), sent as it is, as HTCondor's putClassAd sends it.
    """
    lines: list[str | None] = []
    for name, expr in ad.items() if isinstance(ad, Mapping) else ad:
        if not (_line_name(name) if names_as_read else _valid_name(name)):
            raise LocalProtocolError(f"bad ClassAd attribute name {name!r}")
        if "\0" in expr:
            raise LocalProtocolError(f"attribute {name} has a NUL byte in its expression")
        if is_private(name):
            if exclude_private:
                continue
            if not enc.encrypted:
                if not mark_secrets:
                    raise LocalProtocolError(
                        f"refusing to send private attribute {name} on an unencrypted connection"
                    )
                lines.append(None)  # the marker
        lines.append(f"{name} = {expr}")
    enc.put_int(sum(1 for line in lines if line is not None))
    for line in lines:
        enc.put_string(SECRET_MARKER if line is None else line)
    return enc.put_string("").put_string("")


def decode_ad_lines(dec: Decoder, what: str = "ClassAd") -> list[tuple[str, str]]:
    """Read one ad as its (name, expression) lines in wire order, duplicates kept.

    HTCondor sends a chained ad (a dynamic slot's over its parent's) as the parent's
    lines then the child's, so a name can come twice; the later one wins.
    """
    count = dec.get_int(f"attribute count of {what}")
    if not 0 <= count <= MAX_ATTRS:
        raise RemoteProtocolError(f"{what} announces {count} attributes")
    lines: list[tuple[str, str]] = []
    for i in range(count):
        line = dec.get_string(f"attribute {i} of {what}")
        if line == SECRET_MARKER:
            line = dec.get_string(f"secret attribute {i} of {what}")
        lines.append(split_line(line))
    dec.get_string(f"MyType slot of {what}")
    dec.get_string(f"TargetType slot of {what}")
    return lines


def decode_ad(dec: Decoder, what: str = "ClassAd") -> WireAd:
    """Read one ad; a later duplicate attribute replaces the earlier (as HTCondor's)."""
    return dict(decode_ad_lines(dec, what))


def public_part(ad: Mapping[str, str]) -> WireAd:
    return {k: v for k, v in ad.items() if not is_private(k)}


# ----- classad2 conversion --------------------------------------------------------------
def unparse_old(value: Any) -> str:
    """A Python value or ExprTree as old-syntax expression text (the real unparser)."""
    text: str = classad2.ClassAd({"X": value}).printOld()
    head = "X = "
    if not text.startswith(head):
        raise LocalProtocolError(f"classad2 printed {text!r} for one attribute")
    return text[len(head) :].rstrip("\n")


def from_classad(ad: Any, names: Iterable[str] | None = None) -> WireAd:
    """A classad2.ClassAd (or the given names of it) as a WireAd."""
    keys = list(ad.keys()) if names is None else list(names)
    return {k: unparse_old(ad.lookup(k)) for k in keys if k in ad}


def from_values(values: Mapping[str, Any]) -> WireAd:
    """Python values (str, int, float, bool, list, ExprTree) as a WireAd."""
    return {k: unparse_old(v) for k, v in values.items()}


def to_classad(ad: Mapping[str, str]) -> Any:
    """A WireAd as a classad2.ClassAd; RemoteProtocolError naming an unparsable attribute."""
    out = classad2.ClassAd()
    for name, expr in ad.items():
        try:
            one = classad2.parseOne(f"{name} = {expr}", parser=classad2.ParserType.Old)
        except (classad2.ClassAdException, ValueError) as exc:
            raise RemoteProtocolError(f"attribute {name} does not parse: {exc}") from None
        if one is None or len(one) != 1:
            raise RemoteProtocolError(f"attribute {name} does not parse: {expr[:80]!r}")
        out[name] = one.lookup(name)
    return out


def long_form(ad: Mapping[str, str]) -> str:
    """The ad as HTCondor's fPrintAd writes it to a file (a job's `.job.ad`): one
    `Name = expression` per line, names in byte order, private attributes left out; a
    line break inside an expression's text is written escaped, so one line stays one."""
    names = sorted(n for n in ad if not is_private(n) and _valid_name(n))
    breaks = str.maketrans({"\n": "\\n", "\r": "\\r"})
    return "".join(f"{n} = {ad[n].translate(breaks)}\n" for n in names)
