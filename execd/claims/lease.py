"""Claim leases (seed 000, 3.5.5): JobLeaseDuration, else MAX_CLAIM_ALIVES_MISSED x alive."""

from __future__ import annotations

from dataclasses import dataclass


def lease_duration(
    job_lease_duration: float | None, alive_interval: float, max_alives_missed: float
) -> float:
    """A positive JobLeaseDuration wins; 0 or unset means alives missed x alive interval."""
    if job_lease_duration is not None and job_lease_duration > 0:
        return float(job_lease_duration)
    return float(max_alives_missed * alive_interval)


@dataclass
class Lease:
    duration: float
    last_renewed: float  # monotonic seconds

    def renew(self, now: float) -> None:
        self.last_renewed = now

    def expires_at(self) -> float:
        return self.last_renewed + self.duration

    def expired(self, now: float) -> bool:
        return now >= self.expires_at()
