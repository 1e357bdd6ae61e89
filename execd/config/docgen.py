"""Generate docs/config.md from the knob registry: `python -m execd.config.docgen`."""

from __future__ import annotations

from itertools import groupby

from execd.config.knobs import all_knobs


def _cell(text: str | None) -> str:
    if text is None:
        return "*(unset)*"
    if text == "":
        return "*(empty)*"
    return "`" + text.replace("|", "\\|") + "`"


def render() -> str:
    lines = [
        "# execd configuration knobs",
        "",
        "Generated from `execd/config/knobs.py` by `make docs`"
        " (`python -m execd.config.docgen`); do not edit by hand.",
        "",
        "execd reads HTCondor's configuration language: `NAME = value`, macros",
        "(`$(NAME)`, `$(NAME:default)` and the special functions `$ENV`, `$INT`, `$REAL`,",
        "`$STRING`, `$EVAL`, `$CHOICE`, `$SUBSTR`, `$RANDOM_CHOICE`, `$RANDOM_INTEGER`,",
        "`$BASENAME`, `$DIRNAME`, `$F[pdnxqab]`), `include`, `if`/`else`,",
        "`use CATEGORY : TEMPLATE`. Defaults are HTCondor 25.x's",
        "unless a knob is marked *execd*. Any knob can be set per slot",
        "(`SLOT2_START`, `SLOT_TYPE_1_START`) or per subsystem (`STARTD.START`).",
        "`execd config-val -v NAME` shows a value and where it was set;",
        "`execd config-check` validates a file.",
        "",
    ]
    for group, knobs in groupby(all_knobs(), key=lambda k: k.group):
        lines += [f"## {group}", "", "| Knob | Type | Default | Meaning |", "|---|---|---|---|"]
        for knob in knobs:
            name = f"`{knob.name}`" + (" *(execd)*" if knob.ours else "")
            lines.append(f"| {name} | {knob.kind.value} | {_cell(knob.default)} | {knob.doc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
