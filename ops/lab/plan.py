"""The lab's plan, pure: namespaces, addresses, ports, the PowerDNS zone and config, and the services.

Everything the lab starts is a :class:`Service` (argv, namespace, the log line that says it is ready).
A region's services come from the factories in :data:`REGION_SERVICES`, the lab-wide ones from
:data:`GLOBAL_SERVICES` (a region's Prometheus and the global one that federates them among them).
Addresses are fixed: every address lives inside the lab's own namespaces (the hub bridge too), so two
labs never collide; only the namespace names carry the lab's unique prefix.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from ops.lab import prometheus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PDNS_REFERENCE_CONF = os.path.join(ROOT, "ops", "pdns", "pdns.conf")

ZONE = "voice.lab."
HUB_PREFIX_LEN = 16
DNS_ADDRESS = "10.77.0.53"
SIP_PORT = 5060
#: the node's supervisor: /metrics, /healthz and /healthz/ready (what PowerDNS checks)
HEALTH_PORT = 9464
SPEECH_PORT = 50051
#: in each region namespace, the relay towards region j listens on 127.0.0.1:RELAY_BASE_PORT + j
RELAY_BASE_PORT = 50100
#: reserved: a Prometheus per region on REGION_ADDRESS:9090, the global one on DNS_ADDRESS:9091
REGION_PROMETHEUS_PORT = 9090
GLOBAL_PROMETHEUS_PORT = 9091

DEFAULT_REGIONS = ("eu-west", "us-east", "ap-south")
#: one-way delay between regions (ms), by region index pair
DEFAULT_DELAYS_MS = {(0, 1): 20.0, (1, 2): 40.0, (0, 2): 80.0}


@dataclass(frozen=True)
class RegionPlan:
    name: str
    index: int
    namespace: str
    address: str
    #: callers from this network are nearest to this region (the subnet -> region map of the zone)
    client_network: str
    #: the caller namespace's address inside client_network
    client_address: str

    @property
    def sip_uri(self) -> str:
        return f"sip:1000@{self.address}:{SIP_PORT}"

    @property
    def ready_url(self) -> str:
        return f"http://{self.address}:{HEALTH_PORT}/healthz/ready"


@dataclass(frozen=True)
class Service:
    """One process of the lab, run with ``ip netns exec NAMESPACE argv``."""

    name: str
    namespace: str
    argv: tuple[str, ...]
    #: a line of its output that says it is ready
    ready_line: str
    #: the region it belongs to ("" for lab-wide services)
    region: str = ""
    env: tuple[tuple[str, str], ...] = ()
    #: (path, text) written before it starts (e.g. a rendered prometheus.yml)
    files: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LabPlan:
    prefix: str
    run_dir: str
    region_names: tuple[str, ...] = DEFAULT_REGIONS
    workers: int = 1
    ttl_s: int = 5
    health_interval_s: int = 1
    health_timeout_s: int = 1
    delays_ms: dict[tuple[int, int], float] = field(default_factory=lambda: dict(DEFAULT_DELAYS_MS))

    def __post_init__(self) -> None:
        if not 1 <= len(self.region_names) <= 9:
            raise ValueError(f"the lab runs 1 to 9 regions, got {len(self.region_names)}")
        if len(self.prefix) > 12 or not self.prefix.replace("-", "").isalnum():
            raise ValueError(f"prefix must be at most 12 letters, digits or '-', got {self.prefix!r}")
        if self.workers < 1 or self.ttl_s < 1 or self.health_interval_s < 1 or self.health_timeout_s < 1:
            raise ValueError("workers, ttl_s, health_interval_s and health_timeout_s must be at least 1")

    # -- namespaces and addresses ---------------------------------------------------------
    @property
    def hub_ns(self) -> str:
        return f"{self.prefix}-hub"

    @property
    def dns_ns(self) -> str:
        return f"{self.prefix}-dns"

    @property
    def caller_ns(self) -> str:
        return f"{self.prefix}-caller"

    @property
    def regions(self) -> tuple[RegionPlan, ...]:
        return tuple(RegionPlan(name, i, f"{self.prefix}-{name}", f"10.77.0.{11 + i}",
                                f"10.77.{101 + i}.0/24", f"10.77.{101 + i}.10")
                     for i, name in enumerate(self.region_names))

    def region(self, name: str) -> RegionPlan:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no region {name!r} in this lab (regions: {', '.join(self.region_names)})")

    def namespaces(self) -> list[str]:
        """Every namespace, the hub first (created first, deleted last)."""
        return [self.hub_ns, self.dns_ns, self.caller_ns, *(r.namespace for r in self.regions)]

    def delay_ms(self, a: int, b: int) -> float:
        if a == b:
            return 0.0
        return self.delays_ms.get((min(a, b), max(a, b)), 50.0)

    def preference(self, region: RegionPlan) -> list[RegionPlan]:
        """Regions nearest first, seen from *region*'s client network (by inter-region delay)."""
        return sorted(self.regions, key=lambda r: (self.delay_ms(region.index, r.index), r.index))

    def region_dir(self, region: RegionPlan) -> str:
        return os.path.join(self.run_dir, region.name)

    @property
    def dns_dir(self) -> str:
        return os.path.join(self.run_dir, "dns")

    # -- files ----------------------------------------------------------------------------
    def node_config(self, region: RegionPlan) -> str:
        """The node's YAML: its own region's speech directly, the others through this namespace's relays."""
        lines = ["# regions lab: written by ops/lab/plan.py", "speech:", "  regions:"]
        for other in self.regions:
            uri = (f"{other.address}:{SPEECH_PORT}" if other.index == region.index
                   else f"127.0.0.1:{RELAY_BASE_PORT + other.index}")
            lines += [f"    - name: {other.name}", f"      uri: {uri}"]
        return "\n".join(lines) + "\n"

    def zone(self) -> str:
        return render_zone(ZONE, DNS_ADDRESS, [(r.name, r.address) for r in self.regions],
                           {r.client_network: [p.name for p in self.preference(r)] for r in self.regions},
                           ttl_s=self.ttl_s, health_port=HEALTH_PORT, health_timeout_s=self.health_timeout_s)

    def pdns_conf(self) -> str:
        """The reference ops/pdns/pdns.conf, then the lab's own paths, address and timings (later wins)."""
        with open(PDNS_REFERENCE_CONF, encoding="utf-8") as f:
            reference = f.read()
        d = self.dns_dir
        return reference + "\n".join([
            "", "# --- regions lab overrides (ops/lab/plan.py) ---",
            f"local-address={DNS_ADDRESS}", "local-port=53", f"bind-config={d}/named.conf",
            f"socket-dir={d}", f"lua-health-checks-interval={self.health_interval_s}",
            "setuid=", "setgid=", "daemon=no", "guardian=no", "write-pid=no", ""])

    def named_conf(self) -> str:
        return f'zone "{ZONE.rstrip(".")}" {{ type master; file "{self.dns_dir}/{ZONE.rstrip(".")}.zone"; }};\n'

    # -- services -------------------------------------------------------------------------
    def services(self) -> list[Service]:
        out: list[Service] = []
        for factory in GLOBAL_SERVICES:
            out += factory(self)
        for r in self.regions:
            out += self.region_services(r)
        return out

    def region_services(self, region: RegionPlan) -> list[Service]:
        out: list[Service] = []
        for factory in REGION_SERVICES:
            out += factory(self, region)
        return out


