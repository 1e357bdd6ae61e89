"""The node's name in its slot ads (Name, Machine) and FULL_HOSTNAME, found as HTCondor
daemons find it.

Each case runs the real `execd` in its own UTS and mount namespace (unshare(1), as
root): a host name of its own and an /etc/hosts of its own, bind-mounted over the real
one, so that the lookups are glibc's real ones on a known table. `execd status --local`
prints what the node would advertise. A reload that names the node anew changes nothing
until execd restarts, and says so.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.component.daemon_harness import RunningDaemon

# A common /etc/hosts shape (container images, cloud images): the loopback line naming
# localhost comes first, the host's own name on a later line of the same address.
HOSTS = "127.0.0.1 localhost\n127.0.0.1 node7.cluster.example node7\n::1 localhost\n"


def execd_in_namespace(tmp_path: Path, config: str, *args: str) -> str:
    """`execd ARGS` with the host name node7 and HOSTS as /etc/hosts."""
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    conf = tmp_path / "execd.conf"
    conf.write_text(f"NUM_CPUS = 1\nEXECUTE = {tmp_path}\n{config}")
    command = shlex.join([sys.executable, "-m", "execd", "--config", str(conf), *args])
    script = f"hostname node7 && mount --bind {shlex.quote(str(hosts))} /etc/hosts && {command}"
    done = subprocess.run(["unshare", "--mount", "--uts", "--fork", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_canonical_name_of_the_host_names_the_slots_not_the_loopbacks_first_name(
        tmp_path: Path) -> None:  # fmt: skip
    # The forward lookup of "node7" gives its line's canonical name; a reverse lookup of
    # 127.0.0.1 (Python's socket.getfqdn) would give "localhost", the same for every node.
    out = execd_in_namespace(tmp_path, "", "status", "--local", "-af", "Name", "Machine")
    assert out.split() == ["slot1@node7.cluster.example", "node7.cluster.example"]
    out = execd_in_namespace(tmp_path, "", "config-val", "FULL_HOSTNAME", "HOSTNAME",
                             "UID_DOMAIN")  # fmt: skip
    assert out.split() == ["node7.cluster.example", "node7", "node7.cluster.example"]


@pytest.mark.parametrize(("config", "full"), [
    ("NETWORK_HOSTNAME = wn12.site.example\n", "wn12.site.example"),
    ("NETWORK_HOSTNAME = wn12\nDEFAULT_DOMAIN_NAME = site.example\n", "wn12.site.example"),
    # a host name without a dot, looked up, then given the default domain
    ("DEFAULT_DOMAIN_NAME = .pool.example\n", "node7.cluster.example"),
])  # fmt: skip
def test_network_hostname_and_default_domain_name(tmp_path: Path, config: str,
                                                  full: str) -> None:  # fmt: skip
    out = execd_in_namespace(tmp_path, config, "status", "--local", "-af", "Name", "Machine")
    assert out.split() == [f"slot1@{full}", full]
    out = execd_in_namespace(tmp_path, config, "config-val", "FULL_HOSTNAME", "HOSTNAME")
    assert out.split() == [full, full.split(".", maxsplit=1)[0]]


def test_a_new_node_name_by_reload_is_said_to_need_a_restart(tmp_path: Path) -> None:
    def name(daemon: RunningDaemon) -> str:
        (ad,) = json.loads(daemon.execd("status", "-json").stdout)
        return str(ad["Name"])

    daemon = RunningDaemon(tmp_path).start()
    try:
        before = name(daemon)
        daemon.config.write_text(daemon.config_text("NETWORK_HOSTNAME = wn12.site.example\n"))
        daemon.send(signal.SIGHUP)
        warned = daemon.wait_for("reconfig_needs_restart")
        daemon.wait_for("reconfig_applied")
        after = name(daemon)
    finally:
        daemon.stop(signal.SIGQUIT)
    assert warned["reason"] == "NETWORK_HOSTNAME changed"
    assert "Machine" in warned["detail"]
    assert after == before != "slot1@wn12.site.example"
