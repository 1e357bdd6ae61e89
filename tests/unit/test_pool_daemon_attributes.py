"""The daemon-level attributes' own parts (execd/daemon/pool_daemon_attrs.py): the
starter's abilities as condor_startd lists them, the execute volume and the network
adapter read from the real kernel (and /sys's rotational flag), the p-slot's
NumDynamicSlotsTime latch, what daemon core says of execd (version, platform,
AddressV1) and the WithinResourceLimits knobs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import classad2

from execd.config.loader import load_config
from execd.config.settings import load_settings
from execd.daemon.pool_daemon_attrs import (
    DaemonAttributes,
    DynamicSlotsLatch,
    condor_platform,
    execute_volume,
    network_adapter,
    rotational,
    starter_abilities,
)
from execd.daemon.startd_stats import StartdStats
from execd.machine.facts import MachineFacts
from execd.wire.security import CONDOR_VERSION

ADDRESS = "<127.0.0.1:9618?addrs=127.0.0.1-9618>"


def test_plugin_methods_are_a_starter_ability_listed_only_with_plugins() -> None:
    """condor_starter prints HasFileTransferPluginMethods only when it has plugins; the
    startd lists it in StarterAbilityList with the other Has* attributes."""
    abilities = starter_abilities(job_networking=True, plugin_methods="data,http,https,s3,gs")
    assert abilities["HasFileTransferPluginMethods"] == "data,http,https,s3,gs"
    assert "HasFileTransferPluginMethods" in abilities["StarterAbilityList"].split(",")
    assert "HasFileTransferPluginMethods" not in starter_abilities(job_networking=True)
    assert "HasJobTransferPlugins" not in abilities  # URL transfers off (url_transfers=False)


def test_the_ability_list_names_every_has_attribute_of_the_starter() -> None:
    abilities = starter_abilities(job_networking=True)
    assert abilities["StarterAbilityList"] == (
        "HasSshd,HasReconnect,HasFileTransfer,HasTransferInputRemaps,HasJobNetworking")
    listed = abilities["StarterAbilityList"].split(",")
    assert all(name in abilities for name in listed)
    assert abilities["HasReconnect"] is True and abilities["HasTransferInputRemaps"] is True
    # no SSH_TO_JOB_SSHD given: no condor_ssh_to_job; the startd's words for no VM
    assert abilities["HasSshd"] is False and abilities["HasVM"] is False
    # abilities execd's starter lacks are absent, as condor_starter leaves them out
    assert not {"HasTDP", "HasJobDeferral", "HasOsUser", "HasPerFileEncryption",
                "HasJobTransferPlugins", "HasSelfCheckpointTransfers"} & set(abilities)


def test_has_sshd_says_whether_the_sshd_can_be_executed(tmp_path: Path) -> None:
    # as condor_starter -classad: access(SSH_TO_JOB_SSHD, X_OK)
    sshd = tmp_path / "sshd"
    assert starter_abilities(True, sshd=str(sshd))["HasSshd"] is False
    sshd.write_text("#!/bin/sh\n")
    assert starter_abilities(True, sshd=str(sshd))["HasSshd"] is False
    sshd.chmod(0o755)
    assert starter_abilities(True, sshd=str(sshd))["HasSshd"] is True


def test_jobs_in_their_own_network_namespace_have_no_networking() -> None:
    assert starter_abilities(job_networking=False)["HasJobNetworking"] is False


def test_the_execute_volume_is_the_filesystems_size_and_device(tmp_path: Path) -> None:
    df = subprocess.run(["df", "-k", "--output=size", str(tmp_path)], capture_output=True,
                        text=True, check=True).stdout.split()  # fmt: skip
    device = subprocess.run(["stat", "-c", "%d", str(tmp_path)], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    volume = execute_volume(str(tmp_path))
    assert {k: volume[k] for k in ("DetectedDisk", "ExecuteVolume")} == \
        {"DetectedDisk": int(df[-1]), "ExecuteVolume": device}  # fmt: skip
    spins = rotational(os.stat(tmp_path).st_dev)
    assert volume.get("HasRotationalScratch") == spins


def test_rotational_scratch_is_what_sys_says_of_the_device(tmp_path: Path) -> None:
    queue = tmp_path / "dev/block/8:3/queue"
    queue.mkdir(parents=True)
    (queue / "rotational").write_text("1\n")
    assert rotational(os.makedev(8, 3), str(tmp_path)) is True
    (queue / "rotational").write_text("0\n")
    assert rotational(os.makedev(8, 3), str(tmp_path)) is False
    assert rotational(os.makedev(8, 4), str(tmp_path)) is None  # /sys does not say
    assert rotational(os.makedev(0, 51), str(tmp_path)) is False  # tmpfs, overlay


def test_condor_platform_is_the_machine_execd_runs_on() -> None:
    assert condor_platform({"Arch": "X86_64", "OpSysShortName": "AlmaLinux",
                            "OpSysMajorVer": 9}) == "$CondorPlatform: X86_64-AlmaLinux_9 $"
    # a host whose os-release has no version (Debian sid): none, as HTCondor's build says
    assert condor_platform({"Arch": "X86_64", "OpSysShortName": "Debian"}) == \
        "$CondorPlatform: X86_64-Debian_ $"  # fmt: skip


def test_a_missing_execute_directory_publishes_no_volume(tmp_path: Path) -> None:
    assert execute_volume(str(tmp_path / "gone")) == {}


def test_the_adapter_of_the_loopback_address() -> None:
    assert network_adapter("127.0.0.1") == ("00:00:00:00:00:00", "255.0.0.0")


def test_an_address_no_interface_holds_has_no_adapter() -> None:
    assert network_adapter("203.0.113.77") == ("00:00:00:00:00:00", "0.0.0.0")


def test_num_dynamic_slots_time_is_when_the_count_last_changed() -> None:
    latch = DynamicSlotsLatch()
    assert latch.time("slot1", 0, 100.0) == 100  # the first value counts as a change
    assert latch.time("slot1", 0, 150.0) == 100
    assert latch.time("slot1", 1, 160.5) == 160
    assert latch.time("slot1", 1, 200.0) == 160
    assert latch.time("slot2", 1, 200.0) == 200  # per partitionable slot
    assert latch.time("slot1", 0, 300.0) == 300


def daemon_attributes(tmp_path: Path, config: str = "") -> tuple[DaemonAttributes, Any]:
    """DaemonAttributes over a daemon of two slots with `config` (real Settings)."""
    path = tmp_path / "execd.conf"
    path.write_text(config)
    facts = MachineFacts(detected_cpus=2, detected_cores=2, detected_memory_mb=512,
                         total_cpus=2, total_memory_mb=512, total_disk_kb=1_000_000,
                         total_vm_kb=4096, arch="X86_64", opsys_short_name="AlmaLinux",
                         opsys_ver=903)  # fmt: skip
    daemon = SimpleNamespace(startd_stats=StartdStats(), settings=load_settings(load_config(path)),
                             engine=SimpleNamespace(slots={"slot1": None, "slot1_1": None}),
                             paths=SimpleNamespace(execute=tmp_path),
                             node=SimpleNamespace(slots=SimpleNamespace(facts=facts)),
                             jobs=SimpleNamespace(tree=None))  # fmt: skip
    member = SimpleNamespace(daemon=daemon, address=ADDRESS,
                             config=SimpleNamespace(domain="pool.example",
                                                    filesystem_domain="fs.example"),
                             server=SimpleNamespace(open_connections=lambda: 0),
                             security=SimpleNamespace(sessions={}),
                             lookups=SimpleNamespace(plugins=None))  # fmt: skip
    return DaemonAttributes(member), daemon  # type: ignore[arg-type]


def test_an_event_counted_between_two_slot_ads_of_one_second_is_in_the_second(
        tmp_path: Path) -> None:  # fmt: skip
    attributes, daemon = daemon_attributes(tmp_path)
    pslot = classad2.ClassAd({"PartitionableSlot": True, "NumDynamicSlots": 1})
    first = attributes.for_slot("slot1", pslot)
    daemon.startd_stats.count("JobStarts")
    second = attributes.for_slot("slot1_1", classad2.ClassAd({"PartitionableSlot": False}))
    assert (first["JobStarts"], second["JobStarts"], second["RecentJobStarts"]) == ("0", "1", "1")
    assert first["TotalSlots"] == "2" and "NumDynamicSlotsTime" in first
    assert "NumDynamicSlotsTime" not in second  # a p-slot's only


def test_the_configured_knobs_are_published(tmp_path: Path) -> None:
    attributes, _ = daemon_attributes(tmp_path, "IS_LOCAL_STARTD = true\n"
                                      "UNHIBERNATE = KeyboardIdle < 60\n"
                                      "EXECD_JOB_NETWORK_NAMESPACE = true\n")  # fmt: skip
    ad = attributes.for_slot("slot1", classad2.ClassAd({"PartitionableSlot": True}))
    assert (ad["IsLocalStartd"], ad["Unhibernate"], ad["HasJobNetworking"]) == \
        ("true", "KeyboardIdle < 60", "false")  # fmt: skip
    assert ad["SubnetMask"] == '"255.0.0.0"' and ad["TimeToLive"] == str(2**31 - 1)


def test_every_slot_ad_says_what_execd_is_and_where(tmp_path: Path) -> None:
    attributes, _ = daemon_attributes(tmp_path)
    ad = attributes.for_slot("slot1", classad2.ClassAd({"PartitionableSlot": True}))
    assert ad["CondorVersion"] == f'"{CONDOR_VERSION}"'
    assert ad["CondorPlatform"] == '"$CondorPlatform: X86_64-AlmaLinux_9 $"'
    assert (ad["UidDomain"], ad["FileSystemDomain"]) == ('"pool.example"', '"fs.example"')
    assert classad2.ExprTree(ad["AddressV1"]).eval() == (
        '{[ p="primary"; a="127.0.0.1"; port=9618; n="Internet"; ], '
        '[ p="IPv4"; a="127.0.0.1"; port=9618; n="Internet"; ]}')


def test_within_resource_limits_follows_the_knobs(tmp_path: Path) -> None:
    attributes, _ = daemon_attributes(tmp_path)
    assert attributes.limits() == {"configured": None, "job_has_request_attrs": False}
    attributes, _ = daemon_attributes(tmp_path, "WithinResourceLimits = Cpus > 0\n"
                                      "STARTD_JOB_HAS_REQUEST_ATTRS = true\n")  # fmt: skip
    assert attributes.limits() == {"configured": "Cpus > 0", "job_has_request_attrs": True}


def test_job_plugins_are_advertised_with_url_transfers_and_the_knob_with_them() -> None:
    """condor_starter -classad says HasJobTransferPlugins; with
    STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS set, HasDisableUserTransferPlugins."""
    on = starter_abilities(job_networking=True, url_transfers=True)
    assert on["HasJobTransferPlugins"] is True
    assert "HasJobTransferPlugins" in on["StarterAbilityList"].split(",")
    assert "HasDisableUserTransferPlugins" not in on
    knob = starter_abilities(job_networking=True, url_transfers=True,
                             disable_job_plugins="TARGET.Owner == \"x\"")  # fmt: skip
    assert "HasDisableUserTransferPlugins" in knob["StarterAbilityList"].split(",")
