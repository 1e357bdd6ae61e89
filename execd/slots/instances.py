"""Named instances of a resource (GPUs, inventoried custom resources) and constraints on
them: ``Capability >= 8.0`` is evaluated against each instance's properties, and a
constraint that evaluates to a string names the ids it accepts (``"GPU-6a96bd13"``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from execd.classads import evaluate, is_true, new_ad, parse_expr


class InstanceMatcher:
    """Evaluates constraints against instance property ads, built once per instance."""

    def __init__(self, props: Mapping[str, Mapping[str, object]]) -> None:
        self._ads: dict[str, Any] = {i: new_ad(dict(p)) for i, p in props.items()}
        self._parsed: dict[str, Any] = {}

    def matches(self, constraint: str | None, instance: str) -> bool:
        if constraint is None:
            return True
        expr = self._parsed.get(constraint)
        if expr is None:
            expr = self._parsed[constraint] = parse_expr(constraint)
        ad = self._ads.get(instance)
        if ad is None:
            ad = self._ads[instance] = new_ad({"Id": instance})
        value = evaluate(expr, ad)
        if isinstance(value, str):
            return instance in {part.strip() for part in value.split(",")}
        return is_true(value)

    def pick(self, constraint: str | None, free: Iterable[str], count: int) -> list[str] | None:
        """The first ``count`` free instances satisfying the constraint, or None."""
        chosen: list[str] = []
        if count <= 0:
            return chosen
        for instance in free:
            if self.matches(constraint, instance):
                chosen.append(instance)
                if len(chosen) == count:
                    return chosen
        return None


def join_ids(ids: Sequence[str]) -> str:
    return ",".join(ids)
