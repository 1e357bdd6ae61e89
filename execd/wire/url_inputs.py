"""URL input files (`transfer_input_files = https://...`), the starter's side.

The shadow sends such an item as TransferCommand 5 (DownloadUrl): the command, the
file's name, then the URL in a message of its own; the starter fetches it. As
condor_starter with multi-file plugins, every URL is deferred until the CEDAR items
are in, then the URLs of each plugin go to one run of it (execd/wire/plugin_runner.py)
before the uploader's ack is read; a run that fails fails the transfer (hold code 12,
execd/wire/transfer_plugins.py's subcode and reason) and the plugins after it are not
run. A URL whose scheme no plugin handles, or any URL while URL transfers are off
(ENABLE_URL_TRANSFERS = false), fails the transfer the same way without a run.

The plugins write into the sandbox as the job's user. Every file, directory and the
proxy the shadow sent is already the user's (made so as received, modes masked to
0o777: execd/wire/filetransfer.py), the job ad files too; before the first plugin
runs the sandbox directory itself is handed over (execd/starter/sandbox.py
give_to_user: that directory alone, never a walk; `handed_over`).
Each run is in a cgroup of its own, killed whole after it: nothing
a plugin starts outlives it. Without a cgroup (no cgroup v2 delegation) the job's own
plugins are refused as STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS = true refuses
them (subcode -1002, "user-supplied plugin P not allowed"); the node's (the admin's)
still run, killed by session.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from execd.starter.sandbox import give_to_user
from execd.wire.plugin_runner import (
    PluginJob,
    remove_run_files,
    run_plugin,
    run_single,
)
from execd.wire.shadow_job import JobSetupError, environment_of, proxy_name
from execd.wire.transfer_plugins import (
    HOLD_DOWNLOAD_FILE_ERROR,
    SUBCODE_NOT_OPERATIONAL,
    Plugin,
    PluginTable,
    parse_result_ads,
    plugin_errors,
    single_failure,
    url_method,
    url_safe,
)

if TYPE_CHECKING:
    from execd.cgroups.tree import JobCgroup

CMD_DOWNLOAD_URL = 5  # TransferCommand::DownloadUrl
ALLOW_JOB_PLUGINS, IGNORE_JOB_PLUGINS = 0, 2  # FileTransfer::UserPluginDisableMode
SUBCODE_NOT_FOUND = -1001  # CONDOR_HOLD_SUBCODE::FileTransferPluginNotFound
# What a shadow may make us keep (each URL arrives in a message up to 64 MiB).
MAX_URL_BYTES = 64 * 1024
MAX_URLS = 10_000
MAX_URL_TOTAL = 16 * 1024 * 1024
REASON_KEEP = 8 * 1024  # a hold reason made of plugin errors, at most


def capped_reason(text: str) -> str:
    return text if len(text) <= REASON_KEEP else text[:REASON_KEEP] + "..."


@dataclass
class UrlInputs:
    """The URLs of one input transfer, collected then fetched; `table` None: URL
    transfers are off."""

    table: PluginTable | None
    job: PluginJob
    job_plugins: str = ""  # the job's TransferPlugins
    pending: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    plugins: dict[str, Plugin] = field(default_factory=dict)
    _effective: PluginTable | None = field(default=None, init=False, repr=False)
    _kept: int = field(default=0, init=False, repr=False)  # URL bytes in `pending`
    handed_over: bool = field(default=False, init=False)  # the sandbox is the user's
    # STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS for this job: 0 allow, 2 ignore
    # (the node's plugins serve), else fail. Without a cgroup: fail, whatever it says.
    job_plugin_mode: int = 0

    def add(self, name: str, url: str, target: Path) -> tuple[int, str] | None:
        """Defer one URL; (hold subcode, error stack text) when it cannot be fetched
        here (the caller writes condor_starter's `receiving file` prefix)."""
        if self.table is None:
            return 0, (f"FILETRANSFER:1:URL transfers are disabled by configuration.  "
                       f"Cannot transfer URL file = {url_safe(url)} .")  # fmt: skip
        count = sum(len(items) for items in self.pending.values())
        if len(url) > MAX_URL_BYTES or count >= MAX_URLS or \
                self._kept + len(url) > MAX_URL_TOTAL:  # fmt: skip
            return 0, (f"FILETRANSFER:1:too many or too long URLs (at most {MAX_URLS}, "
                       f"{MAX_URL_BYTES} bytes each, {MAX_URL_TOTAL} in all)")  # fmt: skip
        if self._effective is None:  # the job's own plugins over the node's
            self._effective = self.table.with_job_plugins(self.job_plugins) \
                if self.job_plugins and self.job_plugin_mode != IGNORE_JOB_PLUGINS \
                else self.table  # fmt: skip
        plugin = self._effective.for_url(url)
        if plugin is None:  # condor_starter: a vacate (-1001), not a hold; no URL named
            return SUBCODE_NOT_FOUND, self._stack(
                [f"FILETRANSFER:1:FILETRANSFER: plugin for type {url_method(url)} not found!"])
        self.plugins[plugin.path] = plugin
        self.pending.setdefault(plugin.path, []).append((name, url, str(target)))
        self._kept += len(url)
        return None

    def _stack(self, pushed: list[str]) -> str:
        """The error stack's text: the table's errors first pushed, newest first."""
        table = self._effective or self.table
        errors = table.errors if table is not None else []
        return capped_reason("|".join(reversed([*errors, *pushed])))

    async def fetch(self, prefix: str = "") -> tuple[list[str], tuple[int, int, str] | None]:
        """Run the plugins: (names fetched, (hold code, subcode, reason) of the
        failure, else None). As condor_starter: single-file plugins first, one run a
        URL, the first failure ending the transfer (its reason after `prefix`, the
        `STARTER at <ip> - |Error: `); then every multi-file plugin, in the order of
        their paths, their errors on one stack, the subcode the last failed one's."""
        if not self.pending:
            return [], None
        if os.geteuid() == 0:  # before any user code, never after it
            await asyncio.to_thread(give_to_user, str(self.job.sandbox), *self.job.owner)
        self.handed_over = True
        fetched: list[str] = []
        for path in sorted(p for p in self.pending if not self.plugins[p].multi_file):
            for name, url, local in self.pending[path]:
                run, output = await run_single(self.plugins[path], url, local, self.job)
                if (failed := single_failure(path, run, output)) is not None:
                    return fetched, (HOLD_DOWNLOAD_FILE_ERROR, failed[0],
                                     f"{prefix}receiving file {local}: "
                                     f"{self._stack([failed[1]])}")  # fmt: skip
                fetched.append(name)
        pushed: list[str] = []
        subcode: int | None = None
        for path in sorted(p for p in self.pending if self.plugins[p].multi_file):
            items, plugin = self.pending[path], self.plugins[path]
            failed_sub, errors = await self._run_multi(plugin, items, not pushed)
            pushed += errors
            if failed_sub is None:
                fetched += [name for name, _, _ in items]
            else:
                subcode = failed_sub
        if subcode is not None:
            return fetched, (HOLD_DOWNLOAD_FILE_ERROR, subcode, self._stack(pushed))
        return fetched, None

    async def _run_multi(self, plugin: Plugin, items: list[tuple[str, str, str]],
                         stack_empty: bool) -> tuple[int | None, list[str]]:  # fmt: skip
        path = plugin.path
        if plugin.from_job and (self.job_plugin_mode != ALLOW_JOB_PLUGINS
                                or self.job.cgroup is None):  # fmt: skip
            return SUBCODE_NOT_OPERATIONAL, [
                f"FILETRANSFER:1:user-supplied plugin {path} not allowed"]
        run = await run_plugin(plugin, [(url, local) for _, url, local in items], self.job)
        outfile = self.job.sandbox / f".{os.path.basename(path)}.out"
        results = await asyncio.to_thread(parse_result_ads, run.outfile) if run.outfile else []
        stack_empty = stack_empty and not (self._effective or self.table or PluginTable()).errors
        subcode, errors = plugin_errors(path, run, results, str(outfile), stack_empty)
        if subcode is None:
            remove_run_files(plugin, self.job.sandbox)
        return subcode, errors


# What of execd's own environment a transfer plugin gets (condor_starter passes its
# whole environment): the site's proxies and CA locations, the locale and zone.
PLUGIN_DAEMON_ENV = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy",
                     "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "ALL_PROXY", "NO_PROXY",
                     "X509_CERT_DIR", "X509_CA_FILE", "SSL_CERT_FILE", "SSL_CERT_DIR",
                     "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "LANG", "LC_ALL", "TZ")  # fmt: skip


def plugin_env(job: dict[str, object], sandbox: Path) -> dict[str, str]:
    """A transfer plugin's environment: the site's settings of execd's environment
    (PLUGIN_DAEMON_ENV), the job's ad files, its proxy if it has one."""
    env = {name: os.environ[name] for name in PLUGIN_DAEMON_ENV if name in os.environ}
    env |= {"PATH": os.defpath, "_CONDOR_JOB_AD": str(sandbox / ".job.ad"),
            "_CONDOR_MACHINE_AD": str(sandbox / ".machine.ad")}  # fmt: skip
    if (proxy := proxy_name(job)) is not None:
        env["X509_USER_PROXY"] = str(sandbox / proxy)
    return env


def job_environment(job: dict[str, object]) -> dict[str, str]:
    """The job's Environment for its plugins; one that does not parse: none (the
    job's own setup reports it)."""
    try:
        return environment_of(job)
    except JobSetupError:
        return {}


def job_url_inputs(job: dict[str, object], sandbox: Path, ids: tuple[int, int], *,
                   plugins: PluginTable | None, timeout_s: float, cgroup: JobCgroup | None,
                   job_plugin_mode: Callable[[dict[str, object]], int] | None,
                   ) -> UrlInputs:  # fmt: skip
    """A job's URL inputs: the node's plugins (None: URL transfers off) and the job's
    own (TransferPlugins, as STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS allows),
    each run as the job's user (`ids`) in `cgroup`."""
    own = job.get("TransferPlugins")
    urls = UrlInputs(plugins, PluginJob(sandbox, ids, plugin_env(job, sandbox), timeout_s,
                                        cgroup, job_environment(job)),
                     own if isinstance(own, str) else "")  # fmt: skip
    if job_plugin_mode is not None and urls.job_plugins:
        urls.job_plugin_mode = job_plugin_mode(job)
    return urls
