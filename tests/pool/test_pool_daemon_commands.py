"""HTCondor's own tools, pointed at `execd run`: condor_config_val reads its configuration
(as it reads condor_startd's), condor_reconfig makes it reload (administrators only),
and condor_restart -startd shuts it down gracefully, as it does condor_startd (whose
condor_master would start it again).
"""

from __future__ import annotations

import re
import signal
import tempfile

import pool_harness as harness
from test_pool_daemon import WAIT_S, administrators
from test_pool_jobs import pool_node
from test_pool_preemption import slot_ad

COLOUR = 'Colour = "red"\nSTARTD_ATTRS = Colour\n'


def verbose_value(pool: harness.Pool, address: str, name: str) -> str:
    """`condor_config_val -addr A -verbose NAME`, its file and line made neutral."""
    out = pool.tool("condor_config_val", "-addr", address, "-verbose", name).check().stdout
    return re.sub(r"# at: .*, line \d+", "# at: FILE, line N", out)


def test_condor_config_val_reconfig_and_restart_reach_execd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    reference = running_pool.get(with_startd=True)
    theirs = verbose_value(reference, str(slot_ad(reference, bool)["MyAddress"]),
                           "UPDATE_INTERVAL")  # fmt: skip
    pool = running_pool.get(with_startd=False)
    admins = administrators(pool)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, admins + COLOUR)
        try:
            address = node.address()
            # condor_config_val: values, origins and defaults as condor_startd gives them
            assert verbose_value(pool, address, "UPDATE_INTERVAL") == theirs == (
                "UPDATE_INTERVAL = 2\n # at: FILE, line N\n # raw: UPDATE_INTERVAL = 2\n"
                " # default: 300\n\n")  # fmt: skip
            plain = pool.tool("condor_config_val", "-addr", address, "Colour").check()
            assert plain.stdout == '"red"\n'
            verbose = pool.tool("condor_config_val", "-addr", address, "-v", "Colour").check()
            assert f" # at: {node.config}, line " in verbose.stdout
            assert "# default" not in verbose.stdout  # no default: no line, as condor's
            missing = pool.tool("condor_config_val", "-addr", address, "-v", "NO_SUCH_KNOB")
            assert missing.returncode == 1 and "Not defined: NO_SUCH_KNOB" in missing.stderr
            # condor_reconfig from someone else: refused, nothing reloaded
            node.config.write_text(node.config.read_text().replace('"red"', '"blue"'))
            denied = pool.tool("condor_reconfig", "-addr", address, user=harness.SUBMITTER)
            assert denied.returncode != 0, denied
            node.wait_for("pool_command_refused", timeout=WAIT_S, authz_level="ADMINISTRATOR")
            assert not [e for e in node.events() if e["event"] == "reconfig_applied"]
            # condor_reconfig from the administrator: reloaded, the new value published
            pool.tool("condor_reconfig", "-addr", address).check()
            applied = node.wait_for("reconfig_applied", timeout=WAIT_S)
            assert applied["changed"] == ["Colour"], applied
            harness.wait_for("Colour = blue in the collector", lambda: [
                ad for ad in pool.status("-slots") if ad.get("Colour") == "blue"], WAIT_S)
            # condor_restart -startd: a graceful shutdown (no condor_master restarts it)
            pool.tool("condor_restart", "-startd", "-addr", address).check()
            node.wait_for("shutdown_requested", timeout=WAIT_S, how="graceful")
            node.wait_for("execd_stopped", timeout=WAIT_S)
            assert node.proc is not None and node.proc.wait(WAIT_S) == 0
        finally:
            node.stop(signal.SIGQUIT)
