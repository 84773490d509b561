"""Health of one probed region endpoint (sans-I/O): fed probe outcomes with their times.

:class:`EndpointHealth` keeps the smoothed RTT (EWMA), loss over the last ``loss_window``
probes, consecutive failures and successes, outlier ejection with exponential backoff and
re-admission after successes (in the spirit of Envoy's outlier detection), and the last
``grpc.health.v1`` status (NOT_SERVING takes an endpoint out at once). Nothing here reads a
clock: every input carries ``now``.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class HealthPolicy:
    """How probe outcomes turn into endpoint health (defaults: 4 probes per second)."""

    #: weight of a new RTT sample in the smoothed RTT
    rtt_alpha: float = 0.2
    #: probes in the loss window (20 probes = 5 s at 250 ms)
    loss_window: int = 20
    #: consecutive failures that eject an endpoint (the first failure already makes it suspect)
    eject_after_failures: int = 3
    #: loss ratio over a full window that ejects an endpoint
    eject_loss_ratio: float = 0.5
    #: consecutive successes an ejected endpoint needs, after its ejection time, to come back
    readmit_after_successes: int = 2
    #: first ejection lasts this long; each further ejection doubles it, up to max_ejection_s
    base_ejection_s: float = 1.0
    max_ejection_s: float = 30.0
    #: every this long of health after a re-admission takes one doubling off the next ejection
    ejection_decay_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0.0 < self.rtt_alpha <= 1.0:
            raise ValueError(f"rtt_alpha must be in (0, 1], got {self.rtt_alpha}")
        if self.loss_window < 1 or self.eject_after_failures < 1 or self.readmit_after_successes < 1:
            raise ValueError("loss_window, eject_after_failures and readmit_after_successes must be at least 1")
        if self.base_ejection_s <= 0 or self.max_ejection_s < self.base_ejection_s:
            raise ValueError("base_ejection_s must be positive and max_ejection_s at least base_ejection_s")


class EndpointState(enum.Enum):
    UNKNOWN = "unknown"  # never answered a probe
    HEALTHY = "healthy"
    SUSPECT = "suspect"  # missed its last probe(s), not ejected yet: avoided when possible
    EJECTED = "ejected"  # outlier: out until its ejection time has passed and it answered again
    NOT_SERVING = "not_serving"  # grpc.health.v1 said NOT_SERVING (or SERVICE_UNKNOWN)

    @property
    def usable(self) -> bool:
        return self in (EndpointState.HEALTHY, EndpointState.SUSPECT)


class EndpointHealth:
    """Health of one probed endpoint, fed with probe outcomes and their times."""

    def __init__(self, address: str, policy: HealthPolicy | None = None) -> None:
        self.address = address
        self.policy = policy or HealthPolicy()
        #: smoothed round-trip time of successful probes (None before the first answer)
        self.rtt_s: float | None = None
        self.last_rtt_s: float | None = None
        self._window: deque[bool] = deque(maxlen=self.policy.loss_window)
        self.consecutive_failures = 0
        self.consecutive_successes = 0
        #: last grpc.health.v1 status: None unknown, True SERVING, False NOT_SERVING
        self.serving: bool | None = None
        self.ejected_until: float | None = None
        self.ejections = 0
        self._level = 0
        self._readmitted_at: float | None = None
        self.last_ok_at: float | None = None
        self.last_failure_at: float | None = None
        self.last_failure: str = ""
        self.probes = 0

    # -- inputs ---------------------------------------------------------------------------
    def on_response(self, now: float, rtt_s: float, serving: bool = True) -> None:
        """A probe was answered after ``rtt_s``; ``serving`` is its health status."""
        self.probes += 1
        self._window.append(True)
        self.last_rtt_s = rtt_s
        a = self.policy.rtt_alpha
        self.rtt_s = rtt_s if self.rtt_s is None else (1.0 - a) * self.rtt_s + a * rtt_s
        self.consecutive_failures = 0
        self.consecutive_successes += 1
        self.last_ok_at = now
        self.serving = serving
        if (
            self.ejected_until is not None
            and now >= self.ejected_until
            and self.consecutive_successes >= self.policy.readmit_after_successes
        ):
            self.ejected_until = None
            self._readmitted_at = now

    def on_failure(self, now: float, reason: str = "timeout") -> None:
        """A probe failed (timed out, connection refused, ...)."""
        self.probes += 1
        self._window.append(False)
        self.consecutive_successes = 0
        self.consecutive_failures += 1
        self.last_failure_at = now
        self.last_failure = reason
        p = self.policy
        window_full = len(self._window) == self._window.maxlen
        outlier = self.consecutive_failures >= p.eject_after_failures or (
            window_full and self.loss_ratio >= p.eject_loss_ratio
        )
        if outlier and (self.ejected_until is None or now >= self.ejected_until):
            self._eject(now)

    def forgive_ejection(self, now: float) -> None:
        """The endpoint was restarted on purpose (a rollout switching its region): once it has
        answered ``readmit_after_successes`` probes in a row as serving, it is back at once and
        its ejection backoff starts afresh (the restart's failures say nothing of flapping)."""
        if self.serving and self.consecutive_successes >= self.policy.readmit_after_successes:
            if self.ejected_until is not None:
                self.ejected_until = None
                self._readmitted_at = now
            self._level = 0

    def on_status(self, now: float, serving: bool) -> None:
        """A pushed ``grpc.health.v1`` status (Watch): NOT_SERVING takes effect at once."""
        self.serving = serving

    def _eject(self, now: float) -> None:
        p = self.policy
        if self._readmitted_at is not None and p.ejection_decay_s > 0:
            healthy_for = max(0.0, now - self._readmitted_at)
            self._level = max(0, self._level - int(healthy_for // p.ejection_decay_s))
        self._level += 1
        self.ejections += 1
        self._readmitted_at = None
        self.ejected_until = now + min(p.max_ejection_s, p.base_ejection_s * 2 ** (self._level - 1))

    # -- outputs --------------------------------------------------------------------------
    @property
    def loss_ratio(self) -> float:
        """Share of failed probes in the loss window (0 before the first probe)."""
        if not self._window:
            return 0.0
        return self._window.count(False) / len(self._window)

    def state(self, now: float) -> EndpointState:
        if self.serving is False:
            return EndpointState.NOT_SERVING
        if self.ejected_until is not None:
            readmittable = (
                now >= self.ejected_until and self.consecutive_successes >= self.policy.readmit_after_successes
            )
            if not readmittable:
                return EndpointState.EJECTED
        if self.rtt_s is None or self.serving is None:
            return EndpointState.UNKNOWN
        if self.consecutive_failures > 0:
            return EndpointState.SUSPECT
        return EndpointState.HEALTHY
