"""File transfer plugins: what the node's plugins say they do (`plugin -classad`) and
what one multi-file run of a plugin reports (its `-outfile`), as condor_starter reads
them (condor_utils/file_transfer.cpp).

Discovery: each program FILETRANSFER_PLUGINS names is run with `-classad`; it prints
one attribute a line (SupportedMethods, MultipleFileSupport, PluginVersion,
PluginType, ProtocolVersion). A plugin that cannot be run, prints nothing or names no
SupportedMethods is left out (and logged); a later plugin takes over a method an
earlier one named. The slot ads advertise the methods as HasFileTransferPluginMethods:
in the order of the method names, `,s3,gs` after them where https is handled (HTCondor
signs S3 URLs itself and fetches them over https).

A run's outfile holds one new-syntax ad per URL: TransferSuccess, TransferError,
TransferUrl, TransferFileName, TransferTotalBytes... `plugin_failure` turns a run that
failed into condor_starter's hold: code 12 (DownloadFileError), subcode the exit code
shifted by 8 (ETIME after a timeout, the signal after a signal, -1003 when the plugin
could not be run), reason `FILETRANSFER:1:non-zero exit (N) from PLUGIN. |Error: ... (
URL file = URL )|`, the errors of several files joined by `|`, the last one first.
The run itself is execd/wire/plugin_runner.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import classad2

from execd.log import get_logger

log = get_logger("wire")
PLUGIN_LIFETIME_S = 72000.0  # MAX_FILE_TRANSFER_PLUGIN_LIFETIME's default
CLASSAD_TIMEOUT_S = 20.0  # FILETRANSFER_PLUGIN_CLASSAD_TIMEOUT's default
MAX_CLASSAD_OUTPUT = 64 * 1024
SUBCODE_NOT_OPERATIONAL = -1002  # CONDOR_HOLD_SUBCODE::FileTransferPluginNotOperational
SUBCODE_EXEC_FAILED = -1003  # CONDOR_HOLD_SUBCODE::FileTransferPluginExecFailed
SUBCODE_NO_RESULT = -1004  # CONDOR_HOLD_SUBCODE::FileTransferPluginNoResultReported
HOLD_DOWNLOAD_FILE_ERROR = 12


class PluginError(ValueError):
    """A plugin's output that cannot be used (its -classad answer, its outfile)."""


@dataclass(frozen=True)
class Plugin:
    path: str
    methods: tuple[str, ...]
    multi_file: bool = False
    version: str = ""
    kind: str = ""  # PluginType
    protocol: int = 1
    from_job: bool = False  # the job's own (TransferPlugins), its path in the sandbox


def parse_lines(text: str) -> tuple[dict[str, Any], int]:
    """One `Name = value` a line (blank and `#` lines skipped): the values, and how
    many lines did not parse (ignored, as condor_starter does)."""
    values: dict[str, Any] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parsed = dict(classad2.parseOne(line))
        except Exception:
            parsed = {}
        if not parsed:
            bad += 1
        values.update(parsed)
    return values, bad


def parse_plugin_classad(path: str, text: str) -> Plugin:
    """A plugin's `-classad` answer; PluginError names the plugin when it has no
    SupportedMethods."""
    values, bad = parse_lines(text)
    methods = values.get("SupportedMethods")
    if not isinstance(methods, str) or not methods.strip():
        if bad:
            log.warning("transfer_plugin_classad_unparsed", plugin=path, lines=bad)
        raise PluginError(f"{path} -classad did not produce a valid classad, ignoring")
    multi = values.get("MultipleFileSupport") is True
    protocol = values.get("ProtocolVersion")
    if not isinstance(protocol, int) or not 1 <= protocol <= 100:
        protocol = 2 if multi else 1
    names = tuple(m.strip() for m in methods.replace(" ", ",").split(",") if m.strip())
    return Plugin(path, names, multi, str(values.get("PluginVersion", "")),
                  str(values.get("PluginType", "")), protocol)  # fmt: skip


