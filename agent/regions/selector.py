"""Region routing cores (sans-I/O): endpoint health, per-call region selection, load.

(A little over 600 lines: selection, failover choice and rollout states share one region table.)

Nothing here does I/O or reads a clock: every method that depends on time takes ``now``
(seconds, any monotonic-enough origin; the server passes ``reactor.seconds()``). The
prober (:mod:`agent.regions.probe`) feeds probe outcomes in; the server and the failover
streams (:mod:`agent.speech.failover`) ask for decisions. All of it runs on one thread
(the reactor); nothing here is locked.

* :class:`RegionSpec` (:mod:`agent.regions.spec`, re-exported here) — one region of the config
  (frozen, validated on construction).
* :class:`EndpointHealth` (:mod:`agent.regions.health`, re-exported here) — one probed
  endpoint (a Riva server, or a dialogue URL).
* :class:`RegionSelector` — picks a region per call: among regions that serve every
  pinned model version and are healthy, the lowest score (smoothed RTT + load + loss
  penalties − a bonus for the caller's home region), with hysteresis per selection
  context so jitter does not flip the choice; spills to the next region when the
  preferred one is full; refuses with :class:`NoRegion` (→ SIP 503 + Retry-After) when
  no region can serve the pinned versions. Counts active streams per region, answers
  :meth:`RegionSelector.next_best` for failover, and takes model-version updates at
  runtime.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from agent.regions.health import EndpointHealth, EndpointState, HealthPolicy
from agent.regions.spec import RegionSpec, normalise_prefix

__all__ = [
    "NO_REGION_REASONS", "SELECTION_REASONS", "EndpointHealth", "EndpointState", "EndpointView", "HealthPolicy",
    "NoRegion", "RegionSelector", "RegionSpec", "RegionView", "Selection", "SelectionPolicy", "call_versions",
    "version_kind",
]

#: reasons a :class:`Selection` was made (the ``reason`` label of the selection counter)
SELECTION_REASONS = ("best", "spill", "sticky", "sticky_lost", "failover")
#: reasons of a :class:`NoRegion`
NO_REGION_REASONS = ("no_version", "unavailable", "full")


# --------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectionPolicy:
    """How region scores are formed and compared (all penalties in milliseconds)."""

    #: added to a region's score at 100 % of its capacity (proportionally below)
    load_penalty_ms: float = 50.0
    #: added at 100 % probe loss (proportionally below)
    loss_penalty_ms: float = 200.0
    #: taken off the score of the caller's home region
    home_bonus_ms: float = 20.0
    #: added while a region's endpoint has missed its last probe (not yet ejected)
    suspect_penalty_ms: float = 1000.0
    #: another region must beat the preferred one by max(hysteresis_ms, hysteresis_ratio × its score)
    hysteresis_ms: float = 15.0
    hysteresis_ratio: float = 0.2
    #: Retry-After (seconds) when no region serves the pinned versions / none is healthy / all are full
    retry_after_no_version_s: int = 30
    retry_after_unavailable_s: int = 5
    retry_after_full_s: int = 2


# --------------------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------------------


def version_kind(version: str) -> str:
    """``"asr"`` of ``"asr:conformer-en-US-2.1"`` (the text before ``:``; "" without one)."""
    kind, sep, _ = version.partition(":")
    return kind if sep else ""


def call_versions(region_versions: Iterable[str], pinned: Iterable[str]) -> frozenset[str]:
    """The model versions a call keeps for its lifetime: what it pins, and for every kind
    (asr, tts, ...) it does not pin, what the region it was first given served. Its failover
    and every stream it opens later go only to regions serving all of them, so the call
    never changes model version, pinned or not."""
    pins = frozenset(pinned)
    pinned_kinds = {version_kind(v) for v in pins}
    return pins | frozenset(v for v in region_versions if version_kind(v) not in pinned_kinds)


@dataclass(frozen=True)
class Selection:
    """Where a call's speech (and dialogue) goes."""

    region: str
    asr_endpoint: str
    tts_endpoint: str
    dialogue_endpoint: str | None
    #: the model versions the region served when it was chosen
    versions: frozenset[str]
    #: one of :data:`SELECTION_REASONS`
    reason: str
    rtt_s: float
    score_ms: float


