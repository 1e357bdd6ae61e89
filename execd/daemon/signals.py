"""The signal contract, in one place.

Signal handlers only enqueue a request; one consumer (the daemon's main loop)
dispatches them in order (gunicorn's arbiter pattern), so no handler ever runs daemon
code re-entrantly.

| signal  | request          | what execd does                                             |
|---------|------------------|-------------------------------------------------------------|
| SIGHUP  | RECONFIG         | parse + validate the config; keep the old one on any error  |
| SIGTERM | SHUTDOWN_GRACEFUL| retire running jobs, then vacate them; a 2nd TERM goes fast |
| SIGINT  | SHUTDOWN_GRACEFUL| as SIGTERM (Ctrl-C in the foreground)                       |
| SIGQUIT | SHUTDOWN_FAST    | kill every job now, then exit                               |
| SIGUSR1 | REOPEN_LOGS      | reopen log files (after logrotate moved them)               |
| SIGUSR2 | RESTART_IN_PLACE | re-exec itself (same pid); the new image re-adopts the jobs |
"""

from __future__ import annotations

import asyncio
import enum
import signal


class Request(enum.Enum):
    RECONFIG = "reconfig"
    SHUTDOWN_GRACEFUL = "shutdown_graceful"
    SHUTDOWN_FAST = "shutdown_fast"
    REOPEN_LOGS = "reopen_logs"
    RESTART_IN_PLACE = "restart_in_place"


CONTRACT: dict[signal.Signals, Request] = {
    signal.SIGHUP: Request.RECONFIG,
    signal.SIGTERM: Request.SHUTDOWN_GRACEFUL,
    signal.SIGINT: Request.SHUTDOWN_GRACEFUL,
    signal.SIGQUIT: Request.SHUTDOWN_FAST,
    signal.SIGUSR1: Request.REOPEN_LOGS,
    signal.SIGUSR2: Request.RESTART_IN_PLACE,
}


class SignalQueue:
    """Turns signals into requests on an asyncio queue.

    A second graceful-shutdown signal while one is already under way becomes a fast
    shutdown, as an admin who presses Ctrl-C twice expects.
    """

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Request] = asyncio.Queue()
        self._graceful_seen = False

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for signum in CONTRACT:
            loop.add_signal_handler(signum, self.deliver, signum)

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        for signum in CONTRACT:
            loop.remove_signal_handler(signum)

    def deliver(self, signum: signal.Signals) -> None:
        request = CONTRACT[signum]
        if request is Request.SHUTDOWN_GRACEFUL:
            if self._graceful_seen:
                request = Request.SHUTDOWN_FAST
            self._graceful_seen = True
        self.queue.put_nowait(request)

    async def next(self) -> Request:
        return await self.queue.get()