@dataclass
class PluginTable:
    """The node's plugins by method (the last plugin to name a method handles it), and
    what went wrong asking them: condor_starter's transfer keeps those errors on the
    stack its hold reasons are written from, so they follow a failed run's reason."""

    by_method: dict[str, Plugin] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, plugin: Plugin) -> None:
        for method in plugin.methods:  # methods compare without case, as condor's table
            self.by_method.pop(next((m for m in self.by_method if m.lower() == method.lower()),
                                    method), None)  # fmt: skip
            self.by_method[method] = plugin

    def with_job_plugins(self, transfer_plugins: str) -> PluginTable:
        """This table and the job's own plugins (its TransferPlugins, `methods=plugin`
        entries separated by `;`): they take over the methods they name, are not asked
        `-classad` and run as multi-file plugins, from the job's input sandbox. As
        condor_starter builds such a job's table (FileTransfer::Init, with an error
        stack of its own that it drops), neither the node's discovery errors nor an
        entry without '=' (skipped) follow that job's failures."""
        table = PluginTable(dict(self.by_method), [])
        for entry in (e.strip() for e in transfer_plugins.split(";")):
            if not entry:
                continue
            methods, equals, path = entry.partition("=")
            if not equals:
                continue
            names = tuple(m.strip() for m in methods.split(",") if m.strip())
            table.add(Plugin(path.strip(), names, multi_file=True, protocol=2, from_job=True))
        return table

    def methods_attr(self) -> str:
        """HasFileTransferPluginMethods ("" without plugins: the attribute is left out)."""
        if not self.by_method:
            return ""
        names = sorted(self.by_method, key=str.lower)
        https = any(m.lower() == "https" for m in names)
        return ",".join(names + (["s3", "gs"] if https else []))

    def for_url(self, url: str) -> Plugin | None:
        """The plugin of the URL's scheme, its part after the last `+`, `-` or `.`
        (`osdf+https` is https's), as condor_utils' getURLType with scheme_suffix."""
        method = url_method(url).lower()
        return next((p for m, p in self.by_method.items() if m.lower() == method), None)


def url_safe(url: str) -> str:
    """A URL as hold reasons and logs show it: its query (a presigned URL's signature,
    a token) replaced by `?...`, as condor_utils' UrlSafePrint."""
    if "://" in url and "?" in url:
        return url.split("?", 1)[0] + "?..."
    return url


def url_method(url: str) -> str:
    scheme = url.split(":", 1)[0]
    for mark in "+-.":
        scheme = scheme.rsplit(mark, 1)[-1]
    return scheme