@dataclass(frozen=True)
class NoRegion:
    """No region can take the call: answer ``503`` with ``Retry-After: retry_after_s``."""

    #: one of :data:`NO_REGION_REASONS`
    reason: str
    retry_after_s: int
    detail: str


@dataclass(frozen=True)
class EndpointView:
    address: str
    kinds: tuple[str, ...]
    state: str
    rtt_s: float | None
    loss_ratio: float
    consecutive_failures: int
    ejected_until: float | None
    ejections: int
    last_failure: str


@dataclass(frozen=True)
class RegionView:
    """A region's state at one time, for /regions and metrics."""

    name: str
    #: "up" (usable, healthy), "suspect" (usable, missed a probe), "down", "unknown"
    state: str
    up: bool
    rtt_s: float | None
    loss_ratio: float
    active_streams: int
    capacity: int
    versions: frozenset[str]
    ejected_until: float | None
    endpoints: tuple[EndpointView, ...]
    dialogue_endpoint: str | None


@dataclass
class _Status:
    usable: bool
    suspect: bool
    asr: EndpointHealth | None
    tts: EndpointHealth | None
    rtt_s: float | None
    loss_ratio: float


@dataclass
class _Context:
    preferred: str | None = None
    flips: int = 0


@dataclass
class _Region:
    spec: RegionSpec
    versions: frozenset[str]
    discovered: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    rr: int = 0
    #: rollout: takes no new calls and no failovers (its calls in progress go on)
    draining: bool = False
    #: rollout: its servers are changing model version; it serves no version the node can trust
    switching: bool = False


