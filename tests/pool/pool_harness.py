"""A real HTCondor pool (Debian sid's `condor`) in the pool tier's chroot, on loopback.

The chroot is built once by `python tests/tiers.py setup` (tiers.pool_root()). A Pool
mounts what HTCondor needs into it, writes a personal-pool config with a free loopback
port, starts condor_master in its own session and stops everything again: the daemons,
any process left with its root in the chroot, and every mount, even when a step failed.

By default the pool has no execute point (DAEMON_LIST has no STARTD): execd is meant to
join it. `Pool(with_startd=True)` runs HTCondor's own startd as the reference EP.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiers  # tests/conftest.py puts tests/ on sys.path

CONFIG_FILE = "/etc/condor/config.d/99-execd-pool-tier.conf"
# Everything the pool writes lives here (wiped at start): no state from an earlier run,
# such as a job queue in SPOOL, leaks into the next.
LOCAL_DIR = "/var/lib/execd-pool"
SUBMITTER = "execdtest"
# Seconds: short intervals so that ads and matches appear within a few seconds.
INTERVAL_S = 2
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
LOCK_TIMEOUT_S = 300
TOOL_TIMEOUT_S = 60
CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# The IDTOKENS-only pool: every daemon and tool authenticates with IDTOKENS, and the
# schedd authenticates its claim commands too instead of resuming claim-id sessions.
IDTOKENS_ONLY = [
    "SEC_DEFAULT_AUTHENTICATION_METHODS = IDTOKENS",
    "SEC_ENABLE_MATCH_PASSWORD_AUTHENTICATION = False",
]
DAEMON_TOKEN = "/etc/condor/tokens.d/execd-pool-tier"
SUBMITTER_TOKEN = f"/home/{SUBMITTER}/.condor/tokens.d/execd-pool-tier"


class PoolError(RuntimeError):
    """The pool did not do what the harness asked (message names the step)."""


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice; 9618 is never assumed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float, every_s: float = 0.5) -> Any:
    """Poll probe until it returns something truthy; PoolError naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise PoolError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)


@dataclass(frozen=True)
class Tool:
    """One finished condor tool run inside the chroot."""

    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Tool:
        if self.returncode != 0:
            raise PoolError(
                f"{shlex.join(self.argv)} exited {self.returncode}: {self.stderr.strip()}"
            )
        return self


