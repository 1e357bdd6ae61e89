"""URL input files (`transfer_input_files = http://...`) through file transfer plugins,
on `execd run` and on the pool's condor_startd: the same jobs, the same outcome.

The plugins are the real ones of the pool's HTCondor (Debian's 25.x curl_plugin and
data_plugin, in the chroot). Both execute points get the same FILETRANSFER_PLUGINS:
those two and a stash_plugin that does not exist (as in Debian's default list, whose
stash_plugin is not packaged: its discovery error follows a failed run's reason).
condor_startd runs them where they are; execd runs outside the chroot, so its list
names small wrappers of the same names that start the chroot's programs with the
chroot's own dynamic loader and libraries (no chroot(2): the plugins still run as the
job's user, as execd starts them). The URLs
are served by a Python http.server on 127.0.0.1, which the chroot shares (no network
namespace of its own).
"""

from __future__ import annotations

import http.server
import pprint
import re
import signal
import tempfile
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pool_harness as harness
import pytest
from pool_node import start_node
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, submit_files
from test_pool_preemption import reference_config

PLUGINS = ("curl_plugin", "data_plugin")
MISSING = "stash_plugin"
REFERENCE = ("FILETRANSFER_PLUGINS = $(LIBEXEC)/curl_plugin, $(LIBEXEC)/data_plugin, "
             "$(LIBEXEC)/stash_plugin\n")  # fmt: skip
WRAPPER = """#!/bin/sh
R={root}
exec "$R/lib64/ld-linux-x86-64.so.2" --library-path \
"$R/lib/x86_64-linux-gnu:$R/usr/lib/x86_64-linux-gnu:$R/usr/lib" \
"$R/usr/libexec/condor/{name}" "$@"
"""
SCRIPT = """#!/bin/sh
echo "url: $(cat data.txt)"
echo "plain: $(cat plain.txt)"
ls -a | grep -c _plugin || true
"""
SUBMIT = """\
executable = job.sh
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
transfer_input_files = {inputs}
request_memory = 64
queue
"""
# The job's own multi-file plugin (transfer_plugins): condor writes the infile's ads
# one after another on one line, its attributes in any order.
JOB_PLUGIN = r"""#!/bin/sh
tr ']' '\n' < "$2" | while read -r ad; do
  url=$(echo "$ad" | sed -n 's/.*Url = "\([^"]*\)".*/\1/p')
  local=$(echo "$ad" | sed -n 's/.*LocalFileName = "\([^"]*\)".*/\1/p')
  [ -n "$url" ] || continue
  echo "job plugin got $url" > "$local"
  printf '[ TransferUrl = "%s"; TransferFileName = "%s"; TransferSuccess = true ]' \
    "$url" "$local" >> "$4"
done
"""
PLUGIN_PATH = re.compile(r"/\S*/(curl_plugin|data_plugin|stash_plugin)\b")
IP_PORT = re.compile(r"<[^>]*>|\b\d+\.\d+\.\d+\.\d+(:\d+)?\b")
SLOT = re.compile(r"\bslot\d+(_\d+)?@\S+")
SANDBOX = re.compile(r"(receiving file )/\S*/")


@pytest.fixture(scope="module")
def web() -> Iterator[str]:
    """http://127.0.0.1:PORT serving data.txt (and nothing else)."""
    with tempfile.TemporaryDirectory(prefix="execd-url-web-") as tmp:
        Path(tmp, "data.txt").write_text("fetched over http\n")
        handler = partial(http.server.SimpleHTTPRequestHandler, directory=tmp)
        handler.log_message = lambda *args: None  # type: ignore[attr-defined]
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def plugin_config() -> Iterator[str]:
    """execd's FILETRANSFER_PLUGINS: the chroot's plugins through their wrappers."""
    root = harness.Pool().root
    with tempfile.TemporaryDirectory(prefix="execd-url-plugins-") as tmp:
        Path(tmp).chmod(0o755)  # the job's user runs them
        paths = []
        for name in PLUGINS:
            path = Path(tmp, name)
            path.write_text(WRAPPER.format(root=root, name=name))
            path.chmod(0o755)
            paths.append(str(path))
        paths.append(str(Path(tmp, MISSING)))
        yield f"FILETRANSFER_PLUGINS = {', '.join(paths)}\n"