class RegionSelector:
    """Chooses a region per call and keeps the region state (single-threaded: the reactor).

    ``regions`` is the config; ``health`` / ``selection`` policies tune the cores. Health
    is per endpoint address and shared by every region and role that names it.
    """

    def __init__(
        self,
        regions: Iterable[RegionSpec],
        *,
        health: HealthPolicy | None = None,
        selection: SelectionPolicy | None = None,
    ) -> None:
        self.health_policy = health or HealthPolicy()
        self.policy = selection or SelectionPolicy()
        self._regions: dict[str, _Region] = {}
        self._health: dict[str, EndpointHealth] = {}
        self._active: dict[str, int] = {}
        self._contexts: dict[tuple[str, frozenset[str], bool], _Context] = {}
        #: selections by (region, reason)
        self.selections: dict[tuple[str, str], int] = {}
        #: refusals by reason
        self.refusals: dict[str, int] = {}
        #: failovers by (from_region, to_region); to_region "none" when no region was left
        self.failovers: dict[tuple[str, str], int] = {}
        #: changes of a context's preferred region from one region to another
        self.flips = 0
        self.update_regions(regions)

    # -- config ---------------------------------------------------------------------------
    def update_regions(self, regions: Iterable[RegionSpec]) -> None:
        """Replace the region config (reload): health of addresses still named is kept,
        active stream counts of regions still named are kept, versions come from the new
        specs (plus what endpoints reported). Calls already placed keep their
        :class:`Selection`."""
        specs = list(regions)
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"region names must be unique, got {names}")
        old = self._regions
        self._regions = {}
        for spec in specs:
            previous = old.get(spec.name)
            region = _Region(spec, spec.model_versions)
            if previous is not None:
                region.discovered = {k: v for k, v in previous.discovered.items() if k[1] in spec.speech_endpoints}
                region.draining, region.switching = previous.draining, previous.switching
            self._regions[spec.name] = region
            self._refresh_versions(region)
        wanted: set[str] = set()
        for spec in specs:
            wanted.update(spec.speech_endpoints)
            if spec.dialogue_endpoint:
                wanted.add(spec.dialogue_endpoint)
        self._health = {a: self._health.get(a) or EndpointHealth(a, self.health_policy) for a in sorted(wanted)}
        self._active = {s.name: self._active.get(s.name, 0) for s in specs}
        self._contexts = {k: c for k, c in self._contexts.items() if c.preferred in self._regions}

    def set_versions(self, region: str, versions: Iterable[str]) -> None:
        """Set the model versions a region's config says it serves (runtime rollout)."""
        r = self._region(region)
        r.spec = replace(r.spec, model_versions=frozenset(versions))
        self._refresh_versions(r)

    def set_discovered_versions(self, address: str, kind: str, versions: Iterable[str]) -> None:
        """Versions an endpoint reported itself (``kind`` "asr" or "tts"). A region then
        serves its configured versions plus, per kind, those every endpoint of that kind
        that reported has in common."""
        for r in self._regions.values():
            endpoints = r.spec.asr_endpoints if kind == "asr" else r.spec.tts_endpoints
            if address in endpoints:
                r.discovered[(kind, address)] = frozenset(versions)
                self._refresh_versions(r)

    # -- rollouts (driven through the admin API: agent/regions/rollout_admin.py) ----------
    def drain_region(self, region: str) -> None:
        """The region takes no new calls and no failovers; calls already in it go on (their
        new streams included), with the versions it serves."""
        self._region(region).draining = True

    def undrain_region(self, region: str) -> None:
        """Take new calls again (a drain abandoned before the switch)."""
        r = self._region(region)
        if not r.switching:
            r.draining = False

    def begin_switch(self, region: str) -> None:
        """The region's servers are about to change model version: from now on it serves no
        version (:meth:`versions` is empty, so no call keeping its versions opens a stream
        there) and what its endpoints reported is forgotten (reports come afresh from the
        new servers)."""
        r = self._region(region)
        r.draining = True
        r.switching = True
        r.discovered.clear()
        self._refresh_versions(r)

    def finish_switch(self, region: str, versions: Iterable[str]) -> None:
        """The region's servers now serve ``versions`` (its configured versions from now on):
        it takes calls again."""
        r = self._region(region)
        r.spec = replace(r.spec, model_versions=frozenset(versions))
        r.switching = False
        r.draining = False
        self._refresh_versions(r)

    def rollout_state(self, region: str) -> str:
        """"serving", "draining" (no new calls) or "switching" (no version)."""
        r = self._region(region)
        return "switching" if r.switching else "draining" if r.draining else "serving"

    def reported_versions(self, region: str) -> dict[str, frozenset[str]]:
        """What each endpoint of ``region`` reported (``"kind address"`` → versions)."""
        return {f"{k} {a}": v for (k, a), v in self._region(region).discovered.items()}

    def _refresh_versions(self, r: _Region) -> None:
        if r.switching:
            r.versions = frozenset()
            return
        versions = set(r.spec.model_versions)
        for kind in ("asr", "tts"):
            reported = [v for (k, _a), v in r.discovered.items() if k == kind]
            if reported:
                versions.update(frozenset.intersection(*reported))
        r.versions = frozenset(versions)

    def _region(self, name: str) -> _Region:
        try:
            return self._regions[name]
        except KeyError:
            raise KeyError(f"unknown region {name!r}") from None

    @property
    def region_names(self) -> tuple[str, ...]:
        return tuple(self._regions)

    def spec(self, region: str) -> RegionSpec:
        return self._region(region).spec

    def versions(self, region: str) -> frozenset[str]:
        return self._region(region).versions

    def endpoints(self) -> Mapping[str, tuple[str, ...]]:
        """Every address to probe and its roles ("asr", "tts", "dialogue")."""
        roles: dict[str, list[str]] = {}
        for r in self._regions.values():
            for a in r.spec.asr_endpoints:
                roles.setdefault(a, []).append("asr")
            for a in r.spec.tts_endpoints:
                roles.setdefault(a, []).append("tts")
            if r.spec.dialogue_endpoint:
                roles.setdefault(r.spec.dialogue_endpoint, []).append("dialogue")
        return {a: tuple(dict.fromkeys(k)) for a, k in roles.items()}

    def health(self, address: str) -> EndpointHealth:
        return self._health[address]

    # -- probe inputs (delegated to the endpoint's health) --------------------------------
    def on_probe_response(self, address: str, now: float, rtt_s: float, serving: bool = True) -> None:
        h = self._health.get(address)
        if h is not None:
            h.on_response(now, rtt_s, serving)
            if any(r.switching and address in r.spec.speech_endpoints for r in self._regions.values()):
                h.forgive_ejection(now)  # a planned restart: no escalated ejection once it answers

    def on_probe_failure(self, address: str, now: float, reason: str = "timeout") -> None:
        h = self._health.get(address)
        if h is not None:
            h.on_failure(now, reason)

    def on_status(self, address: str, now: float, serving: bool) -> None:
        h = self._health.get(address)
        if h is not None:
            h.on_status(now, serving)

    # -- load -----------------------------------------------------------------------------
    def acquire(self, region: str) -> None:
        """One more speech stream open in ``region`` (may exceed capacity: a call already
        placed keeps its streams)."""
        self._region(region)
        self._active[region] = self._active.get(region, 0) + 1

    def release(self, region: str) -> None:
        if self._active.get(region, 0) > 0:
            self._active[region] -= 1

    def active_streams(self, region: str) -> int:
        return self._active.get(region, 0)

    def is_full(self, region: str) -> bool:
        return self.active_streams(region) >= self._region(region).spec.capacity

    # -- hints ----------------------------------------------------------------------------
    def home_region(self, caller_number: str | None, source_ip: str | None) -> str | None:
        """The caller's home region: the most specific source network containing
        ``source_ip``, else the longest E.164 prefix of ``caller_number`` (digits after an
        optional ``+`` or ``00``); None when no region claims the caller."""
        if source_ip:
            try:
                ip = ipaddress.ip_address(source_ip)
            except ValueError:
                ip = None
            if ip is not None:
                best: tuple[int, str] | None = None
                for r in self._regions.values():
                    for text in r.spec.home_networks:
                        net = ipaddress.ip_network(text, strict=False)
                        if ip.version == net.version and ip in net and (best is None or net.prefixlen > best[0]):
                            best = (net.prefixlen, r.spec.name)
                if best is not None:
                    return best[1]
        if caller_number:
            number = caller_number.strip()
            if number.startswith("+"):
                digits = number[1:]
            elif number.startswith("00"):
                digits = number[2:]
            else:
                digits = number
            if digits.isdigit():
                found: tuple[int, str] | None = None
                for r in self._regions.values():
                    for prefix in r.spec.home_prefixes:
                        p = normalise_prefix(prefix)
                        if digits.startswith(p) and (found is None or len(p) > found[0]):
                            found = (len(p), r.spec.name)
                if found is not None:
                    return found[1]
        return None

    # -- status ---------------------------------------------------------------------------
    def _best_endpoint(self, r: _Region, addresses: tuple[str, ...], now: float) -> EndpointHealth | None:
        usable = [self._health[a] for a in addresses if self._health[a].state(now).usable]
        if not usable:
            return None
        healthy = [h for h in usable if h.state(now) is EndpointState.HEALTHY] or usable
        best_rtt = min(h.rtt_s or 0.0 for h in healthy)
        # instances within 20 ms of the fastest share the calls round-robin
        close = [h for h in healthy if (h.rtt_s or 0.0) <= best_rtt + 0.020]
        return close[r.rr % len(close)]

    def _status(self, r: _Region, now: float, need_dialogue: bool) -> _Status:
        asr = self._best_endpoint(r, r.spec.asr_endpoints, now)
        tts = self._best_endpoint(r, r.spec.tts_endpoints, now)
        usable = asr is not None and tts is not None
        parts = [h for h in (asr, tts) if h is not None]
        if need_dialogue and r.spec.dialogue_endpoint:
            d = self._health[r.spec.dialogue_endpoint]
            usable = usable and d.state(now).usable
            parts.append(d)
        if not usable:
            return _Status(False, False, asr, tts, None, 0.0)
        suspect = any(h.state(now) is EndpointState.SUSPECT for h in parts)
        rtt = max(h.rtt_s or 0.0 for h in parts)
        loss = max(h.loss_ratio for h in parts)
        return _Status(True, suspect, asr, tts, rtt, loss)

    def _score_ms(self, r: _Region, st: _Status, home: str | None) -> float:
        p = self.policy
        load = self.active_streams(r.spec.name) / r.spec.capacity
        score = (st.rtt_s or 0.0) * 1000.0
        score += p.load_penalty_ms * min(load, 1.0)
        score += p.loss_penalty_ms * st.loss_ratio
        if st.suspect:
            score += p.suspect_penalty_ms
        if home == r.spec.name:
            score -= p.home_bonus_ms
        return score

    # -- selection ------------------------------------------------------------------------
    def select(
        self,
        caller_number: str | None,
        source_ip: str | None,
        pinned_versions: Iterable[str] = (),
        sticky_region: str | None = None,
        *,
        now: float,
        need_dialogue: bool = False,
    ) -> Selection | NoRegion:
        """Choose the region for a new call (or a later leg carrying ``sticky_region``).

        ``pinned_versions``: model versions the call's dialplan pins; only regions serving
        all of them are considered, however far. ``need_dialogue``: the call uses the
        region's dialogue endpoint, which must then be healthy too.
        """
        pinned = frozenset(pinned_versions)
        versioned = [r for r in self._regions.values() if pinned <= r.versions and not r.draining]
        if not versioned:
            draining = [r.spec.name for r in self._regions.values() if pinned <= r.versions and r.draining]
            detail = f" (being drained: {', '.join(draining)})" if draining else ""
            return self._refuse("no_version", f"no region serves {sorted(pinned)}{detail}")
        statuses = {r.spec.name: self._status(r, now, need_dialogue) for r in versioned}
        usable = [r for r in versioned if statuses[r.spec.name].usable]
        if not usable:
            names = ", ".join(r.spec.name for r in versioned)
            return self._refuse("unavailable", f"no healthy region among {names}")
        open_ = [r for r in usable if not self.is_full(r.spec.name)]
        if not open_:
            return self._refuse("full", "every healthy region is at capacity")
        home = self.home_region(caller_number, source_ip)
        sticky_lost = False
        if sticky_region:
            sticky = next((r for r in open_ if r.spec.name == sticky_region), None)
            if sticky is not None:
                return self._choose(sticky, statuses[sticky.spec.name], home, "sticky")
            sticky_lost = True
        scores = {r.spec.name: self._score_ms(r, statuses[r.spec.name], home) for r in usable}
        ctx_key = (home or "", pinned, need_dialogue)
        ctx = self._contexts.setdefault(ctx_key, _Context())
        best = min(usable, key=lambda r: (scores[r.spec.name], r.spec.name)).spec.name
        current = ctx.preferred
        if current is None or current not in scores:
            if current is not None:
                ctx.flips += 1
                self.flips += 1
            ctx.preferred = best
        elif best != current:
            margin = max(self.policy.hysteresis_ms, self.policy.hysteresis_ratio * max(scores[best], 0.0))
            if scores[best] + margin < scores[current]:
                ctx.preferred = best
                ctx.flips += 1
                self.flips += 1
        preferred = ctx.preferred
        assert preferred is not None
        chosen = next((r for r in open_ if r.spec.name == preferred), None)
        reason = "sticky_lost" if sticky_lost else "best"
        if chosen is None:
            chosen = min(open_, key=lambda r: (scores[r.spec.name], r.spec.name))
            reason = "sticky_lost" if sticky_lost else "spill"
        return self._choose(chosen, statuses[chosen.spec.name], home, reason)

    def next_best(
        self,
        failed: Iterable[str],
        caller_number: str | None = None,
        source_ip: str | None = None,
        pinned_versions: Iterable[str] = (),
        *,
        now: float,
        need_dialogue: bool = False,
    ) -> Selection | NoRegion:
        """The best region for a call leaving ``failed`` regions mid-call (reason
        ``failover``); preferences of new calls are left alone. ``pinned_versions``: the
        versions the call keeps (:func:`call_versions`); a draining region takes no failover."""
        excluded = set(failed)
        pinned = frozenset(pinned_versions)
        versioned = [r for r in self._regions.values()
                     if pinned <= r.versions and r.spec.name not in excluded and not r.draining]
        if not versioned:
            return NoRegion("no_version", self.policy.retry_after_no_version_s, f"no other region serves {sorted(pinned)}")
        statuses = {r.spec.name: self._status(r, now, need_dialogue) for r in versioned}
        usable = [r for r in versioned if statuses[r.spec.name].usable]
        if not usable:
            return NoRegion("unavailable", self.policy.retry_after_unavailable_s, "no other healthy region")
        home = self.home_region(caller_number, source_ip)
        open_ = [r for r in usable if not self.is_full(r.spec.name)] or usable  # a running call may exceed capacity
        best = min(open_, key=lambda r: (self._score_ms(r, statuses[r.spec.name], home), r.spec.name))
        return self._choose(best, statuses[best.spec.name], home, "failover")

    def _choose(self, r: _Region, st: _Status, home: str | None, reason: str) -> Selection:
        assert st.asr is not None and st.tts is not None
        r.rr += 1
        name = r.spec.name
        self.selections[(name, reason)] = self.selections.get((name, reason), 0) + 1
        return Selection(
            region=name,
            asr_endpoint=st.asr.address,
            tts_endpoint=st.tts.address,
            dialogue_endpoint=r.spec.dialogue_endpoint,
            versions=r.versions,
            reason=reason,
            rtt_s=st.rtt_s or 0.0,
            score_ms=self._score_ms(r, st, home),
        )

    def _refuse(self, reason: str, detail: str) -> NoRegion:
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        p = self.policy
        retry = {
            "no_version": p.retry_after_no_version_s,
            "unavailable": p.retry_after_unavailable_s,
            "full": p.retry_after_full_s,
        }[reason]
        return NoRegion(reason, retry, detail)

    def record_failover(self, from_region: str, to_region: str | None) -> None:
        """Count a mid-call move (``to_region`` None: no region was left)."""
        key = (from_region, to_region or "none")
        self.failovers[key] = self.failovers.get(key, 0) + 1

    def endpoint_state(self, address: str, now: float) -> EndpointState:
        h = self._health.get(address)
        return h.state(now) if h is not None else EndpointState.UNKNOWN

    def region_rtt_s(self, region: str, now: float) -> float | None:
        r = self._regions.get(region)
        if r is None:
            return None
        return self._status(r, now, False).rtt_s

    # -- views ----------------------------------------------------------------------------
    def view(self, now: float) -> list[RegionView]:
        """Every region's state, in config order."""
        roles = self.endpoints()
        out: list[RegionView] = []
        for r in self._regions.values():
            st = self._status(r, now, False)
            addresses = list(r.spec.speech_endpoints) + ([r.spec.dialogue_endpoint] if r.spec.dialogue_endpoint else [])
            endpoint_views = []
            for a in addresses:
                h = self._health[a]
                endpoint_views.append(
                    EndpointView(
                        address=a,
                        kinds=roles.get(a, ()),
                        state=h.state(now).value,
                        rtt_s=h.rtt_s,
                        loss_ratio=h.loss_ratio,
                        consecutive_failures=h.consecutive_failures,
                        ejected_until=h.ejected_until if h.state(now) is EndpointState.EJECTED else None,
                        ejections=h.ejections,
                        last_failure=h.last_failure,
                    )
                )
            if st.usable:
                state = "suspect" if st.suspect else "up"
            elif all(self._health[a].probes == 0 for a in r.spec.speech_endpoints):
                state = "unknown"
            else:
                state = "down"
            ejected = [
                self._health[a].ejected_until
                for a in r.spec.speech_endpoints
                if self._health[a].state(now) is EndpointState.EJECTED
            ]
            loss = max((self._health[a].loss_ratio for a in r.spec.speech_endpoints), default=0.0)
            rtts = [self._health[a].rtt_s for a in r.spec.speech_endpoints if self._health[a].rtt_s is not None]
            out.append(
                RegionView(
                    name=r.spec.name,
                    state=state,
                    up=st.usable,
                    rtt_s=st.rtt_s if st.usable else (min(rtts) if rtts else None),
                    loss_ratio=st.loss_ratio if st.usable else loss,
                    active_streams=self.active_streams(r.spec.name),
                    capacity=r.spec.capacity,
                    versions=r.versions,
                    ejected_until=max((e for e in ejected if e is not None), default=None),
                    endpoints=tuple(endpoint_views),
                    dialogue_endpoint=r.spec.dialogue_endpoint,
                )
            )
        return out

