"""Loading a configuration: files -> ConfigTable -> Config with HTCondor lookups.

`load_config(path)` reads the file, then LOCAL_CONFIG_DIR (files in lexical order, names
matching LOCAL_CONFIG_DIR_EXCLUDE_REGEXP skipped) and then LOCAL_CONFIG_FILE, as
HTCondor does. Lookups fall back to execd's knob defaults (execd.config.knobs) and to
built-in facts of the host (DETECTED_CPUS, FULL_HOSTNAME, ...).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from execd.config import knobs
from execd.config.macros import Expander
from execd.config.parser import ConfigReader
from execd.config.table import ConfigTable, Definition
from execd.errors import ConfigError
from execd.machine.hostname import local_fqdn

__all__ = ["Config", "host_builtins", "load_config", "parse_config_text"]


@cache
def host_builtins() -> dict[str, str]:
    """Facts HTCondor predefines as macros, read once from the host."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except OSError:
        cpus = os.cpu_count() or 1
    memory_mb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mb = int(line.split()[1]) // 1024
    except OSError:
        pass
    full = local_fqdn()
    uname = os.uname()
    return {
        "DETECTED_CPUS": str(cpus),
        "DETECTED_CORES": str(cpus),
        "DETECTED_PHYSICAL_CPUS": str(cpus),
        "DETECTED_MEMORY": str(memory_mb),
        "FULL_HOSTNAME": full,
        "HOSTNAME": full.split(".")[0],
        "OPSYS": "LINUX",
        "ARCH": "X86_64" if uname.machine == "x86_64" else uname.machine.upper(),
        "UNAME_ARCH": uname.machine,
        "UNAME_OPSYS": uname.sysname,
        "PID": str(os.getpid()),
        "PPID": str(os.getppid()),
        "USERNAME": _username(),
        "TILDE": str(Path.home()),
        "EXECD_STATE_DIR": "/var/lib/execd"
        if os.geteuid() == 0
        else str(Path.home() / ".local" / "state" / "execd"),
    }


def _username() -> str:
    import pwd  # noqa: PLC0415  (POSIX only; config is otherwise portable)

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


class Config:
    """A loaded configuration: lookups, expansion and origins."""

    def __init__(
        self,
        table: ConfigTable,
        *,
        files: list[str] | None = None,
        warnings: list[str] | None = None,
        builtins: Mapping[str, str] | None = None,
    ) -> None:
        self.table = table
        self.files = files or []
        self.warnings = warnings or []
        self.builtins = dict(host_builtins() if builtins is None else builtins)

    # -- lookups ----------------------------------------------------------------
    def default(self, name: str) -> str | None:
        key = name.upper()
        if key in self.builtins:
            return self.builtins[key]
        return knobs.default_text(key)

    def definition(
        self,
        name: str,
        *,
        subsystem: str | None = "STARTD",
        local_name: str | None = None,
        slot: int | None = None,
        slot_type: int | None = None,
    ) -> Definition | None:
        return self.table.find(
            name, subsystem=subsystem, local_name=local_name, slot=slot, slot_type=slot_type
        )

    def raw(self, name: str, subsystem: str | None = "STARTD") -> str | None:
        """NAME's value as written (or its default), unexpanded."""
        found = self.definition(name, subsystem=subsystem)
        return found.raw if found is not None else self.default(name)

    def _expander(self, subsystem: str | None, local_name: str | None, slot: int | None,
                  slot_type: int | None) -> Expander:
        def resolve(ref: str) -> str | None:
            found = self.table.find(
                ref, subsystem=subsystem, local_name=local_name, slot=slot, slot_type=slot_type
            )
            if found is not None:
                return found.raw
            if ref.upper() == "SUBSYSTEM":
                return subsystem or ""
            return self.default(ref)

        return Expander(resolve, self.table.env)

    def get(
        self,
        name: str,
        subsystem: str | None = "STARTD",
        slot: int | None = None,
        slot_type: int | None = None,
        *,
        local_name: str | None = None,
    ) -> str | None:
        """The expanded value of NAME in this context, or None if it has none."""
        return self._expander(subsystem, local_name, slot, slot_type).expand_name(name)

    def expand(
        self,
        text: str,
        *,
        subsystem: str | None = "STARTD",
        local_name: str | None = None,
        slot: int | None = None,
        slot_type: int | None = None,
    ) -> str:
        return self._expander(subsystem, local_name, slot, slot_type).expand(text)

    def names(self) -> list[str]:
        """Every name the files define, as first spelled."""
        return [d.name for d in self.table]

    def is_defined(self, name: str) -> bool:
        return name.upper() in self.table


