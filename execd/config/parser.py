"""Reading HTCondor config files into a ConfigTable.

Handles `NAME = value`, comments, backslash continuation, `NAME @=tag ... @tag`
multi-line values, `include [ifexist] : path`, `if/elif/else/endif`, `use CATEGORY :
TEMPLATE(args)`, `error :`/`warning :` lines, and self-references (`X = $(X) more`),
which are expanded when read, as HTCondor does. Every problem is a ConfigError carrying
file and line; nothing here ever exits the process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from execd.config import metaknobs
from execd.config.macros import Expander, _split_default, find_close
from execd.config.table import ConfigTable, Origin
from execd.errors import ConfigError

HTCONDOR_VERSION = (25, 14, 1)  # the version execd's config language follows
MAX_INCLUDE_DEPTH = 20

_NAME = r"[A-Za-z_][A-Za-z0-9_.]*"
_ASSIGN_RE = re.compile(rf"^({_NAME})\s*=(.*)$", re.S)
_COLON_ASSIGN_RE = re.compile(rf"^({_NAME})\s*:(.*)$", re.S)  # obsolete, still taken
_MULTI_RE = re.compile(rf"^({_NAME})\s*@=\s*(\S+)\s*$")
_INCLUDE_RE = re.compile(r"^include\s*(ifexist)?\s*(command)?\s*:\s*(.*)$", re.I)
_USE_RE = re.compile(r"^use\s+([A-Za-z_]+)\s*:\s*(.*)$", re.I)
_MESSAGE_RE = re.compile(r"^(error|warning)\s*:\s*(.*)$", re.I)
_IF_RE = re.compile(r"^(if|elif)\b\s*(.*)$", re.I)
_VERSION_RE = re.compile(r"^version\s*(==|!=|>=|<=|>|<)\s*v?(\d+(?:\.\d+){0,2})$", re.I)

# Default-value resolver: NAME -> built-in default raw text (or None).
Defaults = Callable[[str], str | None]


@dataclass
class _Line:
    text: str
    number: int  # first physical line of the logical line


@dataclass
class _Cond:
    parent_active: bool
    taking: bool  # this branch is the one being read
    taken: bool  # some branch of this if has been read
    seen_else: bool
    line: int


def _logical_lines(text: str, file: str) -> Iterator[_Line | tuple[str, str, list[str], int]]:
    """Logical lines; an `@=` block comes out whole as (name, tag, lines, start)."""
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        start = i + 1
        line = physical[i]
        i += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        multi = _MULTI_RE.match(stripped)
        if multi:
            name, tag = multi.group(1), multi.group(2)
            block: list[str] = []
            while i < len(physical) and physical[i].strip() != f"@{tag}":
                kept = physical[i].strip()  # as HTCondor: trimmed, no blank or comment lines
                if kept and not kept.startswith("#"):
                    block.append(kept)
                i += 1
            if i >= len(physical):
                raise ConfigError(
                    f"unterminated '{name} @={tag}' block: no '@{tag}' line before the end",
                    file,
                    start,
                )
            i += 1
            yield (name, tag, block, start)
            continue
        while line.rstrip().endswith("\\"):
            line = line.rstrip()[:-1]
            if i >= len(physical):
                break
            nxt = physical[i]
            i += 1
            if nxt.lstrip().startswith("#"):
                continue  # a comment inside a continued value is skipped
            line += nxt.strip()  # as HTCondor: each physical line trimmed, then joined
        yield _Line(line.strip(), i)  # as HTCondor: a continued line is at its last line


class ConfigReader:
    """Reads config sources into one table, in order."""

    def __init__(self, table: ConfigTable, defaults: Defaults) -> None:
        self.table = table
        self.defaults = defaults
        self.files_read: list[str] = []
        self.warnings: list[str] = []
        self._stack: list[str] = []

    # -- entry points -------------------------------------------------------------
    def read_file(self, path: Path, *, ifexist: bool = False, origin: str | None = None) -> None:
        real = os.path.realpath(path)
        if real in self._stack:
            chain = " -> ".join([*self._stack[self._stack.index(real) :], real])
            raise ConfigError(f"include loop: {chain}", origin)
        if len(self._stack) >= MAX_INCLUDE_DEPTH:
            raise ConfigError(f"includes nested deeper than {MAX_INCLUDE_DEPTH} at {path}", origin)
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            if ifexist:
                return
            raise ConfigError(f"config file {path} does not exist", origin) from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}", origin) from None
        self.files_read.append(str(path))
        self._stack.append(real)
        try:
            self.read_text(text, str(path))
        finally:
            self._stack.pop()

    def read_text(self, text: str, file: str, *, base_origin: Origin | None = None) -> None:
        conds: list[_Cond] = []
        for item in _logical_lines(text, file):
            if isinstance(item, tuple):
                name, _tag, block, start = item
                if not conds or conds[-1].taking:
                    self._assign(name, "\n".join(block), base_origin or Origin(file, start))
                continue
            self._line(item, file, conds, base_origin)
        if conds:
            raise ConfigError("'if' without a matching 'endif'", file, conds[-1].line)

    # -- one logical line ---------------------------------------------------------------
    def _line(self, line: _Line, file: str, conds: list[_Cond], base: Origin | None) -> None:
        text, number = line.text, line.number
        keyword = text.split(None, 1)[0].lower() if text else ""
        active = not conds or conds[-1].taking
        if_match = _IF_RE.match(text) if keyword in ("if", "elif") else None
        if if_match:
            if keyword == "if":
                taking = active and self._condition(if_match.group(2), file, number)
                conds.append(_Cond(active, taking, taking, False, number))
                return
            if not conds:
                raise ConfigError("'elif' without 'if'", file, number)
            top = conds[-1]
            if top.seen_else:
                raise ConfigError("'elif' after 'else'", file, number)
            take = top.parent_active and not top.taken
            top.taking = take and self._condition(if_match.group(2), file, number)
            top.taken = top.taken or top.taking
            return
        if keyword == "else" and text.lower() == "else":
            if not conds:
                raise ConfigError("'else' without 'if'", file, number)
            top = conds[-1]
            if top.seen_else:
                raise ConfigError("a second 'else' for the same 'if'", file, number)
            top.seen_else = True
            top.taking = top.parent_active and not top.taken
            top.taken = True
            return
        if keyword == "endif" and text.lower() == "endif":
            if not conds:
                raise ConfigError("'endif' without 'if'", file, number)
            conds.pop()
            return
        if not active:
            return
        origin = base or Origin(file, number)
        if keyword == "include":
            self._include(text, file, number)
            return
        if keyword == "use":
            self._use(text, file, number, origin)
            return
        message = _MESSAGE_RE.match(text)
        if message:
            if message.group(1).lower() == "error":
                raise ConfigError(message.group(2).strip() or "error in config", file, number)
            self.warnings.append(f"{file}:{number}: {message.group(2).strip()}")
            return
        assign = _ASSIGN_RE.match(text)
        if assign:
            self._assign(assign.group(1), assign.group(2).strip(), origin)
            return
        assign = _COLON_ASSIGN_RE.match(text)
        if assign:  # HTCondor 25 still assigns, with a warning
            name = assign.group(1)
            self.warnings.append(f"{file}:{number}: obsolete use of ':' to assign {name}; "
                                 f"write '{name} = ...'")  # fmt: skip
            self._assign(name, assign.group(2).strip(), origin)
            return
        raise ConfigError(f"expected 'NAME = value', got {text[:60]!r}", file, number)

    def _assign(self, name: str, value: str, origin: Origin) -> None:
        if "$(" in value:
            value = self._expand_self_reference(name, value)
        self.table.define(name, value, origin)

    def _expand_self_reference(self, name: str, value: str) -> str:
        """Inline the previous value of NAME where the new value refers to itself."""
        out: list[str] = []
        i = 0
        while True:
            j = value.find("$(", i)
            if j < 0:
                out.append(value[i:])
                return "".join(out)
            close = find_close(value, j + 2)
            if close < 0:
                out.append(value[i:])
                return "".join(out)
            ref, default = _split_default(value[j + 2 : close])
            out.append(value[i:j])
            if ref.strip().upper() == name.upper():
                previous = self.table.definitions.get(name.upper())
                raw = previous.raw if previous is not None else self.defaults(name)
                out.append(raw if raw else (default or ""))
            else:
                out.append(value[j : close + 1])
            i = close + 1

    # -- directives ---------------------------------------------------------------------
    def _expander(self) -> Expander:
        def resolve(name: str) -> str | None:
            found = self.table.find(name)
            return found.raw if found is not None else self.defaults(name)

        return Expander(resolve, self.table.env)

    def _condition(self, text: str, file: str, number: int) -> bool:
        try:
            expanded = self._expander().expand(text, origin=f"{file}:{number}").strip()
        except ConfigError as exc:
            raise ConfigError(exc.message, file, number) from None
        negate = False
        while expanded.startswith("!"):
            negate = not negate
            expanded = expanded[1:].strip()
        return negate != self._bare_condition(expanded, file, number)

    def _bare_condition(self, text: str, file: str, number: int) -> bool:
        lowered = text.lower()
        if lowered.startswith("defined"):
            rest = text[len("defined") :].strip()
            if not rest:
                return False  # `defined` of an empty expansion
            if _is_bool(rest) or _is_number(rest):
                return True  # as HTCondor: a literal is defined
            found = self.table.find(rest)
            raw = found.raw if found is not None else self.defaults(rest)
            return bool(raw)  # as HTCondor: defined as empty is not defined
        version = _VERSION_RE.match(text)
        if version:
            wanted = tuple(int(p) for p in version.group(2).split("."))
            if len(wanted) < 2 or wanted[0] < 6:
                raise ConfigError(f"'if {text}': the version literal is invalid (X.Y[.Z], X >= 6)",
                                  file, number)  # fmt: skip
            return _compare(HTCONDOR_VERSION[: len(wanted)], version.group(1), wanted)
        if _is_bool(text):
            return lowered in _TRUE
        if _is_number(text):
            return float(text) != 0
        raise ConfigError(
            f"cannot evaluate 'if {text}': use 'defined NAME', 'version >= X.Y', "
            "or a true/false/number value",
            file,
            number,
        )

    def _include(self, text: str, file: str, number: int) -> None:
        match = _INCLUDE_RE.match(text)
        if not match:
            raise ConfigError(f"bad include line {text!r}: use 'include : PATH'", file, number)
        if match.group(2) or match.group(3).rstrip().endswith("|"):
            raise ConfigError("including the output of a command is not supported", file, number)
        try:
            target = self._expander().expand(match.group(3).strip())
        except ConfigError as exc:
            raise ConfigError(exc.message, file, number) from None
        if not target:
            raise ConfigError("include names no file", file, number)
        path = Path(target)
        if not path.is_absolute() and not file.startswith("<"):
            path = Path(file).parent / path
        self.read_file(path, ifexist=bool(match.group(1)), origin=f"{file}:{number}")

    def _use(self, text: str, file: str, number: int, origin: Origin) -> None:
        match = _USE_RE.match(text)
        if not match:
            raise ConfigError(f"bad use line {text!r}: use 'use CATEGORY : TEMPLATE'", file, number)
        category = match.group(1)
        try:
            for name, args in metaknobs.split_uses(match.group(2)):
                body = metaknobs.substitute_args(metaknobs.template_body(category, name), args)
                label = f"<use {category.upper()}:{name}>"
                self.read_text(body, label, base_origin=origin)
        except ConfigError as exc:
            if exc.file is not None and not exc.file.startswith("<use"):
                raise
            where = f" ({exc.file})" if exc.file else ""
            raise ConfigError(f"{exc.message}{where}", file, number) from None


_TRUE = ("true", "yes", "t")


def _is_bool(text: str) -> bool:
    return text.lower() in (*_TRUE, "false", "no", "f", "")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return "_" not in text


def _compare(have: tuple[int, ...], op: str, want: tuple[int, ...]) -> bool:
    return {
        "==": have == want,
        "!=": have != want,
        ">=": have >= want,
        "<=": have <= want,
        ">": have > want,
        "<": have < want,
    }[op]