def render_zone(zone: str, dns_address: str, regions: list[tuple[str, str]],
                preferences: dict[str, list[str]], *, ttl_s: int, health_port: int,
                health_timeout_s: int) -> str:
    """A zone publishing the SIP service: NAPTR -> SRV -> ``sip`` A, the A answered by LUA.

    ``sip`` returns the first region, in the order *preferences* gives for the querier's network
    (``netmask`` tests ``bestwho``: the EDNS Client Subnet when the query carries one, else the
    resolver's address), whose ``/healthz/ready`` answers 200 (``ifurlup``). Unknown networks get the
    regions in *regions* order. Each region also has a static name, ``REGION.sip``.
    """
    address = dict(regions)
    host = zone.rstrip(".")

    def sets(names: list[str]) -> str:
        return "{" + ",".join("{'%s'}" % address[n] for n in names) + "}"

    lua = [f";local url='http://health.{host}:{health_port}/healthz/ready'"]
    branches = []
    for net, names in preferences.items():
        branches.append(f"if netmask({{'{net}'}}) then o={sets(names)}")
    lua.append(f"local o={sets([n for n, _ in regions])}")
    if branches:
        lua.append(" else".join(branches) + " end")
    lua.append(f"return ifurlup(url, o, {{timeout='{health_timeout_s}', selector='all', backupSelector='all'}})")
    lua_text = " ".join(lua)
    if '"' in lua_text:
        raise ValueError("LUA record text must not contain double quotes")
    lines = [
        "; written by ops/lab/plan.py (render_zone); see docs/deployment.md",
        f"$ORIGIN {zone}",
        f"$TTL {ttl_s}",
        f"@ IN SOA ns.{zone} hostmaster.{zone} 1 3600 600 86400 {ttl_s}",
        f"@ IN NS ns.{zone}",
        f"ns IN A {dns_address}",
        "; RFC 3263: NAPTR -> SRV -> A",
        f'@ IN NAPTR 10 10 "S" "SIP+D2U" "" _sip._udp.{zone}',
        f"_sip._udp IN SRV 10 10 {SIP_PORT} sip.{zone}",
        "; nearest healthy region (LUA: netmask + ifurlup)",
        f'sip IN LUA A "{lua_text}"',
        "; what the server sees of the querier (EDNS Client Subnet, else the resolver)",
        'whoami IN LUA TXT "bestwho:toString()"',
    ]
    lines += [f"{name}.sip IN A {addr}" for name, addr in regions]
    return "\n".join(lines) + "\n"