class Pool:
    """One HTCondor pool in the chroot; start() then stop() (stop is always safe)."""

    start_timeout_s: float = START_TIMEOUT_S  # a slower machine (the VM tier's) sets more

    def __init__(self, root: Path | None = None, *, with_startd: bool = False,
                 idtokens: bool = False) -> None:  # fmt: skip
        self.root = (root or tiers.pool_root()).resolve()
        self.with_startd = with_startd
        self.idtokens = idtokens
        self.port = 0
        self.master: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._jobs = 0

    # ----- paths -------------------------------------------------------------------
    def host_path(self, chroot_path: str) -> Path:
        """The host's path of a path inside the chroot."""
        return self.root / chroot_path.lstrip("/")

    @property
    def collector(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def local_dir(self) -> Path:
        return self.host_path(LOCAL_DIR)

    def daemon_log(self, name: str) -> str:
        """A daemon's log (e.g. "MasterLog", "SchedLog"), for diagnosis."""
        path = self.local_dir / "log" / name
        return path.read_text(errors="replace") if path.exists() else f"({path} not written)"

    # ----- lifecycle ---------------------------------------------------------------
    def _remove_stale_test_configs(self) -> None:
        """Tests give condor_startd a config file of their own (config.d/9?-execd-*.conf)
        and remove it when done; one a killed run left behind would change every later
        pool, so a pool starts without them."""
        for stale in self.host_path(CONFIG_FILE).parent.glob("9[0-9]-execd-*.conf"):
            stale.unlink(missing_ok=True)

    def start(self) -> None:
        if not tiers.pool_built(self.root):
            raise PoolError(f"no built pool chroot at {self.root}: {tiers.why_not('pool')}")
        self._lock()
        try:
            self._mount()
            self._prepare()
            self.port = free_loopback_port()
            self._remove_stale_test_configs()
            self.host_path(CONFIG_FILE).write_text(self.config_text())
            if self.idtokens:
                self._write_tokens()
            log = (self.local_dir / "master.stdout").open("wb")
            with log:
                self.master = subprocess.Popen(
                    ["chroot", str(self.root), "env", "-i", f"PATH={CHROOT_PATH}",
                     "condor_master", "-f"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            wait_for("the collector to list the schedd", self._schedd_listed,
                     self.start_timeout_s)  # fmt: skip
            if self.with_startd:
                wait_for("the startd's slot ad", lambda: self.status("-slots"),
                         self.start_timeout_s)  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def config_text(self) -> str:
        daemons = "MASTER, COLLECTOR, NEGOTIATOR, SCHEDD" + (", STARTD" if self.with_startd else "")
        return "\n".join([
            "# Written by execd's pool test tier (tests/pool/pool_harness.py).",
            "use ROLE : Personal",
            "CONDOR_HOST = 127.0.0.1",
            "NETWORK_INTERFACE = 127.0.0.1",
            # Otherwise every daemon listens on 0.0.0.0 and [::] and advertises an IPv6
            # address too: keep the pool on IPv4 loopback only.
            "BIND_ALL_INTERFACES = False",
            "ENABLE_IPV6 = False",
            # Every daemon sits behind the shared port daemon; the collector's address is
            # that port (the tier's own, so concurrent pools and a 9618 in use don't clash).
            f"SHARED_PORT_PORT = {self.port}",
            f"COLLECTOR_HOST = $(CONDOR_HOST):{self.port}",
            f"DAEMON_LIST = {daemons}",
            f"LOCAL_DIR = {LOCAL_DIR}",
            "LOG = $(LOCAL_DIR)/log",
            "SPOOL = $(LOCAL_DIR)/spool",
            "EXECUTE = $(LOCAL_DIR)/execute",
            "LOCK = $(LOCAL_DIR)/lock",
            "RUN = /run/condor",
            "COLLECTOR_ADDRESS_FILE = $(LOG)/.collector_address",
            "SCHEDD_ADDRESS_FILE = $(SPOOL)/.schedd_address",
            # This host refuses mount namespaces; HTCondor's startd must not use cgroups
            # (the host's v1 hierarchies are not ours, and the chroot's /sys has none).
            "MOUNT_UNDER_SCRATCH =",
            "BASE_CGROUP =",
            f"UPDATE_INTERVAL = {INTERVAL_S}",
            f"POLLING_INTERVAL = {INTERVAL_S}",
            f"NEGOTIATOR_INTERVAL = {INTERVAL_S}",
            f"NEGOTIATOR_CYCLE_DELAY = {INTERVAL_S}",
            # The negotiator's own ad (its LastNegotiationCycle* statistics) is otherwise
            # sent only every 5 minutes.
            f"NEGOTIATOR_UPDATE_INTERVAL = {INTERVAL_S}",
            f"SCHEDD_INTERVAL = {INTERVAL_S}",
            f"STARTER_UPDATE_INTERVAL = {INTERVAL_S}",
            "SCHEDD_MIN_INTERVAL = 1",
            *IDTOKENS_ONLY * self.idtokens,
            "",
        ])  # fmt: skip

    def _write_tokens(self) -> None:
        """IDTOKENS mode: a token for the daemons (condor@UID_DOMAIN, in the chroot's
        /etc/condor/tokens.d) and one for the submitter (its ~/.condor/tokens.d)."""
        domain = self.tool("condor_config_val", "UID_DOMAIN").check().stdout.strip()
        for owner, path in (("condor", DAEMON_TOKEN), (SUBMITTER, SUBMITTER_TOKEN)):
            made = self.tool("condor_token_create", "-identity", f"{owner}@{domain}")
            if made.returncode != 0:
                raise PoolError(f"condor_token_create for {owner}: {made.stderr.strip()} "
                                "(the chroot needs its POOL signing key)")  # fmt: skip
            host = self.host_path(path)
            host.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            host.write_text(made.stdout)
            host.chmod(0o600)
            if owner == SUBMITTER:
                uid, gid = self._chroot_ids(SUBMITTER)
                for part in (host.parent.parent, host.parent, host):
                    os.chown(part, uid, gid)

    def _remove_tokens(self) -> None:
        for path in (DAEMON_TOKEN, SUBMITTER_TOKEN):
            self.host_path(path).unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop the daemons, kill stragglers, unmount; safe on a half-started pool.

        Each step runs even when the one before it failed; the first error is raised
        only after the mounts are gone.
        """
        try:
            try:
                if self.master is not None and self.master.poll() is None:
                    self._shut_down_master()
            finally:
                self.master = None
                self._kill_chroot_processes()
        finally:
            if self.idtokens:
                self._remove_tokens()
            tiers.unmount_all(self.root)
            self._unlock()

    def _shut_down_master(self) -> None:
        assert self.master is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.tool("condor_off", "-fast", "-master", timeout_s=STOP_TIMEOUT_S)
        try:
            self.master.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._killpg(self.master.pid)
            self.master.wait()

    def __enter__(self) -> Pool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- tools -------------------------------------------------------------------
    def tool(self, *argv: str, user: str | None = None, cwd: str = "/",
             timeout_s: float = TOOL_TIMEOUT_S) -> Tool:  # fmt: skip
        """Run a program inside the chroot (as root, or as `user`) and capture it."""
        home = f"/home/{user}" if user else "/root"
        script = f"cd {shlex.quote(cwd)} && exec {shlex.join(argv)}"
        spec = [f"--userspec={user}:{user}"] if user else []
        full = ["chroot", *spec, str(self.root), "env", "-i", f"PATH={CHROOT_PATH}",
                f"HOME={home}", f"USER={user or 'root'}", "sh", "-c", script]  # fmt: skip
        done = subprocess.run(
            full, capture_output=True, text=True, errors="replace", timeout=timeout_s,
            check=False, start_new_session=True,
        )  # fmt: skip
        return Tool(argv, done.returncode, done.stdout, done.stderr)

    def status(self, *args: str) -> list[dict[str, Any]]:
        """`condor_status -json ARGS` as ads ([] when the collector lists none)."""
        out = self.tool("condor_status", "-json", *args).check().stdout
        return json.loads(out) if out.strip() else []

    def status_af(self, *attrs: str, what: str = "-any") -> list[list[str]]:
        """`condor_status WHAT -af ATTRS`, one list of strings per ad."""
        out = self.tool("condor_status", what, "-af:t", *attrs).check().stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def queue(self, *args: str) -> list[dict[str, Any]]:
        """`condor_q -json ARGS` for every user ([] for an empty queue)."""
        out = self.tool("condor_q", "-allusers", "-json", *args).check().stdout
        return json.loads(out) if out.strip() else []

    def history(self, cluster: int) -> list[dict[str, Any]]:
        out = self.tool("condor_history", "-json", str(cluster)).check().stdout
        return json.loads(out) if out.strip() else []

    def submit(self, submit_text: str, files: dict[str, str] | None = None,
               user: str = SUBMITTER) -> SubmittedJob:  # fmt: skip
        """condor_submit as a non-root submitter (created if need be), in a fresh
        directory of its home."""
        self._jobs += 1
        self.add_user(user)
        job_dir = f"/home/{user}/job{self._jobs}"
        host_dir = self.host_path(job_dir)
        if host_dir.exists():  # an earlier session's
            subprocess.run(["rm", "-rf", "--one-file-system", str(host_dir)], check=True)
        host_dir.mkdir(parents=True)
        uid, gid = self._chroot_ids(user)
        os.chown(host_dir, uid, gid)
        for name, text in {"job.sub": submit_text, **(files or {})}.items():
            (host_dir / name).write_text(text)
            os.chown(host_dir / name, uid, gid)
        out = self.tool("condor_submit", "-terse", "job.sub", user=user, cwd=job_dir)
        first = out.check().stdout.split()[0]  # "17.0 - 17.0"
        return SubmittedJob(self, int(first.split(".")[0]), host_dir)

    def add_user(self, user: str) -> None:
        """A submitter account in the chroot (with a home), unless it exists."""
        if self.tool("id", user).returncode != 0:
            self.tool("useradd", "--create-home", "--shell", "/bin/sh", user).check()

    def host_client_config(self, directory: Path) -> Path:
        """A CONDOR_CONFIG for HTCondor clients on the host (the htcondor wheel, execd)."""
        path = directory / "pool-client.conf"
        path.write_text(
            f"COLLECTOR_HOST = {self.collector}\n"
            "SEC_CLIENT_AUTHENTICATION_METHODS = FS\n"
            "ENABLE_IPV6 = False\n"
        )
        return path

    def listening_addresses(self) -> list[str]:
        """host:port of every TCP socket the chroot's processes listen on."""
        pids = set(self.chroot_pids())
        out = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True, check=True)
        found = []
        for line in out.stdout.splitlines():
            fields = line.split()
            owners = {int(m) for m in re.findall(r"pid=(\d+)", line)}
            if len(fields) >= 4 and owners & pids:
                found.append(fields[3])
        return found

    # ----- internals ---------------------------------------------------------------
    def _schedd_listed(self) -> bool:
        if self.master is not None and self.master.poll() is not None:
            raise PoolError(
                f"condor_master exited {self.master.returncode}\n{self.daemon_log('MasterLog')}"
            )
        done = self.tool("condor_status", "-schedd", "-af", "Name", timeout_s=20)
        return done.returncode == 0 and bool(done.stdout.strip())

    def _mount(self) -> None:
        tiers.unmount_all(self.root)  # what a killed earlier run may have left
        # A fresh sysfs, not a bind of the host's /sys: the host's cgroup mounts (v1
        # hierarchies that belong to the machine's supervisor) stay out of reach.
        for argv in (["-t", "proc", "proc", "proc"], ["-t", "sysfs", "sysfs", "sys"],
                     ["--bind", "/dev", "dev"], ["-t", "tmpfs", "tmpfs", "run"],
                     # FS authentication: the server names a directory under /tmp that
                     # the client must create; with one shared /tmp a client on the host
                     # (execd) authenticates to the daemons in the chroot, and back.
                     ["--bind", "/tmp", "tmp"]):  # fmt: skip
            target = str(self.root / argv[-1])
            subprocess.run(["mount", *argv[:-1], target], check=True)

    def _prepare(self) -> None:
        uid, gid = self._chroot_ids("condor")
        for sub in ("run/lock/condor", "run/condor"):
            self.host_path(sub).mkdir(parents=True, exist_ok=True)
            os.chown(self.host_path(sub), uid, gid)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.local_dir)], check=True)
        for sub in ("", "log", "spool", "execute", "lock"):
            (self.local_dir / sub).mkdir(parents=True, exist_ok=True)
            os.chown(self.local_dir / sub, uid, gid)
        os.chmod(self.local_dir / "execute", 0o755)
        hostname = socket.gethostname()
        hosts = self.host_path("/etc/hosts")
        if hostname not in hosts.read_text().split():
            with hosts.open("a") as f:
                f.write(f"127.0.0.1\t{hostname}\n")
        if self.tool("id", SUBMITTER).returncode != 0:
            self.tool("useradd", "--create-home", "--shell", "/bin/sh", SUBMITTER).check()
        home = self.host_path(f"/home/{SUBMITTER}")
        for old in home.glob("job*"):
            subprocess.run(["rm", "-rf", "--one-file-system", str(old)], check=True)

    def _chroot_ids(self, name: str) -> tuple[int, int]:
        """A user's ids in the chroot (its passwd, not the host's)."""
        for line in self.host_path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == name:
                return int(fields[2]), int(fields[3])
        raise PoolError(f"no user {name!r} in the chroot's /etc/passwd")

    def chroot_pids(self) -> list[int]:
        """Every process whose root directory is this chroot."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if Path(os.readlink(entry / "root")).resolve() == self.root:
                    pids.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
        return pids

    def _kill_chroot_processes(self) -> None:
        """SIGKILL whatever still runs with its root in the chroot, and wait for it."""
        for pid in self.chroot_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for("the chroot's processes to exit", lambda: not self.chroot_pids(), 10, 0.1)

    @staticmethod
    def _killpg(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    def _lock(self) -> None:
        """One pool per chroot at a time (it mounts over the chroot's /run)."""
        path = self.root.with_name(self.root.name + ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

        def take() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        try:
            wait_for(f"another test run's pool in {self.root} to stop ({path})", take,
                     LOCK_TIMEOUT_S, 1.0)  # fmt: skip
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


@dataclass
class SubmittedJob:
    """A cluster submitted through Pool.submit; files live in `host_dir`."""

    pool: Pool
    cluster: int
    host_dir: Path

    def ad(self) -> dict[str, Any] | None:
        ads = self.pool.queue(str(self.cluster))
        return ads[0] if ads else None

    def user_log(self) -> str:
        log = self.host_dir / "job.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def events(self) -> list[str]:
        """The user log's event codes in order ("000", "001", "005", ...)."""
        codes = []
        for line in self.user_log().splitlines():
            head = line.split(" ", 1)[0]
            if len(head) == 3 and head.isdigit():
                codes.append(head)
        return codes

    def wait_for_event(self, code: str, timeout_s: float) -> str:
        """Wait until the user log records event `code`; return the whole log."""
        wait_for(f"event {code} in {self.host_dir / 'job.log'}",
                 lambda: code in self.events(), timeout_s)  # fmt: skip
        return self.user_log()

    def output(self, name: str) -> str:
        return (self.host_dir / name).read_text()


class RunningPool:
    """A test session's one pool, restarted only when a test needs the other mode.

    One pool runs in the chroot at a time (it mounts over the chroot's /run).
    """

    def __init__(self, make: Callable[..., Pool] = Pool) -> None:
        self.make = make  # make(with_startd=..., idtokens=...): a Pool, not started
        self.current: Pool | None = None
        self.last: Pool | None = None  # the latest made, running, stopped or failed
        # Called with the last pool before the next one starts and wipes its logs.
        self.before_wipe: Callable[[Pool], None] | None = None

    def get(self, *, with_startd: bool, idtokens: bool = False) -> Pool:
        if self.current is not None and (self.current.with_startd, self.current.idtokens) == (
                with_startd, idtokens):  # fmt: skip
            return self.current
        self.close()
        if self.last is not None and self.before_wipe is not None:
            self.before_wipe(self.last)
        started = self.make(with_startd=with_startd, idtokens=idtokens)
        self.last = started
        started.start()  # stops what it started itself when it fails
        self.current = started
        return started

    def close(self) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            current.stop()
