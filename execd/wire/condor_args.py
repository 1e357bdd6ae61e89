"""HTCondor's text forms that START_SSHD reads and writes (execd.wire.job_sshd): the V2
argument syntax of its knobs and of condor_ssh_to_job's -keygen-options, and the
base64 condor_base64_encode writes the session's keys in."""

from __future__ import annotations

import base64


def split_args_v2(text: str) -> list[str]:
    """HTCondor's V2 argument syntax (ArgList::AppendArgsV2Raw): blanks separate,
    single quotes group, '' inside them is a quote. ValueError if a quote is open."""
    args: list[str] = []
    current: list[str] | None = None
    i, quoted = 0, False
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "'" and text[i + 1:i + 2] == "'":
                current = (current or []) + ["'"]
                i += 1
            elif char == "'":
                quoted = False
            else:
                assert current is not None
                current.append(char)
        elif char == "'":
            quoted, current = True, current if current is not None else []
        elif char.isspace():
            if current is not None:
                args.append("".join(current))
            current = None
        else:
            current = (current or []) + [char]
        i += 1
    if quoted:
        raise ValueError(f"unterminated quote in {text!r}")
    if current is not None:
        args.append("".join(current))
    return args


def split_quoted_args(text: str) -> list[str]:
    """A knob's arguments as condor_starter reads them (AppendArgsV2Quoted): in double
    quotes, V2 syntax inside."""
    text = text.strip()
    if len(text) < 2 or not text.startswith('"') or not text.endswith('"'):
        raise ValueError(f"expected the arguments in double quotes: {text}")
    return split_args_v2(text[1:-1])


def condor_base64(data: bytes) -> str:
    """condor_base64_encode: OpenSSL's 64-column lines, without the last newline."""
    encoded = base64.b64encode(data).decode("ascii")
    return "\n".join(encoded[i:i + 64] for i in range(0, len(encoded), 64))