def without_box_plugin(ad: dict[str, object]) -> bool:
    """condor_startd's slot ad once it has the test's plugin list (its default list
    has box_plugin.py, gdrive_plugin.py, onedrive_plugin.py)."""
    return "box" not in str(ad.get("HasFileTransferPluginMethods", "box"))


def normalized(text: str) -> str:
    text = SANDBOX.sub(r"\1SANDBOX/", text)
    return SLOT.sub("SLOT", IP_PORT.sub("ADDR", PLUGIN_PATH.sub(r"PLUGINS/\1", text)))


def url_jobs(pool: harness.Pool, web: str) -> dict[str, object]:
    """A job with a URL input and a plain one beside it; a job whose URL 404s; the
    slot ad's plugin methods."""
    methods = [ad.get("HasFileTransferPluginMethods") for ad in pool.status("-slots")]
    good = submit_files(pool, SUBMIT.format(inputs=f"{web}/data.txt, plain.txt"),
                        {"job.sh": SCRIPT, "plain.txt": "beside it\n"})  # fmt: skip
    missing = submit_files(pool, SUBMIT.format(inputs=f"{web}/missing.txt, plain.txt"),
                           {"job.sh": SCRIPT, "plain.txt": "beside it\n"})  # fmt: skip
    own = submit_files(pool, SUBMIT.format(inputs="execdtest://anywhere/data.txt, plain.txt")
                       .replace("queue", "transfer_plugins = execdtest=myplugin.sh\nqueue"),
                       {"job.sh": SCRIPT, "plain.txt": "beside it\n",
                        "myplugin.sh": JOB_PLUGIN})  # fmt: skip
    # only its owner may read and run it: the input files are the job user's on both
    private = submit_files(pool, SUBMIT.format(inputs="execdtest://anywhere/data.txt")
                           .replace("queue", "transfer_plugins = execdtest=myplugin.sh\nqueue"),
                           {"job.sh": SCRIPT, "myplugin.sh": JOB_PLUGIN},
                           modes={"myplugin.sh": 0o700})  # fmt: skip
    # a malformed data: URL, for data_plugin (single-file in 25.x): its failure is
    # worded `STARTER at <ip> - |Error: receiving file <path>: ...` on both
    bad_data = submit_files(pool, SUBMIT.format(inputs="data://x"), {"job.sh": SCRIPT})
    log = good.wait_for_event("005", WAIT_S)
    ended = next(line.strip() for line in log.splitlines() if "termination" in line)
    missing.wait_for_event("012", WAIT_S)
    held = missing.ad()
    assert held is not None
    pool.tool("condor_rm", str(missing.cluster), user=harness.SUBMITTER)
    missing.wait_for_event("009", WAIT_S)
    bad_data.wait_for_event("012", WAIT_S)
    data_held = bad_data.ad()
    assert data_held is not None
    pool.tool("condor_rm", str(bad_data.cluster), user=harness.SUBMITTER)
    return {
        "bad data": (data_held["HoldReasonCode"], data_held["HoldReasonSubCode"],
                     normalized(data_held["HoldReason"]),
                     normalized(event_text(bad_data.user_log(), "021"))),
        "methods": methods,
        "output": good.output("out.txt"), "end": ended,
        "events": [c for c in good.events() if c != "006"],
        "held": (held["HoldReasonCode"], held["HoldReasonSubCode"]),
        "reason": normalized(held["HoldReason"]),
        # the 040s of the failure files' upload after a failed input transfer race the
        # hold on condor_startd too (test_pool_output_dirs): the others are compared
        "held events": [c for c in missing.events() if c not in ("006", "040")],
        "input transfer": [c for c in missing.events() if c == "040"][:2],
        "starter error": normalized(event_text(missing.user_log(), "021")),
        "own plugin": (own.wait_for_event("005", WAIT_S) and own.output("out.txt"),
                       [c for c in own.events() if c != "006"]),
        "own plugin 0700": (private.wait_for_event("005", WAIT_S)
                            and private.output("out.txt").splitlines()[0],
                            [c for c in private.events() if c != "006"]),
    }  # fmt: skip


