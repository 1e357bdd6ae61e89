"""The config table: every definition read from the config files, and how names are
looked up in it the way HTCondor does.

Names are case-insensitive. A name may be qualified by a subsystem (``STARTD.START``,
``STARTER.JOB_HOOK_KEYWORD``) or a local name, and per-slot knobs may be prefixed by a
slot (``SLOT2_START``) or slot type (``SLOT_TYPE_1_START``). Lookup tries the most
specific spelling first: slot, then slot type, then the plain name; at each level the
subsystem-qualified spelling before the bare one.

Values are kept as written (raw). Macro expansion (``$(NAME)`` and friends) happens at
lookup through :mod:`execd.config.macros`, in the context of the subsystem and slot that
asked, as HTCondor expands at param() time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Origin:
    """Where a definition came from: a file and line, or a built-in source."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}, line {self.line}" if self.line > 0 else self.file


@dataclass(frozen=True)
class Definition:
    name: str  # as first written, e.g. "Start" or "STARTD.START"
    raw: str  # the value text, unexpanded
    origin: Origin


def lookup_candidates(
    name: str,
    *,
    subsystem: str | None = None,
    local_name: str | None = None,
    slot: int | None = None,
    slot_type: int | None = None,
) -> list[str]:
    """The spellings to try for ``name``, most specific first (upper case)."""
    base = name.upper()
    prefixes = []
    if slot is not None:
        prefixes.append(f"SLOT{slot}_")
    if slot_type is not None:
        prefixes.append(f"SLOT_TYPE_{slot_type}_")
    prefixes.append("")
    qualifiers = []
    if local_name:
        qualifiers.append(local_name.upper() + ".")
    if subsystem:
        qualifiers.append(subsystem.upper() + ".")
    qualifiers.append("")
    return [q + p + base for p in prefixes for q in qualifiers]


@dataclass
class ConfigTable:
    """Definitions keyed by upper-case name; later definitions replace earlier ones."""

    definitions: dict[str, Definition] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    def define(self, name: str, raw: str, origin: Origin) -> None:
        key = name.upper()
        previous = self.definitions.get(key)
        spelled = previous.name if previous is not None else name
        self.definitions[key] = Definition(spelled, raw, origin)

    def undefine(self, name: str) -> None:
        self.definitions.pop(name.upper(), None)

    def find(
        self,
        name: str,
        *,
        subsystem: str | None = None,
        local_name: str | None = None,
        slot: int | None = None,
        slot_type: int | None = None,
    ) -> Definition | None:
        """The definition that a lookup of ``name`` in this context finds, if any."""
        for candidate in lookup_candidates(
            name, subsystem=subsystem, local_name=local_name, slot=slot, slot_type=slot_type
        ):
            found = self.definitions.get(candidate)
            if found is not None:
                return found
        return None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.upper() in self.definitions

    def __iter__(self) -> Iterator[Definition]:
        return iter(self.definitions.values())

    def __len__(self) -> int:
        return len(self.definitions)
