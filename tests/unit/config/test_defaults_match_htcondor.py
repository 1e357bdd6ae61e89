"""Every knob execd reads that is HTCondor's (not marked `ours`) has HTCondor 25.x's
default: the value htcondor2's `param` gives the STARTD subsystem on an empty config
(LOCAL_DIR pinned).

Knobs whose default is not in HTCondor's param table (param gives None) but written in
condor_startd's or condor_starter's code are listed in CODE_DEFAULTS with the source
file that holds the default; the test checks they are still absent from the table.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from execd.classads import ClassAdError, evaluate, parse_expr
from execd.config.knobs import Kind, Knob, all_knobs, registry
from execd.config.loader import load_config
from execd.config.settings import Settings
from execd.policy.config import EXPRESSION_DEFAULTS, NUMBER_DEFAULTS
from execd.slots.requests import DEFAULT_MODIFY_REQUEST_EXPRS
from tests.unit.config.htcondor_reader import typed_reference_values

# Knob -> the default in HTCondor 25.x's code (src/ of htcondor/htcondor, V25_X).
CODE_DEFAULTS: dict[str, Any] = {
    # condor_utils/proc_family_direct_cgroup_v2.cpp: param_boolean(..., false)
    "CGROUP_USE_PEAK_MEMORY": False,
    "UPDATE_OFFSET": 0,  # condor_startd.V6/ResMgr.cpp: param_integer("UPDATE_OFFSET", 0, 0)
    # condor_utils/file_transfer.cpp: param_integer("FILETRANSFER_PLUGIN_CLASSAD_TIMEOUT", 20)
    "FILETRANSFER_PLUGIN_CLASSAD_TIMEOUT": 20,
    # condor_startd.V6/ResMgr.cpp: configInsert(..., ATTR_MAX_JOB_RETIREMENT_TIME, false);
    # undefined is no retirement
    "MAXJOBRETIREMENTTIME": 0,
    # condor_starter.V6.1/job_info_communicator.cpp: param_integer(..., 300, 1)
    "STARTER_UPDATE_INTERVAL": 300,
    "RANK": "0.0",  # condor_startd.V6/ResMgr.cpp: configInsert(ATTR_RANK, false); undefined ranks 0
    # condor_startd.V6/Resource.cpp: eval_expr("START_BACKFILL", false, false) and the same
    # for EVICT_BACKFILL
    "START_BACKFILL": "False",
    "EVICT_BACKFILL": "False",
    "RESERVED_DISK": 0,  # condor_sysapi/reconfig.cpp: param_integer("RESERVED_DISK", 0, ...)
    # condor_startd.V6/slot_builder.cpp: param_boolean("SLOT_TYPE_0_PARTITIONABLE", true)
    "SLOT_TYPE_0_PARTITIONABLE": True,
    # condor_startd.V6/Resource.cpp: param_boolean("ADVERTISE_PSLOT_ROLLUP_INFORMATION", true)
    "ADVERTISE_PSLOT_ROLLUP_INFORMATION": True,
    # condor_startd.V6/ResAttributes.cpp: param_boolean("STARTD_JOB_HAS_REQUEST_ATTRS", false)
    "STARTD_JOB_HAS_REQUEST_ATTRS": False,
    # condor_starter.V6.1/job_info_communicator.cpp: default_allow is true but on Windows
    "STARTER_ALLOW_RUNAS_OWNER": True,
    # condor_starter.V6.1/starter.cpp: param_boolean("ENABLE_PEEK_JOB", true, true, ...)
    "ENABLE_PEEK_JOB": "True",
    # condor_starter.V6.1/starter.cpp (startSSHD): the ssh knobs' defaults in its param()s
    "SSH_TO_JOB_SSHD": "/usr/sbin/sshd",
    "SSH_TO_JOB_SSHD_ARGS": '"-i -e -f %f"',
    "SSH_TO_JOB_SSH_KEYGEN": "/usr/bin/ssh-keygen",
    "SSH_TO_JOB_SSH_KEYGEN_ARGS": '"-N \'\' -C \'\' -q -f %f -t rsa"',
    # condor_starter.V6.1/starter.cpp: param_boolean("AUTO_SET_NVIDIA_VISIBLE_DEVICES", true)
    "AUTO_SET_NVIDIA_VISIBLE_DEVICES": True,
    "FetchWorkDelay": "300",  # condor_startd.V6/Resource.cpp: evalNextFetchWorkDelay, 300
    # condor_utils/cron_job_mgr.cpp: Lookup("MAX_JOB_LOAD", m_max_job_load, 0.1, ...)
    "STARTD_CRON_MAX_JOB_LOAD": 0.1,
    # condor_utils/cron_job.cpp: param_boolean("<name>_CRON_LOG_NON_ZERO_EXIT", false)
    "STARTD_CRON_LOG_NON_ZERO_EXIT": False,
    # condor_io/condor_ipverify.cpp fill_table: param_boolean("USE_POOL_USERNAME_EQUIVALENT",
    # true)
    "USE_POOL_USERNAME_EQUIVALENT": True,
    # condor_startd.V6/ResMgr.cpp: param_boolean("IS_LOCAL_STARTD", false)
    "IS_LOCAL_STARTD": False,
    # condor_utils/classadHistory.cpp InitJobHistoryFile: param_longlong("MAX_HISTORY_LOG",
    # ..., 20 * 1024 * 1024), param_integer("MAX_HISTORY_ROTATIONS", 2, 1),
    # param_boolean("ROTATE_HISTORY_DAILY", false) and ("ROTATE_HISTORY_MONTHLY", false)
    "MAX_HISTORY_LOG": 20 * 1024 * 1024,
    "MAX_HISTORY_ROTATIONS": 2,
    "ROTATE_HISTORY_DAILY": False,
    "ROTATE_HISTORY_MONTHLY": False,
}


def compared() -> list[Knob]:
    """HTCondor's plain knobs; those execd leaves unset must be unset in HTCondor too."""
    return [k for k in all_knobs() if not k.is_pattern and not k.ours]


