"""`execd status`: this node's slots, shown the way condor_status shows a machine.

Without a running daemon, ``--local`` computes the ads from configuration and hardware
detection alone: what the node would advertise if execd started now.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from execd.classads import ClassAdError, ad_from_json, ad_to_json
from execd.cli.common import control_socket, load
from execd.config.loader import Config
from execd.daemon.client import ControlClient, DaemonUnavailableError
from execd.daemon.control import ControlError
from execd.errors import ConfigError, ResourceError
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.facts import MachineLoad
from execd.machine.idle import detect_idle
from execd.machine.load import SlotLoadInput, read_total_load_avg, split_load
from execd.machine.reader import HostReader, LiveHostReader
from execd.slots import from_config
from execd.slots.layout import build_layout
from execd.slots.node import NodeSlots
from execd.slots.rollup import publish_child_summaries
from execd.slots.status_view import format_autoformat, format_long, format_table, select


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status",
        help="show this node's slots, as condor_status shows a machine",
        description="Show this node's slot ads. Without a running daemon use --local.",
    )
    p.add_argument("--local", action="store_true",
                   help="compute the ads from configuration and detection, no daemon needed")
    p.add_argument("-long", "--long", "-l", dest="long", action="store_true",
                   help="print whole ads")
    p.add_argument("-af", "-autoformat", "--af", dest="autoformat", nargs="+", metavar="ATTR",
                   help="print only these attributes (or expressions), one slot per line")
    p.add_argument("-json", "--json", dest="json", action="store_true",
                   help="print the ads as a JSON list, in HTCondor's JSON ClassAd form")
    p.add_argument("-constraint", "--constraint", metavar="EXPR",
                   help="only slots for which this ClassAd expression is true")
    p.set_defaults(func=run)


def _existing_ancestor(reader: HostReader, path: str) -> str:
    current = os.path.abspath(path)
    while reader.free_disk_kb(current) is None and current != "/":
        current = os.path.dirname(current)
    return current


def local_ads(
    config: from_config.ConfigLookup,
    reader: HostReader,
    *,
    now: int,
    defined_names: Iterable[str] = (),
    hostname: str | None = None,
) -> list[Any]:
    """Detect, lay out and build the ads; ConfigError/ResourceError when that fails."""
    params = from_config.detection_params(config, defined_names, hostname=hostname)
    if reader.free_disk_kb(params.execute_dir) is None:
        # The daemon creates EXECUTE; before the first start, show the disk it would have.
        parent = _existing_ancestor(reader, params.execute_dir)
        print(f"execd status: note: EXECUTE {params.execute_dir} does not exist yet; "
              f"showing the free space of {parent}", file=sys.stderr)
        params = DetectionParams(**{**params.__dict__, "execute_dir": parent})
    facts = detect_machine(reader, params)
    node = NodeSlots(facts, build_layout(from_config.slot_type_inputs(config), facts))
    idle = detect_idle(reader, since=now)
    load = MachineLoad(total_load_avg=read_total_load_avg(reader),
                       keyboard_idle=idle.keyboard_idle, console_idle=idle.console_idle)
    policies = {d.name: from_config.idle_policy(config, d.slot_id, now) for d in node.definitions}
    # no jobs yet: all of the machine's load is owner load, split as seed 000 describes
    slots = [SlotLoadInput(res.name, 0.0) for res in node.resources()]
    ads = node.build_ads(
        now=now,
        machine_load=load,
        load_for=split_load(load.total_load_avg, slots),
        policy_for=lambda name: policies[name.split("_")[0]],
        startd_attrs_for=lambda slot_id: from_config.startd_attrs(config, slot_id),
        slot_attrs=from_config.startd_slot_attrs(config),
    )
    publish_child_summaries(ads, from_config.rollup_settings(config))
    return ads


def render(ads: list[Any], args: argparse.Namespace) -> str:
    chosen = select(ads, args.constraint)
    if args.autoformat:
        return format_autoformat(chosen, args.autoformat)
    if args.json:
        ordered = sorted(chosen, key=lambda ad: str(ad.get("Name", "")))
        return json.dumps([ad_to_json(ad) for ad in ordered], indent=2)
    if args.long:
        return format_long(chosen)
    return format_table(chosen) if chosen else ""


def _load_config(args: argparse.Namespace) -> tuple[Config, list[str]]:
    config, _settings = load(args)
    return config, config.names()


def run(args: argparse.Namespace) -> int:
    if not args.local:
        return _live(args)
    try:
        config, defined = _load_config(args)
        ads = local_ads(config, LiveHostReader(), now=int(time.time()), defined_names=defined)
        text = render(ads, args)
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    except (ConfigError, ResourceError, ClassAdError) as exc:
        print(f"execd status: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _live(args: argparse.Namespace) -> int:
    """Ask the running daemon for its ads."""
    try:
        with ControlClient(control_socket(args)) as client:
            reply = client.call("status", {"constraint": args.constraint}
                                if args.constraint else {})
    except DaemonUnavailableError as exc:
        print(f"execd status: {exc.message}.\n"
              "Use `execd status --local` to see what this node would advertise, computed "
              "from its configuration and hardware.", file=sys.stderr)
        return 1
    except (ConfigError, ControlError) as exc:
        print(f"execd status: error: {exc}", file=sys.stderr)
        return 1
    try:
        ads = [ad_from_json(ad) for ad in reply["ads"]]
    except ClassAdError as exc:
        print(f"execd status: error: the daemon's reply: {exc}", file=sys.stderr)
        return 1
    args.constraint = None  # applied by the daemon
    text = render(ads, args)
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0