# -- service factories (extend these lists to run more per region or lab-wide) ------------
def _dns_services(plan: LabPlan) -> list[Service]:
    return [Service("pdns", plan.dns_ns, ("pdns_server", f"--config-dir={plan.dns_dir}"),
                    "Done launching threads")]


def _speech_service(plan: LabPlan, region: RegionPlan) -> list[Service]:
    return [Service("speech", region.namespace,
                    # The lab is about routing: the hint decoder alone keeps three regions' speech
                    # servers light on one machine (Whisper's open speech is docs/speech.md's).
                    (sys.executable, "-m", "agent.speech.server", "--listen", f"{region.address}:{SPEECH_PORT}",
                     "--decode-processes", "1", "--open-speech", "hints"),
                    "speech server listening on", region.name, (("PYTHONUNBUFFERED", "1"),))]


def _relay_services(plan: LabPlan, region: RegionPlan) -> list[Service]:
    out = []
    for other in plan.regions:
        if other.index == region.index:
            continue
        out.append(Service(f"relay-{other.name}", region.namespace,
                           (sys.executable, os.path.join(ROOT, "ops", "relay.py"),
                            "--listen", f"127.0.0.1:{RELAY_BASE_PORT + other.index}",
                            "--target", f"{other.address}:{SPEECH_PORT}",
                            "--delay-ms", str(plan.delay_ms(region.index, other.index))),
                           "relay listening on", region.name))
    return out


def _node_service(plan: LabPlan, region: RegionPlan) -> list[Service]:
    d = plan.region_dir(region)
    openclaw = os.path.join(os.path.dirname(sys.executable), "openclaw-voice")
    return [Service("node", region.namespace,
                    (openclaw, "serve", "-c", os.path.join(d, "node.yaml"), "--host", region.address,
                     "--port", str(SIP_PORT), "--workers", str(plan.workers), "--front", "kamailio",
                     "--metrics-host", region.address, "--metrics-port", str(HEALTH_PORT),
                     "--run-dir", os.path.join(d, "node"), "--call-records", os.path.join(d, "calls")),
                    "supervisor ready:", region.name, (("PYTHONUNBUFFERED", "1"),))]


