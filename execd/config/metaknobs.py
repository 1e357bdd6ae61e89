"""Metaknob templates (`use CATEGORY : NAME(args)`) and their argument substitution."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from execd.config.macros import find_close
from execd.errors import ConfigError

TEMPLATE_FILE = Path(__file__).parent / "templates" / "metaknobs.conf"


@cache
def templates() -> dict[tuple[str, str], str]:
    """(CATEGORY, NAME) upper-case -> template body text."""
    found: dict[tuple[str, str], str] = {}
    key: tuple[str, str] | None = None
    body: list[str] = []
    for line in TEMPLATE_FILE.read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("[") and line.rstrip().endswith("]"):
            if key is not None:
                found[key] = "\n".join(body)
            category, _, name = line.strip()[1:-1].partition(":")
            key = (category.upper(), name.upper())
            body = []
        elif key is not None and line.strip():
            body.append(line)
    if key is not None:
        found[key] = "\n".join(body)
    return found


def template_body(category: str, name: str) -> str:
    body = templates().get((category.upper(), name.upper()))
    if body is None:
        known = sorted(n for c, n in templates() if c == category.upper())
        if not known:
            raise ConfigError(
                f"unknown metaknob category {category!r} in 'use {category} : {name}'"
            )
        raise ConfigError(
            f"unknown template {name!r} in 'use {category} : {name}' "
            f"(known {category.upper()} templates: {', '.join(known)})"
        )
    return body


def split_uses(text: str) -> list[tuple[str, str]]:
    """'A(x, y), B' -> [('A', 'x, y'), ('B', '')]: commas inside parentheses don't split."""
    items: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " \t,":
            i += 1
        if i >= len(text):
            break
        j = i
        while j < len(text) and text[j] not in "(,":
            j += 1
        name = text[i:j].strip()
        args = ""
        if j < len(text) and text[j] == "(":
            close = find_close(text, j + 1)
            if close < 0:
                raise ConfigError(f"unbalanced parentheses in template arguments: {text!r}")
            args = text[j + 1 : close]
            j = close + 1
        if not name or not name.replace("_", "").isalnum():
            raise ConfigError(f"bad template name {name!r} in {text!r}")
        items.append((name, args))
        i = j
    return items


def substitute_args(body: str, args: str) -> str:
    """Replace $(0), $(N), $(N?), $(N+), $(0#) and their :default forms with ``args``."""
    out: list[str] = []
    i = 0
    while True:
        j = body.find("$(", i)
        while j >= 0 and not (j + 2 < len(body) and body[j + 2].isdigit()):
            j = body.find("$(", j + 2)
        if j < 0:
            out.append(body[i:])
            return "".join(out)
        close = find_close(body, j + 2)
        if close < 0:
            raise ConfigError(f"unterminated template argument in {body[j:j + 30]!r}")
        out.append(body[i:j])
        out.append(_one_arg(body[j + 2 : close], args))
        i = close + 1


def _one_arg(spec: str, args: str) -> str:
    index = int(spec[0])
    rest = spec[1:]
    modifier = rest[:1] if rest[:1] in ("?", "+", "#") else ""
    rest = rest[len(modifier) :]
    default: str | None = None
    if rest.startswith(":"):
        default = substitute_args(rest[1:], args)
    elif rest:
        # not a template argument after all (e.g. "$(1abc)"): keep it for macro expansion
        return f"$({spec})"
    pieces = args.split(",") if args.strip() else []
    if index == 0 and modifier == "#":
        value = str(len(pieces))
    elif index == 0 or (modifier == "+" and index == 1):
        value = args.strip()
    elif modifier == "+":
        value = ",".join(pieces[index - 1 :]).strip() if len(pieces) >= index else ""
    else:
        value = pieces[index - 1].strip() if len(pieces) >= index else ""
    if modifier == "?":
        return "1" if value else "0"
    if not value and default is not None:
        return default.strip()
    return value
