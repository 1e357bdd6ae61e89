"""Parsing what a startd cron job prints (seed 003, "Daemon ClassAd Hooks").

A job prints ``Attr = value`` lines. A line starting with ``-`` ends an ad; the rest of
that line may name the ad (a uniqueness tag, joined to the job's name) and may carry
``update:true`` or ``update:false`` to force or suppress an immediate update. Output
after the last ``-`` line is one more ad when the job exits.

Pure: text in, ads out. A line that is not ``Attr = value`` (or whose value does not
parse as a ClassAd expression) is reported with its number and text; the good lines of
the same ad still apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from execd.classads import ClassAdError, parse_expr

__all__ = ["BadLine", "CronAd", "CronOutputParser", "parse_cron_output"]

_ATTR_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")
_UPDATE_RE = re.compile(r"^update\s*:\s*(\S+)$", re.I)


@dataclass(frozen=True)
class BadLine:
    number: int  # 1-based line number in the job's output
    text: str
    reason: str


@dataclass
class CronAd:
    """One ad a job printed: attribute -> expression text, in output order."""

    tag: str | None = None  # the uniqueness tag after '-', if any
    update: bool | None = None  # update:true/false after '-', if any
    attrs: dict[str, str] = field(default_factory=dict)

    def full_name(self, job: str) -> str:
        """The ad's name: the job's name, joined with the tag when there is one."""
        return f"{job}_{self.tag}" if self.tag else job


def _parse_bool(word: str) -> bool | None:
    lowered = word.lower()
    if lowered in ("true", "t", "yes", "1"):
        return True
    if lowered in ("false", "f", "no", "0"):
        return False
    return None


class CronOutputParser:
    """Incremental parser: feed lines as they arrive, take finished ads as they end."""

    def __init__(self) -> None:
        self.bad_lines: list[BadLine] = []
        self._current = CronAd()
        self._line_no = 0

    def feed_line(self, line: str) -> CronAd | None:
        """Parse one line; return the finished ad when the line is a '-' delimiter."""
        self._line_no += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return None
        if stripped.startswith("-"):
            return self._end_ad(stripped[1:].strip())
        match = _ATTR_RE.match(stripped)
        if match is None:
            self._bad(stripped, "not of the form Attr = value")
            return None
        name, value = match.groups()
        if not value:
            self._bad(stripped, "no value after '='")
            return None
        try:
            parse_expr(value)
        except ClassAdError:
            self._bad(stripped, "value is not a ClassAd expression")
            return None
        self._current.attrs[name] = value
        return None

    def finish(self) -> CronAd | None:
        """The ad in progress when output ended (no final '-'), if it has attributes."""
        ad, self._current = self._current, CronAd()
        return ad if ad.attrs else None

    def _end_ad(self, rest: str) -> CronAd:
        ad, self._current = self._current, CronAd()
        # "- update: true" (a space after the colon) means the same as "- update:true"
        rest = re.sub(r"(?i)\bupdate\s*:\s*", "update:", rest)
        for word in rest.split():
            update = _UPDATE_RE.match(word)
            if update is not None:
                ad.update = _parse_bool(update.group(1))
                if ad.update is None:
                    self._bad(f"-{rest}", f"update:{update.group(1)} is not true or false")
            elif ad.tag is None:
                ad.tag = word
            else:
                self._bad(f"-{rest}", f"extra word {word!r} after the ad's name")
        return ad

    def _bad(self, text: str, reason: str) -> None:
        self.bad_lines.append(BadLine(self._line_no, text, reason))


def parse_cron_output(text: str) -> tuple[list[CronAd], list[BadLine]]:
    """Every ad in TEXT (a whole output) and the lines that could not be parsed."""
    parser = CronOutputParser()
    ads = [ad for line in text.splitlines() if (ad := parser.feed_line(line)) is not None]
    last = parser.finish()
    if last is not None:
        ads.append(last)
    return ads, parser.bad_lines