def _reader(env: Mapping[str, str] | None, base: Config | None) -> tuple[ConfigTable, ConfigReader]:
    table = ConfigTable(env=dict(os.environ if env is None else env))
    if base is not None:
        table.definitions.update(base.table.definitions)
    builtins = host_builtins()

    def defaults(name: str) -> str | None:
        key = name.upper()
        return builtins[key] if key in builtins else knobs.default_text(key)

    return table, ConfigReader(table, defaults)


def parse_config_text(
    text: str,
    *,
    filename: str = "<string>",
    env: Mapping[str, str] | None = None,
    base: Config | None = None,
) -> Config:
    """A Config from text (no LOCAL_CONFIG_* processing)."""
    table, reader = _reader(env, base)
    reader.read_text(text, filename)
    return _named_host(Config(table, files=[filename], warnings=reader.warnings))


def load_config(
    path: Path, *, env: Mapping[str, str] | None = None, local_config: bool = True
) -> Config:
    """Read the config file at PATH, then its LOCAL_CONFIG_DIR and LOCAL_CONFIG_FILE."""
    table, reader = _reader(env, None)
    reader.read_file(Path(path))
    config = Config(table, files=reader.files_read, warnings=reader.warnings)
    if local_config:
        _read_local(config, reader)
        config.files = reader.files_read
    return _named_host(config)


def _named_host(config: Config) -> Config:
    """FULL_HOSTNAME and HOSTNAME under the files' NETWORK_HOSTNAME and
    DEFAULT_DOMAIN_NAME, as HTCondor names the host again once its files are read."""
    network = config.get("NETWORK_HOSTNAME") or None
    domain = config.get("DEFAULT_DOMAIN_NAME") or None
    if network or domain:
        full = local_fqdn(network, domain)
        config.builtins.update(FULL_HOSTNAME=full, HOSTNAME=full.split(".")[0])
    return config


def _split_list(text: str | None) -> list[str]:
    return [p for p in re.split(r"[\s,]+", text or "") if p]


def _read_local(config: Config, reader: ConfigReader) -> None:
    exclude_text = config.get("LOCAL_CONFIG_DIR_EXCLUDE_REGEXP", subsystem=None) or ""
    try:
        exclude = re.compile(exclude_text) if exclude_text else None
    except re.error as exc:
        raise ConfigError(f"LOCAL_CONFIG_DIR_EXCLUDE_REGEXP is not a valid regex: {exc}") from None
    origin = _origin_text(config, "LOCAL_CONFIG_DIR")
    for directory in _split_list(config.get("LOCAL_CONFIG_DIR", subsystem=None)):
        path = Path(directory)
        if not path.is_dir():
            continue  # a missing config.d is normal
        try:
            entries = sorted(path.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            raise ConfigError(
                f"cannot list LOCAL_CONFIG_DIR {path}: {exc.strerror}", origin
            ) from None
        for entry in entries:
            if entry.is_file() and not (exclude and exclude.match(entry.name)):
                reader.read_file(entry, origin=origin)
    origin = _origin_text(config, "LOCAL_CONFIG_FILE")
    for name in _split_list(config.get("LOCAL_CONFIG_FILE", subsystem=None)):
        reader.read_file(Path(name), origin=origin)


def _origin_text(config: Config, name: str) -> str | None:
    found = config.definition(name, subsystem=None)
    return str(found.origin) if found is not None else None

