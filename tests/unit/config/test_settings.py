"""The knob registry: typed values, HTCondor defaults, and errors naming knob and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.classads import evaluate, new_ad
from execd.config.docgen import render
from execd.config.knobs import Kind, find_knob
from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.errors import ConfigError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "config.md"


def settings(text: str) -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def test_htcondor_defaults_apply_when_unset() -> None:
    s = settings("")
    assert s.get_int("UPDATE_INTERVAL") == 300
    assert s.get_int("POLLING_INTERVAL") == 5
    assert s.get_int("MATCH_TIMEOUT") == 120
    assert s.get_int("KILLING_TIMEOUT") == 30
    assert s.get_int("MachineMaxVacateTime") == 600  # 10 * $(MINUTE), evaluated
    assert s.get_int("MAXJOBRETIREMENTTIME") == 0
    assert s.get_int("CLAIM_WORKLIFE") == 1200
    assert s.get_int("MAX_CLAIM_ALIVES_MISSED") == 6
    assert s.get_int("RESERVED_MEMORY") == 0
    assert s.get_str("CGROUP_MEMORY_LIMIT_POLICY") == "hard"
    assert s.get_bool("DISABLE_SWAP_FOR_JOB") is True
    assert s.get_str("BASE_CGROUP") == "htcondor"


def test_defaults_follow_other_knobs() -> None:
    s = settings("LOCAL_DIR = /srv/execd\n")
    assert s.get_str("EXECUTE") == "/srv/execd/execute"
    assert s.get_str("SPOOL") == "/srv/execd/spool"
    assert s.get_str("EXECD_LOG") == "/srv/execd/log/ExecdLog"


def test_integer_knobs_accept_expressions() -> None:
    s = settings("MAXJOBRETIREMENTTIME = 2 * $(HOUR)\n")
    assert s.get_int("MAXJOBRETIREMENTTIME") == 7200


def test_policy_expressions_parse_and_evaluate_per_slot() -> None:
    s = settings('START = KeyboardIdle > 60\nSLOT2_START = Owner == "coltrane"\n')
    machine = new_ad({"KeyboardIdle": 100})
    assert evaluate(s.get_expr("START"), machine) is True
    job = new_ad({"Owner": "coltrane"})
    assert evaluate(s.get_expr("START", slot=2), machine, job) is True
    assert evaluate(s.get_expr("PREEMPT"), machine) is False  # default


def test_bad_expression_is_an_error_naming_knob_file_and_line() -> None:
    with pytest.raises(ConfigError) as err:
        settings("A = 1\nSTART = KeyboardIdle >\n")
    assert err.value.file == "execd.conf"
    assert err.value.line == 2
    assert "START" in err.value.message
    assert "ClassAd expression" in err.value.message


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        settings("UPDATE_INTERVAL = often\nDISABLE_SWAP_FOR_JOB = maybe\nRANK = (\n")
    text = str(err.value)
    assert text.startswith("3 problems")
    assert "execd.conf:1: UPDATE_INTERVAL" in text
    assert "execd.conf:2: DISABLE_SWAP_FOR_JOB" in text
    assert "execd.conf:3: RANK" in text


def test_macro_cycle_is_reported_as_a_problem() -> None:
    with pytest.raises(ConfigError, match="macro cycle"):
        settings("START = $(X)\nX = $(START)\n")


def test_unknown_names_are_allowed() -> None:
    assert settings("favorite_color = blue\n").get_str("favorite_color") == "blue"


def test_families_and_per_slot_spellings_are_declared() -> None:
    assert find_knob("SLOT_TYPE_3") is not None
    assert find_knob("NUM_SLOTS_TYPE_12") is not None
    assert find_knob("MACHINE_RESOURCE_Bar") is not None
    knob = find_knob("SLOT2_START")
    assert knob is not None
    assert knob.kind is Kind.EXPR
    assert find_knob("STARTD.UPDATE_INTERVAL") is not None


def test_generated_docs_are_current() -> None:
    assert DOCS.read_text() == render(), "docs/config.md is stale: run `make docs`"
