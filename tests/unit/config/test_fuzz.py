"""Fuzzing the config reader: a Config or a ConfigError, never anything else, never a hang."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execd.config.loader import Config, load_config, parse_config_text
from execd.errors import ConfigError

NAMES = st.sampled_from(["A", "B", "C", "START", "SLOT1_START", "STARTD.X", "D_1", "NUM_CPUS"])

FRAGMENTS = st.one_of(
    st.text(max_size=20),
    NAMES.map(lambda n: f"$({n})"),
    NAMES.map(lambda n: f"$({n}:dflt)"),
    st.sampled_from(["$ENV(HOME)", "$INT(A)", "$REAL(B)", "$(DOLLAR)", "$(", ")", "\\", "@=x"]),
)

VALUE = st.lists(FRAGMENTS, max_size=5).map("".join)

LINE = st.one_of(
    st.builds(lambda n, v: f"{n} = {v}", NAMES, VALUE),
    st.builds(lambda n, v: f"{n} @=end\n{v}\n@end", NAMES, VALUE),
    st.sampled_from(
        [
            "if defined A", "if true", "if false", "elif version >= 8.0", "else", "endif",
            "if $(A)", "if ! defined B", "include : other.conf", "include ifexist : nope.conf",
            "include : self.conf", "use POLICY : Desktop", "use FEATURE : StaticSlots(1, 2)",
            "use POLICY : Preempt_If", "use NOPE : x", "error : boom", "warning : hm", "# c",
            "", "garbage line here", "A = $(A) more", "A = $(B)", "B = $(A)",
        ]
    ),
    st.text(max_size=40),
)

TEXT = st.lists(LINE, max_size=25).map("\n".join)


def check(config: Config) -> None:
    for name in config.names():
        try:
            value = config.get(name)
        except ConfigError:
            continue
        assert value is None or isinstance(value, str)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_text_gives_config_or_config_error(text: str) -> None:
    try:
        config = parse_config_text(text, filename="fuzz.conf", env={"HOME": "/h"})
    except ConfigError:
        return
    check(config)


@settings(max_examples=100, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, TEXT)
def test_included_files_give_config_or_config_error(main: str, other: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "self.conf").write_text(main)
        (root / "other.conf").write_text(other)
        try:
            config = load_config(root / "self.conf", env={})
        except ConfigError:
            return
        check(config)


@settings(max_examples=50, deadline=3000)
@given(st.integers(min_value=1, max_value=3000), st.booleans())
def test_deep_macro_chains_and_cycles(depth: int, cyclic: bool) -> None:
    lines = [f"M{i} = x$(M{i + 1})" for i in range(depth)]
    lines.append("M{} = {}".format(depth, "$(M0)" if cyclic else "end"))
    config = parse_config_text("\n".join(lines), env={})
    try:
        value = config.get("M0")
    except ConfigError:
        return
    assert value == "x" * depth + "end"
