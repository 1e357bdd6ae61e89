"""The daemon's one backfill client (seed 003 "Backfill"): a configured program.

The policy engine decides when (StartBackfillClient / KillBackfillClient); this runs it.
``BACKFILL_SYSTEM`` names the client (HTCondor's is BOINC, execd takes any program) and
its settings carry that name as a prefix, as HTCondor's BOINC_* settings do:
``<SYSTEM>_Executable`` (required), ``_Arguments``, ``_InitialDir``, ``_Output``,
``_Error``, ``_Environment`` ("NAME=value" pairs separated by spaces or semicolons) and
``_Owner``: the user it runs as when execd runs as root (required then, never root).
The client leads its own session; killing it kills that whole process group. Its exit
is watched through a pidfd on the event loop, then reported to the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shlex
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from execd import log
from execd.config.settings import Settings
from execd.errors import ConfigError

logger = log.get_logger("backfill")
RETRY_AFTER_S = 60.0  # a client that cannot be spawned is tried again this much later


@dataclass(frozen=True)
class BackfillProgram:
    system: str
    executable: str
    arguments: list[str] = field(default_factory=list)
    initial_dir: str | None = None
    output: str | None = None
    error: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    uid: int | None = None  # None: run as execd's own (non-root) user
    gid: int | None = None


def backfill_program(settings: Settings) -> BackfillProgram | None:
    """The configured client, or None when backfill is off; ConfigError names what is wrong."""
    if not settings.get_bool("ENABLE_BACKFILL"):
        return None
    system = settings.get_str("BACKFILL_SYSTEM") or "BOINC"
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", system):
        raise ConfigError(f"BACKFILL_SYSTEM {system!r} is not a name")

    def knob(suffix: str) -> str | None:
        return settings.get_str(f"{system}_{suffix}")

    executable = knob("Executable")
    if executable is None:
        raise ConfigError(f"ENABLE_BACKFILL is true but {system}_Executable is not set")
    uid = gid = None
    owner = knob("Owner")
    if os.geteuid() == 0:
        if owner is None:
            raise ConfigError(f"{system}_Owner must name the user the backfill client runs "
                              "as: execd runs as root and never runs it as root")
        try:
            entry = pwd.getpwnam(owner)
        except KeyError:
            raise ConfigError(f"{system}_Owner: no user named {owner!r}") from None
        if entry.pw_uid == 0:
            raise ConfigError(f"{system}_Owner: the backfill client never runs as root")
        uid, gid = entry.pw_uid, entry.pw_gid
    env = {}
    for pair in re.split(r"[;\s]+", knob("Environment") or ""):
        name, sep, value = pair.partition("=")
        if sep and name:
            env[name] = value
        elif pair:
            raise ConfigError(f"{system}_Environment: {pair!r} is not NAME=value")
    return BackfillProgram(system, executable, shlex.split(knob("Arguments") or ""),
                           knob("InitialDir"), knob("Output"), knob("Error"), env, uid, gid)


class BackfillClient:
    """Starts, watches and kills the one client process."""

    def __init__(self, program: BackfillProgram | None, on_exit: Callable[[], None]) -> None:
        self.program = program
        self.on_exit = on_exit
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None
        self._pending = False  # asked for before the event loop ran
        self._exit_owed = False  # killed before it ran: the engine still waits for an exit
        self._retry: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> None:
        if self.proc is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._pending = True  # the daemon is still starting up: attach() spawns it
            return
        program = self.program
        if program is None:
            logger.error("backfill_client_failed", error="ENABLE_BACKFILL is off")
            self._retry = loop.call_later(RETRY_AFTER_S, self._retried)
            return
        try:
            self.proc = self._spawn(program)
        except OSError as exc:
            # reported as an exit a while later, so the engine tries again then
            logger.error("backfill_client_failed", system=program.system,
                         executable=program.executable, error=str(exc),
                         retry_after_s=RETRY_AFTER_S)
            self._retry = loop.call_later(RETRY_AFTER_S, self._retried)
            return
        self._pidfd = os.pidfd_open(self.proc.pid)
        loop.add_reader(self._pidfd, self._reaped)
        logger.info("backfill_client_started", system=program.system, pid=self.proc.pid,
                    executable=program.executable)

    def attach(self) -> None:
        """The event loop runs now: start what was asked for before it did."""
        if self._pending:
            self._pending = False
            self.start()
        if self._exit_owed:
            self._exit_owed = False
            asyncio.get_running_loop().call_soon(self.on_exit)

    def _retried(self) -> None:
        self._retry = None
        self.on_exit()

    def kill(self) -> None:
        """SIGKILL the client and everything left in its process group."""
        if self._pending or self._retry is not None:  # nothing runs: it is gone at once
            self._pending = False
            if self._retry is not None:
                self._retry.cancel()
                self._retry = None
            self._exit_owed = True
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop()
                self.attach()
        if self.proc is not None:
            logger.info("backfill_client_killed", pid=self.proc.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """At daemon exit: kill the client and reap it here."""
        proc = self.proc
        if proc is None:
            return
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        self._forget()

    def _spawn(self, program: BackfillProgram) -> subprocess.Popen[bytes]:
        outputs: list[IO[bytes]] = []
        try:
            for path in (program.output, program.error):
                outputs.append(open(path, "ab") if path else open(os.devnull, "wb"))  # noqa: SIM115 -- closed below, after the child has them
            extra: dict[str, Any] = {}
            if program.uid is not None:
                extra = {"user": program.uid, "group": program.gid, "extra_groups": []}
            return subprocess.Popen(
                [program.executable, *program.arguments], stdin=subprocess.DEVNULL,
                stdout=outputs[0], stderr=outputs[1], cwd=program.initial_dir,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **program.environment},
                start_new_session=True, close_fds=True, **extra)
        finally:
            for handle in outputs:
                handle.close()

    def _reaped(self) -> None:
        proc = self.proc
        if proc is None:
            return
        status = proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind in its group
        self._forget()
        logger.info("backfill_client_exited", pid=proc.pid, status=status)
        self.on_exit()

    def _forget(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self.proc = None
