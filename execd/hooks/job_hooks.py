"""Job hooks (seed 003, "Job Hooks That Modify and Monitor Execution").

<Keyword>_HOOK_PREPARE_JOB reads the job ad on stdin and prints attributes to set in it;
HookStatusCode (replacing the exit status unless the hook died by a signal) 0 runs the
job, 1-299 holds it, 300 and more returns it to idle, with HookStatusMessage as the reason.
<Keyword>_HOOK_UPDATE_JOB_INFO runs STARTER_INITIAL_UPDATE_INTERVAL seconds after the job
starts and every STARTER_UPDATE_INTERVAL after, its output ignored.
<Keyword>_HOOK_JOB_EXIT gets `exit`, `remove`, `hold` or `evict` as its argument.
Every hook runs as the job's user. Nothing here imports classad2: edits are returned as
attribute -> expression text for the caller to apply.
"""

from __future__ import annotations

import subprocess
from typing import NamedTuple

# HTCondor's hold code for a failed prepare-job hook (HookPrepareJobFailure).
HOLD_HOOK_PREPARE_JOB_FAILURE = 19
EXIT_ARGUMENTS = ("exit", "remove", "hold", "evict")


class HookResult(NamedTuple):
    status: int  # exit status, or -signal when it died by a signal
    stdout: str
    stderr: str


class PrepareOutcome(NamedTuple):
    action: str  # "run", "hold" or "idle"
    edits: dict[str, str]
    code: int
    message: str


def select_keyword(
    job_keyword: str | None,
    default_keyword: str | None,
    forced_keyword: str | None,
    configured: set[str],
) -> str | None:
    """STARTER_JOB_HOOK_KEYWORD wins; then the job's HookKeyword if any hook is defined
    for it; then STARTER_DEFAULT_JOB_HOOK_KEYWORD; else no hooks."""
    if forced_keyword:
        return forced_keyword
    if job_keyword and job_keyword in configured:
        return job_keyword
    return default_keyword or None


def parse_hook_output(text: str) -> dict[str, str]:
    """`Name = expression` lines (old ClassAd syntax); blank and `#` lines skipped."""
    edits: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name.replace("_", "a").isalnum() or not value.strip():
            raise ValueError(f"hook output line {number} is not `Name = value`: {raw!r}")
        edits[name] = value.strip()
    return edits


def _unquote(expr: str) -> str:
    if len(expr) >= 2 and expr[0] == expr[-1] == '"':
        return expr[1:-1].replace('\\"', '"')
    return expr


def prepare_job_outcome(result: HookResult) -> PrepareOutcome:
    """Decide run / hold / idle from the hook's status and output."""
    try:
        edits = parse_hook_output(result.stdout)
    except ValueError as exc:
        return PrepareOutcome("hold", {}, 1, f"PREPARE_JOB hook: {exc}")
    code = result.status
    message = _unquote(edits.pop("HookStatusMessage", ""))
    reported = edits.pop("HookStatusCode", None)
    if result.status < 0:
        return PrepareOutcome(
            "hold", {}, -result.status, message or f"PREPARE_JOB hook killed by signal {-code}"
        )
    if reported is not None and reported.lstrip("-").isdigit() and int(reported) >= 0:
        code = int(reported)
    if code == 0:
        return PrepareOutcome("run", edits, 0, message)
    if code < 300:
        return PrepareOutcome("hold", {}, code, message or f"PREPARE_JOB hook exited {code}")
    return PrepareOutcome("idle", {}, code, message or f"PREPARE_JOB hook exited {code}")


def next_update_time(started: float, last: float | None, initial: float, interval: float) -> float:
    """When UPDATE_JOB_INFO runs next (monotonic seconds)."""
    return started + initial if last is None else last + interval


def job_exit_argument(reason: str) -> str:
    if reason not in EXIT_ARGUMENTS:
        raise ValueError(f"JOB_EXIT hook argument {reason!r} is not one of {EXIT_ARGUMENTS}")
    return reason


def run_hook(
    path: str, args: list[str], job_ad_text: str, *, uid: int, gid: int, timeout: float
) -> HookResult:
    """Run one hook as the job's user with the ad on stdin; a timeout kills it."""
    try:
        proc = subprocess.run(
            [path, *args],
            input=job_ad_text,
            capture_output=True,
            text=True,
            user=uid,
            group=gid,
            extra_groups=[],
            timeout=timeout,
            check=False,
            close_fds=True,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return HookResult(-9, "", f"hook {path} timed out after {timeout}s")
    except OSError as exc:
        return HookResult(1, "", f"hook {path} could not run: {exc.strerror}")
    return HookResult(proc.returncode, proc.stdout, proc.stderr)
