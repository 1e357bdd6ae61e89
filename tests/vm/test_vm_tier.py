"""The VM tier, host side: boot a real cgroup v2 kernel once and report each guest test.

One host test per guest test function (a parametrized guest test passes when every one
of its cases passed), so a failure in the guest is visible here by name, with its
message, the guest's pytest output and the VM console tail.
"""

from __future__ import annotations

import pytest
import tiers
import vm_harness as harness

# pytest's exit statuses when it ran the tests to the end: all passed, some failed.
PYTEST_RAN_TESTS = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)


@pytest.fixture(scope="session")
def guest_run(tmp_path_factory: pytest.TempPathFactory) -> harness.GuestRun:
    return harness.boot_and_run(tmp_path_factory.mktemp("vm"))


def _fail_with_logs(run: harness.GuestRun, why: str) -> None:
    pytest.fail(f"{why}\nresults in {run.results_dir}\n{run.diagnosis()}", pytrace=False)


def test_guest_session_completed(guest_run: harness.GuestRun) -> None:
    """The guest booted, ran pytest to the end, and ran only tests the host reports.

    Failing guest tests fail their own host tests below; this one fails when the run
    itself broke (timeout, crash, collection or usage error, nothing collected).
    """
    if guest_run.timed_out:
        _fail_with_logs(guest_run, f"the VM did not finish in {harness.BOOT_TIMEOUT_S} s")
    if guest_run.exit_status is None:
        _fail_with_logs(guest_run, "the guest never recorded pytest's exit status")
    if guest_run.exit_status not in PYTEST_RAN_TESTS or not guest_run.cases:
        _fail_with_logs(guest_run, f"guest pytest exited {guest_run.exit_status}")
    known = set(harness.guest_test_functions())
    unexpected = {n for n in guest_run.cases if n.split("[")[0] not in known}
    assert not unexpected, f"guest results the host does not report by name: {unexpected}"


@pytest.mark.parametrize("function", harness.guest_test_functions())
def test_guest(function: str, guest_run: harness.GuestRun) -> None:
    cases = [c for nodeid, c in guest_run.cases.items() if nodeid.split("[")[0] == function]
    if not cases:
        _fail_with_logs(guest_run, f"the guest did not report {function}")
    bad = [c for c in cases if c.outcome != "passed"]
    if bad and all(c.outcome == "skipped" for c in bad) and not tiers.require_all():
        pytest.skip("in the guest: " + "; ".join(c.detail for c in bad))
    if bad:
        details = "\n\n".join(f"{c.nodeid}: {c.outcome}\n{c.detail}" for c in bad)
        pytest.fail(f"in the guest:\n{details}", pytrace=False)
