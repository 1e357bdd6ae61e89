"""Tier gating: a test under tests/<tier>/ runs only where its tier can run.

A tier that cannot run is skipped with the exact reason; with EXECD_REQUIRE_ALL_TIERS=1
(CI) it fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tiers

TESTS = Path(__file__).parent.resolve()


def tier_of(item: pytest.Item) -> str | None:
    try:
        rel = Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:
        return None
    top = rel.parts[0] if rel.parts else ""
    return top if top in tiers.TIERS else None


@cache
def _why_not(tier: str) -> str | None:
    return tiers.why_not(tier)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    tier = tier_of(item)
    if tier is None:
        return
    reason = _why_not(tier)
    if reason is None:
        return
    if tiers.require_all():
        pytest.fail(
            f"the {tier} tier cannot run ({reason}) and EXECD_REQUIRE_ALL_TIERS is set",
            pytrace=False,
        )
    pytest.skip(f"the {tier} tier cannot run here: {reason}")


@pytest.fixture(autouse=True)
def _fresh_logging() -> None:
    """Each test starts with info-level console logging to stderr, whatever ran before."""
    from execd import log

    log.configure(level="info", fmt="console", path=None)