#: Prometheus says this (at log level info) once it serves queries
PROMETHEUS_READY_LINE = "Server is ready to receive web requests"


def _region_prometheus_service(plan: LabPlan, region: RegionPlan) -> list[Service]:
    """The region's Prometheus: scrapes its node (the supervisor's metrics), evaluates the node and
    region rules, and is federated by the global one (docs/regions.md, "One global view")."""
    d = os.path.join(plan.region_dir(region), "prometheus")
    config = os.path.join(d, "prometheus.yml")
    return [Service("prometheus", region.namespace,
                    tuple(prometheus.command(config, f"{region.address}:{REGION_PROMETHEUS_PORT}",
                                             os.path.join(d, "data"), log_level="info")),
                    PROMETHEUS_READY_LINE, region.name,
                    files=((config, prometheus.region_config(region.name, [f"{region.address}:{HEALTH_PORT}"])),))]


def _global_prometheus_service(plan: LabPlan) -> list[Service]:
    """The global Prometheus, beside the DNS server: federates every region's Prometheus."""
    d = os.path.join(plan.run_dir, "global-prometheus")
    config = os.path.join(d, "prometheus.yml")
    regions = {r.name: f"{r.address}:{REGION_PROMETHEUS_PORT}" for r in plan.regions}
    return [Service("prometheus-global", plan.dns_ns,
                    tuple(prometheus.command(config, f"{DNS_ADDRESS}:{GLOBAL_PROMETHEUS_PORT}",
                                             os.path.join(d, "data"), log_level="info")),
                    PROMETHEUS_READY_LINE, files=((config, prometheus.global_config(regions)),))]


GLOBAL_SERVICES: list[Callable[[LabPlan], list[Service]]] = [_dns_services, _global_prometheus_service]
REGION_SERVICES: list[Callable[[LabPlan, RegionPlan], list[Service]]] = [
    _speech_service, _relay_services, _node_service, _region_prometheus_service]


def plan_to_json(plan: LabPlan) -> str:
    return json.dumps({"prefix": plan.prefix, "run_dir": plan.run_dir, "regions": list(plan.region_names),
                       "workers": plan.workers, "ttl_s": plan.ttl_s,
                       "health_interval_s": plan.health_interval_s, "health_timeout_s": plan.health_timeout_s,
                       "delays_ms": [[a, b, d] for (a, b), d in plan.delays_ms.items()]}, indent=1)


def plan_from_json(text: str) -> LabPlan:
    d = json.loads(text)
    return LabPlan(d["prefix"], d["run_dir"], tuple(d["regions"]), d["workers"], d["ttl_s"],
                   d["health_interval_s"], d["health_timeout_s"],
                   {(int(a), int(b)): float(ms) for a, b, ms in d["delays_ms"]})


#: the reference deployment of docs/deployment.md (documentation addresses, RFC 5737)
REFERENCE_REGIONS = [("eu-west", "192.0.2.10"), ("us-east", "198.51.100.10"), ("ap-south", "203.0.113.10")]
REFERENCE_PREFERENCES = {
    "10.1.0.0/16": ["eu-west", "us-east", "ap-south"],
    "10.2.0.0/16": ["us-east", "eu-west", "ap-south"],
    "10.3.0.0/16": ["ap-south", "us-east", "eu-west"],
}


def reference_zone() -> str:
    """ops/pdns/voice.example.zone (``python -m ops.lab.plan > ops/pdns/voice.example.zone``)."""
    return render_zone("voice.example.", "192.0.2.53", REFERENCE_REGIONS, REFERENCE_PREFERENCES, ttl_s=5,
                       health_port=HEALTH_PORT, health_timeout_s=1)


if __name__ == "__main__":
    sys.stdout.write(reference_zone())
