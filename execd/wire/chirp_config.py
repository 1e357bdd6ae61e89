"""What a job's Chirp proxy serves: the ENABLE_CHIRP* knobs and the job ad's say-so.

As condor_starter (jic_shadow.cpp initIOProxy, recordDelayedUpdate; starter.cpp
PublishToEnv), read when the job starts, as condor_starter reads its config when it
starts for the job (a reload changes nothing for a running job's proxy; the next job
gets the new values):

- ENABLE_CHIRP = false, or ENABLE_CHIRP_IO, ENABLE_CHIRP_UPDATES and
  ENABLE_CHIRP_DELAYED all false: no proxy and no `.chirp.config` for any job.
- file I/O: the job ad's WantIOProxy, and ENABLE_CHIRP_IO;
- updates (set_job_attr, get_job_attr, ulog, version): WantRemoteUpdates where the job
  ad has it, else the file I/O grant just decided (so ENABLE_CHIRP_IO = false also
  turns off updates for a job that has only WantIOProxy), and ENABLE_CHIRP_UPDATES;
- delayed updates: unless the job ad says WantDelayedUpdates = false, and
  ENABLE_CHIRP_DELAYED; a name is kept when it matches CHIRP_DELAYED_UPDATE_PREFIX
  (names with one `*` each, any case), at most CHIRP_DELAYED_UPDATE_MAX_ATTRS names.
- A proxy is made when any of the three is granted, or for a java job.
The job's environment gets `_CHIRP_DELAYED_UPDATE_PREFIX`, the prefix knob's text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from execd.errors import ConfigError
from execd.log import get_logger

log = get_logger("wire")
T = TypeVar("T")

DEFAULT_PREFIX = "Chirp*"  # CHIRP_DELAYED_UPDATE_PREFIX's default
DEFAULT_MAX_ATTRS = 100  # CHIRP_DELAYED_UPDATE_MAX_ATTRS's default
JAVA_UNIVERSE = 10


class ChirpSettings(Protocol):
    """What ChirpConfig.from_settings reads (execd.config.Settings has it)."""

    def get_bool(self, name: str, default: bool = False, **ctx: Any) -> bool: ...
    def get_int(self, name: str, **ctx: Any) -> int | None: ...
    def get_str(self, name: str, **ctx: Any) -> str | None: ...


@dataclass(frozen=True)
class ChirpConfig:
    """The execute point's ENABLE_CHIRP* knobs, as one job's starter read them."""

    enabled: bool = True  # ENABLE_CHIRP
    io: bool = True  # ENABLE_CHIRP_IO
    updates: bool = True  # ENABLE_CHIRP_UPDATES
    delayed: bool = True  # ENABLE_CHIRP_DELAYED
    prefix: str = DEFAULT_PREFIX  # CHIRP_DELAYED_UPDATE_PREFIX, as written
    max_attrs: int = DEFAULT_MAX_ATTRS  # CHIRP_DELAYED_UPDATE_MAX_ATTRS

    @classmethod
    def from_settings(cls, settings: ChirpSettings) -> ChirpConfig:
        """The knobs as condor_starter's param() reads them (STARTER.<knob> first). A
        value that is not of its type is refused when the config is loaded; should one
        reach a job's start all the same, it counts as the default, logged, and the job
        starts (condor_starter's param_boolean EXCEPTs, and the job does not run)."""
        ctx: dict[str, Any] = {"subsystem": "STARTER"}

        def read(name: str, get: Callable[[], T], default: T) -> T:
            try:
                return get()
            except ConfigError as exc:
                log.warning("chirp_knob_invalid", knob=name, error=str(exc))
                return default

        def flag(name: str) -> bool:
            return read(name, lambda: settings.get_bool(name, True, **ctx), True)

        max_attrs = read("CHIRP_DELAYED_UPDATE_MAX_ATTRS",
                         lambda: settings.get_int("CHIRP_DELAYED_UPDATE_MAX_ATTRS", **ctx),
                         None)  # fmt: skip
        return cls(
            enabled=flag("ENABLE_CHIRP"), io=flag("ENABLE_CHIRP_IO"),
            updates=flag("ENABLE_CHIRP_UPDATES"), delayed=flag("ENABLE_CHIRP_DELAYED"),
            prefix=settings.get_str("CHIRP_DELAYED_UPDATE_PREFIX", **ctx) or "",
            max_attrs=max(0, DEFAULT_MAX_ATTRS if max_attrs is None else max_attrs),
        )  # fmt: skip

    @property
    def prefixes(self) -> tuple[str, ...]:
        """The prefix knob as a list (commas and/or spaces between names)."""
        return tuple(p for p in self.prefix.replace(",", " ").split() if p)

    def record(self) -> dict[str, Any]:
        """For the state store (a restart in place keeps what the job started with)."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: object) -> ChirpConfig | None:
        if not isinstance(record, Mapping):
            return None
        try:
            config = cls(**dict(record))
        except TypeError:
            return None
        kinds = (bool, bool, bool, bool, str, int)
        values = (config.enabled, config.io, config.updates, config.delayed, config.prefix,
                  config.max_attrs)  # fmt: skip
        return config if all(type(v) is k for v, k in zip(values, kinds, strict=True)) else None


@dataclass(frozen=True)
class ChirpGrants:
    """What one job's proxy serves."""

    io: bool
    updates: bool
    delayed: bool


def job_grants(job: Mapping[str, object], config: ChirpConfig) -> ChirpGrants | None:
    """condor_starter's initIOProxy: what the job gets; None where it gets no proxy."""
    if not config.enabled or not (config.io or config.updates or config.delayed):
        return None
    io = job.get("WantIOProxy") is True and config.io
    remote = job.get("WantRemoteUpdates")
    updates = (remote if isinstance(remote, bool) else io) and config.updates
    delayed = job.get("WantDelayedUpdates") is not False and config.delayed
    if io or updates or delayed or job.get("JobUniverse") == JAVA_UNIVERSE:
        return ChirpGrants(io, updates, delayed)
    return None


CHIRP_DEFAULTS = ChirpConfig()  # HTCondor's defaults: everything enabled