def event_text(user_log: str, code: str) -> str:
    """The body of the first `code` event (its lines after the header, up to `...`)."""
    lines = user_log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{code} "))
    body = []
    for line in lines[start + 1:]:
        if line.startswith("..."):
            break
        body.append(line.strip())
    return "\n".join(body)


def test_a_reload_asks_the_plugins_again(pool: harness.Pool, plugin_config: str) -> None:
    """FILETRANSFER_PLUGINS changed and execd reloaded (SIGHUP): the slot ads advertise
    the new plugins' methods, as condor_startd asks `condor_starter -classad` again at
    a reconfig; ENABLE_URL_TRANSFERS = false then takes them away."""
    curl = plugin_config.split("=", 1)[1].split(",", maxsplit=1)[0].strip()
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), f"FILETRANSFER_PLUGINS = {curl}\n")

        def methods() -> set[object]:
            return {ad.get("HasFileTransferPluginMethods") for ad in pool.status("-slots")}

        harness.wait_for("curl's methods", lambda: methods() == {
            "dav,davs,file,ftp,http,https,s3,gs"}, WAIT_S)  # fmt: skip
        for extra, expected in ((plugin_config, "data,dav,davs,file,ftp,http,https,s3,gs"),
                                ("ENABLE_URL_TRANSFERS = false\n", None)):  # fmt: skip
            node.config.write_text(node.config.read_text() + extra)
            assert node.proc is not None
            node.proc.send_signal(signal.SIGHUP)
            node.wait_for("reconfig_applied", timeout=WAIT_S)
            harness.wait_for(f"methods {expected}", lambda e=expected: methods() == {e},
                             WAIT_S)  # fmt: skip


def test_url_input_files_as_on_condor_startd(running_pool: harness.RunningPool, web: str,
                                             plugin_config: str) -> None:  # fmt: skip
    """The same URL jobs on execd (the chroot's plugins through wrappers) and on
    condor_startd (its own): same output, exit and user-log events; the 404 held with
    the same code, subcode and reason (plugin paths, addresses and slot names made
    generic); a malformed data: URL held with the same words (data_plugin is a
    single-file plugin: `STARTER at <ip> - |Error: receiving file <path>: ...`); the
    job's own plugin, 0755 and 0700, fetching the same; the same
    HasFileTransferPluginMethods."""
    ours, theirs = on_both(running_pool, lambda pool: url_jobs(pool, web), plugin_config,
                           reference=lambda pool: reference_config(
                               pool, "95-execd-url-plugins.conf", REFERENCE,
                               without_box_plugin))
    assert ours == theirs, pprint.pformat((ours, theirs), width=120)
    assert theirs["output"] == "url: fetched over http\nplain: beside it\n0\n"
    assert theirs["end"] == "(1) Normal termination (return value 0)"
    assert theirs["held"] == (13, 256)  # TransferInputError; curl_plugin's exit 1 << 8
    assert theirs["reason"] == (
        "Transfer input files failure at execution point SLOT using protocol http. "
        "Details: The requested URL returned error: 404 ( URL file = http://ADDR/missing.txt )")
    assert theirs["starter error"] == (
        "Failed to transfer files: FILETRANSFER:1:non-zero exit (1) from PLUGINS/curl_plugin. "
        "|Error: The requested URL returned error: 404 ( URL file = http://ADDR/missing.txt )"
        "||FILETRANSFER:1:FILETRANSFER: Failed to execute PLUGINS/stash_plugin -classad: "
        "No such file or directory skipping\nCode 12 Subcode 256")
    methods = theirs["methods"]
    assert methods == ["data,dav,davs,file,ftp,http,https,s3,gs"]
    # data_plugin fails data://x; the shadow's Details start after the first |Error:
    assert theirs["bad data"][:2] == (13, 255 << 8)
    assert theirs["bad data"][3].startswith(
        "Failed to transfer files: STARTER at ADDR - |Error: receiving file SANDBOX/x: "
        "FILETRANSFER:1:non-zero exit (255) from PLUGINS/data_plugin. |Error: ")
    assert theirs["own plugin 0700"][0] == "url: job plugin got execdtest://anywhere/data.txt"
    assert theirs["own plugin"][0] == ("url: job plugin got execdtest://anywhere/data.txt\n"
                                       "plain: beside it\n0\n")

