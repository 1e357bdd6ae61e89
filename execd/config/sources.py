"""Where the configuration comes from, for every subcommand.

`--config FILE`, else $CONDOR_CONFIG (as HTCondor's tools), else
/etc/execd/execd_config, else the default shipped with execd (etc/execd/execd_config).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import execd
from execd.errors import ConfigError

SYSTEM_CONFIG = Path("/etc/execd/execd_config")
SHIPPED_CONFIG = Path(execd.__file__).resolve().parent.parent / "etc" / "execd" / "execd_config"


def find_config_file(
    cli_path: str | None,
    env: Mapping[str, str] | None = None,
    *,
    system: Path = SYSTEM_CONFIG,
    shipped: Path = SHIPPED_CONFIG,
) -> Path:
    """The config file to read; an explicitly named file that is missing is an error."""
    env = os.environ if env is None else env
    if cli_path:
        path = Path(cli_path)
        if not path.is_file():
            raise ConfigError(f"config file {path} (from --config) does not exist")
        return path
    from_env = env.get("CONDOR_CONFIG", "")
    if from_env:
        path = Path(from_env)
        if not path.is_file():
            raise ConfigError(f"config file {path} (from CONDOR_CONFIG) does not exist")
        return path
    if system.is_file():
        return system
    if shipped.is_file():
        return shipped
    raise ConfigError(
        f"no configuration found: pass --config FILE, set CONDOR_CONFIG, or create {system}"
    )
