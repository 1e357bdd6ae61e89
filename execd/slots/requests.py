"""What a job asks a partitionable slot for: its Request* attributes, passed through
MODIFY_REQUEST_EXPR_REQUEST<RES> (defaults as in HTCondor 25: quantize to 1 CPU,
128 MB, 1024 KB), and Require<Res> constraints for resources with instances."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from execd.classads import evaluate, is_undefined, parse_expr, to_number
from execd.errors import ResourceError

DEFAULT_MODIFY_REQUEST_EXPRS: dict[str, str] = {
    "Cpus": "quantize(RequestCpus, {1})",
    "Memory": "quantize(RequestMemory, {128})",
    # HTCondor's, with its CATALOG_SPACE expanded: 0 for a job without catalogs. TARGET is
    # the slot ad: a DiskQuantum there (condor_startd's LVM volumes publish one) wins.
    "Disk": 'quantize(RequestDisk - ifthenelse(MappingMethod ?: "" != "Copy", '
            "ifthenelse(RequestedCatalogs is undefined || catalogs is undefined, 0, "
            "sum(evalInEachContext(member(CatalogID, RequestedCatalogIDs) ? CatalogSize : 0, "
            "catalogs))), 0), {Target.DiskQuantum ?: 1024})",
}
# A job ad without a request gets the smallest unit, as if it had asked for it.
MISSING_REQUEST = {"Cpus": 1, "Memory": 1, "Disk": 1}


@dataclass(frozen=True)
class ResourceRequest:
    cpus: float
    memory_mb: int
    disk_kb: int
    custom: dict[str, float] = field(default_factory=dict)
    constraints: dict[str, str] = field(default_factory=dict)  # resource -> Require<Res>


class RequestModifier:
    """Parses the MODIFY_REQUEST_EXPR_* expressions once, evaluates them per job."""

    def __init__(self, exprs: Mapping[str, str] | None = None) -> None:
        merged = {**DEFAULT_MODIFY_REQUEST_EXPRS, **(exprs or {})}
        self._exprs: dict[str, Any] = {}
        for res, text in merged.items():
            if text.strip():
                self._exprs[res] = parse_expr(text)

    def _standard(self, res: str, job_ad: Any, slot_ad: Any) -> float:
        attr = f"Request{res}"
        raw = job_ad.eval(attr) if attr in job_ad else None
        if raw is None or is_undefined(raw):
            job_ad = copy.copy(job_ad)  # never change the caller's job ad
            job_ad[attr] = MISSING_REQUEST[res]
            raw = MISSING_REQUEST[res]
        asked = to_number(raw)
        if asked is None:
            raise ResourceError(f"{attr} = {raw!r} is not a number")
        if asked < 0 or math.isnan(asked):
            raise ResourceError(f"{attr} = {asked:g} is negative")
        expr = self._exprs.get(res)
        if expr is None:
            return asked
        value = to_number(evaluate(expr, job_ad, slot_ad))
        if value is None or math.isnan(value):
            raise ResourceError(
                f"MODIFY_REQUEST_EXPR_REQUEST{res.upper()} does not give a number for {attr} = "
                f"{asked:g}"
            )
        # the modified request may round up, never below what the job needs
        return max(value, asked)

    def request(
        self, job_ad: Any, slot_ad: Any = None, custom_names: Sequence[str] = ()
    ) -> ResourceRequest:
        """The job's request; ResourceError when a request is negative or not a number."""
        cpus = self._standard("Cpus", job_ad, slot_ad)
        memory = self._standard("Memory", job_ad, slot_ad)
        disk = self._standard("Disk", job_ad, slot_ad)
        custom: dict[str, float] = {}
        constraints: dict[str, str] = {}
        for name in custom_names:
            attr = f"Request{name}"
            if attr not in job_ad:
                continue
            raw = job_ad.eval(attr)
            asked = to_number(raw)
            if asked is None:
                raise ResourceError(f"{attr} = {raw!r} is not a number")
            if asked < 0 or math.isnan(asked):
                raise ResourceError(f"{attr} = {asked:g} is negative")
            custom[name] = asked
            require = f"Require{name}"
            if require in job_ad:
                constraints[name] = str(job_ad.lookup(require))
        return ResourceRequest(
            cpus=math.ceil(cpus - 1e-9) if cpus > 0 else 0,
            memory_mb=math.ceil(memory),
            disk_kb=math.ceil(disk),
            custom=custom,
            constraints=constraints,
        )
