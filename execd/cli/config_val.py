"""`execd config-val`: show configuration values, like condor_config_val."""

from __future__ import annotations

import argparse
import sys

from execd.cli.common import fail, load
from execd.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "config-val",
        help="print configuration values (like condor_config_val)",
        description="Print the expanded value of each NAME. -v also says where it was "
        "defined; -dump prints every defined name, as written.",
        prefix_chars="-",
    )
    parser.add_argument("-v", "-verbose", dest="verbose", action="store_true",
                        help="also print the file and line, and the raw value")
    parser.add_argument("-dump", dest="dump", action="store_true",
                        help="print every name the config files define")
    parser.add_argument("-raw", dest="raw", action="store_true", help="print values unexpanded")
    parser.add_argument("-expand", dest="expand", action="store_true",
                        help="with -dump: print values expanded (-dump prints them as written)")
    parser.add_argument("-subsystem", dest="subsystem", default="STARTD",
                        help="look names up as this subsystem (default STARTD)")
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config, _ = load(args, validate=False)
    except ConfigError as exc:
        return fail(exc)
    subsystem = args.subsystem or None
    if args.dump:
        return _dump(config, args, subsystem)
    if not args.names:
        print("execd config-val: name at least one NAME, or use -dump", file=sys.stderr)
        return 2
    missing = 0
    for name in args.names:
        try:
            value = config.raw(name, subsystem) if args.raw else config.get(name, subsystem)
        except ConfigError as exc:
            print(f"execd: {name}: {exc.message}", file=sys.stderr)
            missing += 1
            continue
        if value is None:
            print(f"Not defined: {name.upper()}", file=sys.stderr)
            missing += 1
            continue
        if not args.verbose:
            print(value)
            continue
        # as condor_config_val -v: the name as defined (or declared), where, and the
        # assignment as written, NAME = raw value
        definition = config.definition(name, subsystem=subsystem)
        if definition is not None:
            print(f"{definition.name} = {value}")
            print(f" # at: {definition.origin}")
            print(f" # raw: {definition.name} = {definition.raw}")
        else:
            declared = _declared_name(name)
            print(f"{declared} = {value}")
            print(" # at: <Default>")
            default = config.default(name)
            if default is not None:
                print(f" # raw: {declared} = {default}")
        print()
    return 1 if missing else 0


def _declared_name(name: str) -> str:
    """NAME spelled as the knob table declares it (StartIdleTime), else upper-case."""
    from execd.config.knobs import registry  # noqa: PLC0415  (only -v needs the table)

    knob = registry().get(name.upper())
    return knob.name if knob is not None else name.upper()


def _dump(config: object, args: argparse.Namespace, subsystem: str | None) -> int:
    """As condor_config_val -dump: each value as written (-expand: expanded); -v adds
    where, the expanded value and the default instead of the file list."""
    from execd.config.loader import Config  # noqa: PLC0415

    assert isinstance(config, Config)
    wanted = [n.upper() for n in args.names]
    print(f"# Configuration from machine: {config.get('FULL_HOSTNAME')}")
    print()
    print("# Parameters with names that match " + (", ".join(args.names) or "*") + ":")
    code = 0
    for name in sorted(config.names(), key=str.upper):
        if wanted and not any(w in name.upper() for w in wanted):
            continue
        try:
            raw = config.raw(name, subsystem)
            expanded = config.get(name, subsystem)
        except ConfigError as exc:
            print(f"# {name}: {exc.message}")
            code = 1
            continue
        print(f"{name} = {expanded if args.expand else raw}")
        if args.verbose:
            definition = config.definition(name, subsystem=subsystem)
            if definition is not None:
                print(f" # at: {definition.origin}")
            print(f" # expanded: {expanded}")
            default = config.default(name)
            if default is not None:
                print(f" # default: {default}")
    if not args.verbose:
        print("# Contributing configuration file(s):")
        for path in config.files:
            print(f"#\t{path}")
    return code