# LOCAL_DIR's default is execd's own (knobs.py says why); pinned so that the knobs
# defined under it (EXECUTE, LOG, ETC, SEC_PASSWORD_DIRECTORY, ...) are compared.
PINNED = "LOCAL_DIR = /pinned/local\n"


@pytest.fixture(scope="module")
def empty_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("defaults") / "condor_config"
    path.write_text(PINNED)
    return path


@pytest.fixture(scope="module")
def theirs(empty_config: Path) -> dict[str, Any]:
    return typed_reference_values(empty_config, [k.name for k in compared()], "STARTD")


@pytest.fixture(scope="module")
def settings(empty_config: Path) -> Settings:
    return Settings(load_config(empty_config, env={}))


def execd_value(settings: Settings, knob: Knob, like: Any) -> Any:
    """execd's default for KNOB, in the form of LIKE (HTCondor's value)."""
    if isinstance(like, bool):
        return settings.get_bool(knob.name)
    if isinstance(like, int):
        return settings.get_int(knob.name)
    if isinstance(like, float):
        return settings.get_float(knob.name)
    text = settings.get_str(knob.name)
    if text is not None and isinstance(like, str) and knob.kind is Kind.EXPR:
        return str(parse_expr(text))
    return text


def canonical(knob: Knob, value: Any) -> Any:
    if isinstance(value, str) and knob.kind is Kind.EXPR:
        return str(parse_expr(value))
    if isinstance(value, str) and knob.kind is Kind.MACRO:
        with contextlib.suppress(ClassAdError):  # most macros are expression fragments
            return str(parse_expr(value))
    if isinstance(value, str):
        return " ".join(value.split()) or None
    return value


@pytest.mark.parametrize("knob", compared(), ids=lambda k: k.name)
def test_default_is_htcondors(knob: Knob, theirs: dict[str, Any], settings: Settings) -> None:
    reference = theirs[knob.name]
    if knob.name in CODE_DEFAULTS:
        assert reference is None, f"{knob.name} now has a param-table default {reference!r}"
        reference = CODE_DEFAULTS[knob.name]
    mine = execd_value(settings, knob, reference)
    if reference is None:  # unset in HTCondor: execd's default must say nothing either
        assert canonical(knob, mine) is None, f"HTCondor leaves {knob.name} unset"
        return
    assert canonical(knob, mine) == canonical(knob, reference)


# The policy engine and the request modifier carry their own copies of some defaults
# (they are built without a config in unit tests): the same values as the knob table.
ENGINE_DEFAULTS = [
    *[(n, t) for n, t in EXPRESSION_DEFAULTS.items() if (k := registry().get(n.upper()))
      and k.default is not None],
    *[(n, str(v)) for n, v in NUMBER_DEFAULTS.items()],
    *[(f"MODIFY_REQUEST_EXPR_REQUEST{r.upper()}", t)
      for r, t in DEFAULT_MODIFY_REQUEST_EXPRS.items()],
]


@pytest.mark.parametrize(("name", "text"), ENGINE_DEFAULTS, ids=[n for n, _ in ENGINE_DEFAULTS])
def test_built_in_copies_of_defaults_are_the_knob_tables(
    name: str, text: str, settings: Settings
) -> None:
    knob = registry()[name.upper()]
    if knob.kind in (Kind.INT, Kind.FLOAT):
        assert settings.get_float(name) == evaluate(text)
    else:
        assert str(parse_expr(settings.get_str(name) or "")) == str(parse_expr(text))
