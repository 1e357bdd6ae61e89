"""How `execd status` shows slot ads: condor_status's table, -long and -af, -constraint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from execd.classads import ClassAdError, Value, evaluate, is_true, new_ad, parse_expr

TABLE_HEADER = ("Name", "OpSys", "Arch", "State", "Activity", "LoadAv", "Mem", "ActvtyTime")
# condor_status's summary columns; Drain counts Drained slots, BkIdle Backfill/Idle ones
SUMMARY_COLUMNS = ("Owner", "Claimed", "Unclaimed", "Matched", "Preempting", "Drain",
                   "Backfill", "BkIdle")


def select(ads: Sequence[Any], constraint: str | None) -> list[Any]:
    """Ads for which the constraint is true; ClassAdError if it does not parse."""
    if not constraint:
        return list(ads)
    expr = parse_expr(constraint)
    return [ad for ad in ads if is_true(evaluate(expr, ad))]


def _get(ad: Any, attr: str, default: Any = None) -> Any:
    if attr not in ad:
        return default
    value = ad.eval(attr)
    return default if isinstance(value, Value) else value


def duration(seconds: int) -> str:
    """condor_status's ActvtyTime: days+hh:mm:ss."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    return f"{days}+{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def format_table(ads: Sequence[Any]) -> str:
    rows = []
    for ad in sorted(ads, key=lambda a: str(_get(a, "Name", ""))):
        now = _get(ad, "MyCurrentTime", 0)
        entered = _get(ad, "EnteredCurrentActivity", now)
        load = _get(ad, "LoadAvg", 0.0)
        rows.append((
            str(_get(ad, "Name", "?")), str(_get(ad, "OpSys", "?")), str(_get(ad, "Arch", "?")),
            str(_get(ad, "State", "?")), str(_get(ad, "Activity", "?")),
            f"{float(load):.3f}", str(_get(ad, "Memory", "?")), duration(int(now - entered)),
        ))
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(TABLE_HEADER)]
    right = {5, 6}  # numbers line up on the right, as in condor_status

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(
            zip(cells, widths, strict=True))]
        return " ".join(parts).rstrip()

    out = [line(TABLE_HEADER), ""]
    out += [line(r) for r in rows]
    out += ["", _summary(ads)]
    return "\n".join(out) + "\n"


def _summary_column(ad: Any) -> str:
    state = str(_get(ad, "State", "?"))
    if state == "Drained":
        return "Drain"
    if state == "Backfill" and _get(ad, "Activity", "") == "Idle":
        return "BkIdle"
    return state


def _summary(ads: Sequence[Any]) -> str:
    by_platform: dict[str, Counter[str]] = {}
    for ad in ads:
        platform = f"{_get(ad, 'Arch', '?')}/{_get(ad, 'OpSys', '?')}"
        by_platform.setdefault(platform, Counter())[_summary_column(ad)] += 1
    total: Counter[str] = Counter()
    rows = [["", "Total", *SUMMARY_COLUMNS]]
    for platform, counts in sorted(by_platform.items()):
        total.update(counts)
        per_column = [str(counts[c]) for c in SUMMARY_COLUMNS]
        rows.append([platform, str(sum(counts.values())), *per_column])
    rows.append(["Total", str(sum(total.values())), *(str(total[c]) for c in SUMMARY_COLUMNS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  " + " ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n\n".join([lines[0], "\n".join(lines[1:-1]), lines[-1]])


def format_long(ads: Sequence[Any]) -> str:
    blocks = []
    for ad in sorted(ads, key=lambda a: str(_get(a, "Name", ""))):
        lines = [ln for ln in ad.printOld().splitlines() if ln.strip()]
        blocks.append("\n".join(sorted(lines, key=lambda ln: ln.split("=", 1)[0].strip().lower())))
    return "\n\n".join(blocks) + ("\n\n" if blocks else "")


def _af_value(ad: Any, attr: str) -> str:
    try:
        value = evaluate(attr, ad) if attr not in ad else ad.eval(attr)
    except ClassAdError:
        return "error"
    if value is Value.Undefined:
        return "undefined"
    if value is Value.Error:
        return "error"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):  # as condor_status -af: `{ "Claimed","Claimed" }`
        return str(new_ad({"X": value}).printOld()).split("=", 1)[1].strip()
    return str(value)


def format_autoformat(ads: Sequence[Any], attrs: Sequence[str]) -> str:
    rows = [" ".join(_af_value(ad, a) for a in attrs)
            for ad in sorted(ads, key=lambda a: str(_get(a, "Name", "")))]
    return "".join(r + "\n" for r in rows)
