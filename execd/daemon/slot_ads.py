"""The daemon's slot ads: each slot's resource ad (execd.slots) with what the daemon adds
to it: the node's attributes, STARTD_ATTRS, benchmark and startd cron values, the policy
engine's state, activity and timers, fetch-work's and a pool claim's claimant, and last
each p-slot's roll-up of its d-slots."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execd.classads import ClassAdError, parse_expr
from execd.daemon.policy_glue import now
from execd.slots import from_config
from execd.slots.ads import add_startd_attrs
from execd.slots.rollup import publish_child_summaries

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon


def resource_ads(daemon: Daemon) -> list[Any]:
    """Slot ads from the node's resources plus what startd cron jobs publish."""
    ads = daemon.node.ads()
    cron = getattr(daemon, "cron", None)  # absent while the cron manager is being built
    published = cron.slot_attributes() if cron is not None else {}
    for ad in ads:
        _add_published(daemon, ad, published.get(str(ad["Name"]).split("@")[0], {}))
    return ads


def _add_published(daemon: Daemon, ad: Any, cron_values: dict[str, str]) -> None:
    """What the benchmarks and the slot's startd cron jobs publish into its ad."""
    benchmarks = getattr(daemon, "benchmarks", None)
    if benchmarks is not None:
        ad.update(benchmarks.result.ad_attributes())
    for name, text in cron_values.items():
        try:
            expr = parse_expr(text)
        except ClassAdError:
            continue  # the cron parser already logged the line
        value = expr.eval()
        # literals as values (so the policy engine sees them), the rest as expressions
        ad[name] = value if isinstance(value, bool | int | float | str) else expr


def one_slot_ad(daemon: Daemon, name: str, resource_ad: Any) -> Any:
    """One slot's ad as slot_ads publishes it, built from its resource ad for that slot
    alone (a job's launch: never every slot's ad): the node's attributes, STARTD_ATTRS,
    benchmarks and cron values, the policy engine's and fetch-work's attributes and a
    pool claim's claimant. Without what needs every slot: the load averages' split and
    STARTD_SLOT_ATTRS' cross-posted values."""
    resource_ad.update(daemon.node.node_attrs)
    add_startd_attrs(resource_ad, name,
                     from_config.startd_attrs(daemon.config, int(resource_ad["SlotID"])))
    cron = getattr(daemon, "cron", None)
    _add_published(daemon, resource_ad,
                   cron.slot_attributes().get(name, {}) if cron is not None else {})
    if name in daemon.engine.slots:
        resource_ad.update(daemon.engine.attributes(name, now()) | daemon.fetch.attributes(name))
    if daemon.pool is not None:
        resource_ad.update(daemon.pool.claimant(name))
    return resource_ad


def slot_ads(daemon: Daemon) -> list[Any]:
    """Slot ads with the policy engine's state, activity and timers merged in, the
    claimant of each pool claim, and last each p-slot's roll-up of its d-slots."""
    moment = now()
    ads = resource_ads(daemon)
    for ad in ads:
        name = str(ad["Name"]).split("@")[0]
        if name in daemon.engine.slots:
            ad.update(daemon.engine.attributes(name, moment) | daemon.fetch.attributes(name))
        elif "SlotBrokenReason" in ad:  # a broken d-slot kept out of use
            ad.update(State="Owner", Activity="Idle", Start=False, Requirements=False)
        if daemon.pool is not None:
            ad.update(daemon.pool.claimant(name))
    publish_child_summaries(ads, from_config.rollup_settings(daemon.config))
    return ads
