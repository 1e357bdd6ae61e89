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
0o777: execd/wire/filetransfer.py); before the first plugin runs, the rest of the
sandbox (itself, the job ad files) is handed over too, walked by directory fds
(execd/starter/sandbox.py give_to_user), so that no walk as root follows any user code
(`handed_over`). Each run is in a cgroup of its own, killed whole after it: nothing
a plugin starts outlives it. Without a cgroup (no cgroup v2 delegation) the job's own
plugins are refused as STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS = true refuses
them (subcode -1002, "user-supplied plugin P not allowed"); the node's (the admin's)
still run, killed by session.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

from execd.starter.sandbox import give_to_user
from execd.wire.plugin_runner import (
    PluginJob,
    remove_run_files,
    run_plugin,
    run_single,
)
from execd.wire.transfer_plugins import (
    HOLD_DOWNLOAD_FILE_ERROR,
    SUBCODE_NOT_OPERATIONAL,
    Plugin,
    PluginTable,
    parse_result_ads,
    plugin_failure,
    single_failure,
    url_method,
    url_safe,
)

CMD_DOWNLOAD_URL = 5  # TransferCommand::DownloadUrl
ALLOW_JOB_PLUGINS, IGNORE_JOB_PLUGINS = 0, 2  # FileTransfer::UserPluginDisableMode


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
    handed_over: bool = field(default=False, init=False)  # the sandbox is the user's
    # STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS for this job: 0 allow, 2 ignore
    # (the node's plugins serve), else fail. Without a cgroup: fail, whatever it says.
    job_plugin_mode: int = 0

    def add(self, name: str, url: str, target: Path) -> str | None:
        """Defer one URL; the error text when it cannot be fetched here."""
        if self.table is None:
            return (f"FILETRANSFER:1:URL transfers are disabled by configuration.  Cannot "
                    f"transfer URL file = {url_safe(url)} .")  # fmt: skip
        if self._effective is None:  # the job's own plugins over the node's
            self._effective = self.table.with_job_plugins(self.job_plugins) \
                if self.job_plugins and self.job_plugin_mode != IGNORE_JOB_PLUGINS \
                else self.table  # fmt: skip
        plugin = self._effective.for_url(url)
        if plugin is None:
            return self._with_discovery(
                f"FILETRANSFER:1:FILETRANSFER: plugin for type {url_method(url)} not found! "
                f"( URL file = {url_safe(url)} )")
        self.plugins[plugin.path] = plugin
        self.pending.setdefault(plugin.path, []).append((name, url, str(target)))
        return None

    def _with_discovery(self, reason: str) -> str:
        table = self._effective or self.table
        errors = table.errors if table is not None else []
        return "|".join([reason, *errors])

    async def fetch(self) -> tuple[list[str], tuple[int, int, str] | None]:
        """Run the plugins: (names fetched, (hold code, subcode, reason) of the first
        run that failed, else None)."""
        if not self.pending:
            return [], None
        if os.geteuid() == 0:  # before any user code, never after it
            await asyncio.to_thread(give_to_user, str(self.job.sandbox), *self.job.owner)
        self.handed_over = True
        fetched: list[str] = []
        for path, items in self.pending.items():
            plugin = self.plugins[path]
            if not plugin.multi_file:  # one run a URL, `PLUGIN URL LOCAL`
                for name, url, local in items:
                    run, output = await run_single(plugin, url, local, self.job)
                    if (failed := single_failure(path, run, output)) is not None:
                        return fetched, (HOLD_DOWNLOAD_FILE_ERROR, failed[0],
                                         f"receiving file {local}: "
                                         f"{self._with_discovery(failed[1])}")  # fmt: skip
                    fetched.append(name)
                continue
            if plugin.from_job and (self.job_plugin_mode != ALLOW_JOB_PLUGINS
                                    or self.job.cgroup is None):  # fmt: skip
                return fetched, (HOLD_DOWNLOAD_FILE_ERROR, SUBCODE_NOT_OPERATIONAL,
                                 f"FILETRANSFER:1:user-supplied plugin {path} not allowed")
            run = await run_plugin(plugin, [(url, local) for _, url, local in items], self.job)
            outfile = self.job.sandbox / f".{os.path.basename(path)}.out"
            results = parse_result_ads(run.outfile) if run.outfile else []
            failure = plugin_failure(path, run, results, str(outfile))
            if failure is None:
                missing = {local for _, _, local in items} - {r.file_name for r in results}
                if missing:  # exit 0, yet a URL has no result: not fetched
                    failure = (0, f"FILETRANSFER:1:File transfer plugin {path} reported no "
                               f"result for {len(missing)} of its files")  # fmt: skip
            if failure is not None:
                reason = self._with_discovery(failure[1])
                return fetched, (HOLD_DOWNLOAD_FILE_ERROR, failure[0], reason)
            remove_run_files(plugin, self.job.sandbox)
            fetched += [name for name, _, _ in items]
        return fetched, None

