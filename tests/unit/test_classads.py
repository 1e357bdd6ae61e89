"""Three-valued ClassAd logic as policy sees it (seed 000, 3.5.x)."""

from __future__ import annotations

import pytest

from execd.classads import (
    ClassAdError,
    evaluate,
    is_true,
    is_undefined,
    new_ad,
    parse_expr,
)

COLTRANE_START = 'KeyboardIdle > 15 * 60 || Owner == "coltrane"'


def test_coltrane_start_is_undefined_without_a_job_so_owner_state_is_kept() -> None:
    # Seed 000: evaluated locally with KeyboardIdle 34, Owner is undefined:
    # False || Undefined is Undefined, which is not true, so the slot stays in Owner.
    machine = new_ad({"KeyboardIdle": 34})
    result = evaluate(COLTRANE_START, machine)
    assert not is_true(result)
    assert is_undefined(result)


def test_coltrane_start_is_true_against_coltranes_job() -> None:
    machine = new_ad({"KeyboardIdle": 34})
    job = new_ad({"Owner": "coltrane"})
    assert is_true(evaluate(COLTRANE_START, machine, job))


def test_coltrane_start_is_false_for_others_while_keyboard_is_busy() -> None:
    machine = new_ad({"KeyboardIdle": 34})
    job = new_ad({"Owner": "mingus"})
    assert evaluate(COLTRANE_START, machine, job) is False


def test_keyboard_idle_long_enough_makes_start_true_without_a_job() -> None:
    # True || Undefined is True.
    machine = new_ad({"KeyboardIdle": 16 * 60})
    assert is_true(evaluate(COLTRANE_START, machine))


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("TRUE", True),
        ("FALSE", False),
        ("UNDEFINED", False),
        ("ERROR", False),
        ('"yes"', False),
        ("1", True),
        ("0", False),
        ("0.5", True),
        ("undefined && false", False),
        ("undefined || true", True),
        ("undefined && true", False),
        ('1 + "a"', False),
        ("1 +", False),
    ],
)
def test_is_true_accepts_only_true(expr: str, expected: bool) -> None:
    assert is_true(evaluate(expr)) is expected


def test_scoped_references_pick_my_and_target() -> None:
    machine = new_ad({"Cpus": 4, "Memory": 4096})
    job = new_ad({"RequestCpus": 2, "RequestMemory": 8192})
    assert is_true(evaluate("TARGET.RequestCpus <= MY.Cpus", machine, job))
    assert not is_true(evaluate("TARGET.RequestMemory <= MY.Memory", machine, job))


def test_unscoped_reference_falls_back_to_target() -> None:
    machine = new_ad({"Cpus": 4})
    job = new_ad({"Owner": "bob"})
    assert is_true(evaluate('Owner == "bob"', machine, job))


def test_parse_error_names_the_expression() -> None:
    with pytest.raises(ClassAdError, match="1 \\+"):
        parse_expr("1 +")