def _run_classad(path: str, timeout_s: float, user: tuple[int, int] | None) -> str:
    """`PATH -classad`'s output (stdout and stderr, at most MAX_CLASSAD_OUTPUT bytes)
    within `timeout_s` (TimeoutExpired past them), in a session of its own killed
    after it: a child keeping the pipe open neither blocks nor outlives the query."""
    ids: dict[str, Any] = {}
    if user is not None and os.geteuid() == 0:
        ids = {"user": user[0], "group": user[1], "extra_groups": []}
    deadline = time.monotonic() + timeout_s
    proc = subprocess.Popen([path, "-classad"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/",
                            env={"PATH": os.defpath}, start_new_session=True,
                            **ids)  # fmt: skip
    assert proc.stdout is not None
    out = b""
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while len(out) < MAX_CLASSAD_OUTPUT:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise subprocess.TimeoutExpired(path, timeout_s)
                chunk = os.read(proc.stdout.fileno(), 64 * 1024)
                if not chunk:
                    break
                out += chunk
        proc.wait(max(deadline - time.monotonic(), 0.001))
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    return out[:MAX_CLASSAD_OUTPUT].decode(errors="replace")


def discover_plugins(paths: Sequence[str], *, timeout_s: float = CLASSAD_TIMEOUT_S,
                     user: tuple[int, int] | None = None) -> PluginTable:  # fmt: skip
    """Ask each plugin (`-classad`, as `user` when root) what it does; blocking (run it
    in a thread). A plugin that fails is logged and left out, never fatal."""
    table = PluginTable()
    for path in paths:
        try:
            output = _run_classad(path, timeout_s, user)
            if not output:
                table.errors.append(f"FILETRANSFER:1:No output from {path} -classad, ignoring")
                continue
            table.add(parse_plugin_classad(path, output))
        except subprocess.TimeoutExpired:  # MyPopenTimer's error code: ETIMEDOUT
            table.errors.append(f"FILETRANSFER:{errno.ETIMEDOUT}:No output from {path} "
                                "-classad, ignoring")  # fmt: skip
        except OSError as exc:
            why = os.strerror(exc.errno or errno.EIO)
            table.errors.append(f"FILETRANSFER:1:FILETRANSFER: Failed to execute {path} "
                                f"-classad: {why} skipping")  # fmt: skip
        except PluginError as exc:
            table.errors.append(f"FILETRANSFER:1:{exc}")
    for error in table.errors:
        log.warning("transfer_plugin_unusable", error=error)
    if table.by_method:
        log.info("transfer_plugins", methods=table.methods_attr())
    return table


def node_plugins(paths: Sequence[str], timeout_s: float) -> PluginTable:
    """discover_plugins as an unprivileged user (`nobody`) when execd is root; with
    no such user, none is asked (never as root) and the table says why."""
    ids: tuple[int, int] | None = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("nobody")
        except KeyError:
            log.error("transfer_plugins_not_asked", reason="no user nobody to ask them as")
            return PluginTable(errors=["FILETRANSFER:1:FILETRANSFER: no user 'nobody' to ask "
                                       "the plugins as, none used"])  # fmt: skip
        ids = (user.pw_uid, user.pw_gid)
    return discover_plugins(paths, timeout_s=timeout_s, user=ids)


@dataclass(frozen=True)
class FileResult:
    """One URL's line of a plugin's outfile."""

    url: str
    file_name: str
    success: bool | None  # None: no TransferSuccess
    error: str = ""
    total_bytes: int = 0


def parse_result_ads(text: str) -> list[FileResult]:
    """The ads of a plugin's outfile (new syntax, one after another; HTCondor
    preallocates the file with spaces). Nothing parsable: an empty list."""
    results = []
    with contextlib.suppress(Exception):  # classad2 raises on some garbage, returns [] on other
        for ad in classad2.parseAds(text, classad2.ParserType.New):
            success = ad.get("TransferSuccess")
            error, total = ad.get("TransferError"), ad.get("TransferTotalBytes")
            results.append(FileResult(
                str(ad.get("TransferUrl", "")), str(ad.get("TransferFileName", "")),
                success if isinstance(success, bool) else None,
                error if isinstance(error, str) else "",
                total if isinstance(total, int) else 0))  # fmt: skip
    return results


@dataclass(frozen=True)
class PluginRun:
    """How a plugin run ended: its exit code or signal, or that it timed out or could
    not be started; `outfile` its text (None: it could not be read)."""

    exit_code: int = 0
    signal: int = 0
    timed_out: bool = False
    exec_error: str = ""
    outfile: str | None = ""
    timeout_s: float = 0.0


ERROR_KEEP = 2048  # one plugin's TransferError, at most (a hold reason stays small)


def _capped(text: str, keep: int = ERROR_KEEP) -> str:
    return text if len(text) <= keep else text[:keep] + "..."


def plugin_errors(label: str, run: PluginRun, results: list[FileResult], outfile_name: str,
                  stack_empty: bool = True) -> tuple[int | None, list[str]]:  # fmt: skip
    """What one multi-file run puts on the transfer's error stack (in push order) and
    its hold subcode, None when it succeeded. As condor_starter: the run's result is
    its exit (a per-URL failure of a plugin that exited 0 is on the stack, the job
    runs); no ad at all fails it; the generic message only on an empty stack."""
    if run.exec_error:
        return SUBCODE_EXEC_FAILED, [f"FILETRANSFER:1:FILETRANSFER: Failed to execute {label}: "
                                     f"{run.exec_error}"]  # fmt: skip
    status = errno.ETIME if run.timed_out else run.exit_code
    errors: list[str] = []
    no_result = False
    if run.outfile is None:
        errors.append(f"|Error: file transfer plugin {label} exited with code {status}, "
                      f"unable to open output file {outfile_name}")  # fmt: skip
    for result in results:
        if result.success is None:
            errors.append(f"non-zero exit ({status}) from {label}. |Error: File transfer "
                          f"plugin {label} exited without producing a TransferSuccess result "
                          f" ({_capped(result.url)})|")  # fmt: skip
        elif not result.success:
            why = _capped(result.error) if result.error else (
                f"File transfer plugin {label} exited unexpectedly without producing an "
                "error message ")  # fmt: skip
            errors.append(f"non-zero exit ({status}) from {label}. |Error: {why} "
                          f"( URL file = {url_safe(_capped(result.url))} )|")  # fmt: skip
    if run.outfile is not None and not results:
        how = ("signal", run.signal) if run.signal else ("exit code", status)
        errors.append(f"|Error: file transfer plugin {label} exited ({how[0]} {how[1]}), "
                      f"no valid classads in output file {outfile_name}")  # fmt: skip
        no_result = True
    failed = run.timed_out or run.signal or run.exit_code != 0 or no_result \
        or run.outfile is None  # fmt: skip
    pushed = [f"FILETRANSFER:1:{e}" for e in errors]
    if not failed:
        return None, pushed
    if stack_empty and not pushed:
        pushed.append(f"FILETRANSFER:1:File transfer plugin {label} timed out after "
                      f"{run.timeout_s:g} seconds." if run.timed_out else
                      f"FILETRANSFER:1:File transfer plugin {label} failed unexpectedly with "
                      f"exit code {status}, did not report a TransferError message.")  # fmt: skip
    if run.timed_out:
        return errno.ETIME, pushed
    if run.signal:
        return run.signal, pushed
    if no_result:  # condor_starter reports this rather than the exit code
        return SUBCODE_NO_RESULT, pushed
    return (status << 8 if status > 0 else status), pushed


def plugin_failure(label: str, run: PluginRun, results: list[FileResult],
                   outfile_name: str) -> tuple[int, str] | None:  # fmt: skip
    """(hold subcode, reason) of a failed run on an empty stack, None when it succeeded."""
    subcode, pushed = plugin_errors(label, run, results, outfile_name)
    return None if subcode is None else (subcode, "|".join(reversed(pushed)))


def single_failure(label: str, run: PluginRun, output: str) -> tuple[int, str] | None:
    """(hold subcode, reason) of a single-file plugin's run that failed (its printed
    statistics give TransferError and TransferUrl), None when it succeeded."""
    if run.exec_error:
        return SUBCODE_EXEC_FAILED, f"FILETRANSFER:1:FILETRANSFER: Failed to execute {label}: " \
            f"{run.exec_error}"  # fmt: skip
    if run.timed_out:
        return errno.ETIME, (f"FILETRANSFER:1:File transfer plugin {label} timed out after "
                             f"{run.timeout_s:g} seconds.")  # fmt: skip
    if not run.signal and run.exit_code == 0:
        return None
    stats, _ = parse_lines(output)
    error, url = stats.get("TransferError"), stats.get("TransferUrl", "")
    why = _capped(error) if isinstance(error, str) else \
        f"File transfer plugin {label} exited unexpectedly without producing an error message "
    if run.signal:
        return run.signal, (f"FILETRANSFER:1:exit by signal {run.signal} from {label}. "
                            f"|Error: {why} ( URL file = {url_safe(str(url))} )|")  # fmt: skip
    return run.exit_code << 8, (f"FILETRANSFER:1:non-zero exit ({run.exit_code}) from {label}. "
                                f"|Error: {why} ( URL file = {url_safe(str(url))} )|")  # fmt: skip
