"""Inside the caller namespace: resolve the SIP service through the lab's DNS and place calls.

Run by the lab as ``ip netns exec PREFIX-caller python -m ops.lab.caller --run-dir DIR COMMAND``:

- ``status``: every region's ``/healthz/ready`` and what DNS answers each client network (JSON);
- ``resolve --from REGION [--ecs NET]``: NAPTR -> SRV -> A, from that region's client network;
- ``call --from REGION [--hold-s S] [--openclaw]``: resolve, then one call (SIPp, or ``openclaw-voice call``);
- ``loop --from REGION --duration-s S --interval-s S --hold-s S [--max-calls N]``: a call every interval
  (each resolved through a resolver cache that honours the TTL), one JSON line per finished call.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import dns.edns
import dns.resolver

from ops.lab.lab import Lab
from ops.lab import prometheus
from ops.lab.plan import DNS_ADDRESS, GLOBAL_PROMETHEUS_PORT, ROOT, SIP_PORT, ZONE, LabPlan, RegionPlan

SIPP_SCENARIO = os.path.join(ROOT, "ops", "sipp", "bench-call.xml")


def make_resolver(ecs: str | None = None) -> dns.resolver.Resolver:
    """A stub resolver asking only the lab's DNS, caching answers for their TTL."""
    r = dns.resolver.Resolver(configure=False)
    r.nameservers = [DNS_ADDRESS]
    r.lifetime = 3.0
    r.cache = dns.resolver.Cache(cleaning_interval=60.0)
    if ecs:
        address, _, bits = ecs.partition("/")
        r.use_edns(0, 0, 1232, options=[dns.edns.ECSOption(address, int(bits or 24))])
    return r


def resolve_service(resolver: dns.resolver.Resolver, source: str) -> dict[str, Any]:
    """RFC 3263 for UDP: NAPTR of the zone -> its SIP+D2U SRV -> the SRV target's A records."""
    t0 = time.monotonic()
    naptr = resolver.resolve(ZONE, "NAPTR", source=source)
    udp = [r for r in naptr if r.service.decode().upper() == "SIP+D2U"]
    if not udp:
        raise LookupError(f"{ZONE} has no SIP+D2U NAPTR")
    srv_name = str(sorted(udp, key=lambda r: (r.order, r.preference))[0].replacement)
    srv = sorted(resolver.resolve(srv_name, "SRV", source=source), key=lambda r: (r.priority, -r.weight))
    target, port = str(srv[0].target), srv[0].port
    a = resolver.resolve(target, "A", source=source)
    return {"naptr": srv_name, "target": target, "port": port, "addresses": [r.address for r in a],
            "ttl_s": a.rrset.ttl if a.rrset is not None else None,
            "expires_in_s": round(a.expiration - time.time(), 2), "resolve_ms": round((time.monotonic() - t0) * 1e3, 1)}


def ready(url: str, timeout_s: float = 1.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return {"code": resp.status, **json.loads(resp.read() or b"{}")}
    except urllib.error.HTTPError as e:
        try:
            body = json.loads(e.read() or b"{}")
        except ValueError:
            body = {}
        return {"code": e.code, **body}
    except (OSError, ValueError) as e:
        return {"code": None, "error": str(getattr(e, "reason", e))}


def status(plan: LabPlan) -> dict[str, Any]:
    regions = {r.name: {"address": r.address, "ready": ready(r.ready_url)} for r in plan.regions}
    answers: dict[str, dict[str, Any]] = {}
    for r in plan.regions:
        try:
            ans = make_resolver().resolve(f"sip.{ZONE}", "A", source=r.client_address)
            answers[r.client_network] = {"addresses": [x.address for x in ans],
                                         "ttl_s": ans.rrset.ttl if ans.rrset is not None else None}
        except Exception as exc:  # noqa: BLE001 -- reported, not raised: status shows what is wrong
            answers[r.client_network] = {"addresses": [], "error": str(exc)}
    return {"regions": regions, "dns": answers, "global_view": global_view()}


def global_view() -> dict[str, Any]:
    """What the global Prometheus knows: each region's readiness as federated from its region
    Prometheus (``region:openclaw_ready:bool``), whether it can scrape that Prometheus now, and the
    alerts firing or pending."""
    address = f"{DNS_ADDRESS}:{GLOBAL_PROMETHEUS_PORT}"
    try:
        ready = {s.labels.get("region", ""): s.value for s in prometheus.query(address, "region:openclaw_ready:bool")}
        scraped = {s.labels.get("region", ""): s.value
                   for s in prometheus.query(address, 'up{job="%s"}' % prometheus.FEDERATE_JOB)}
        alerts = sorted({(s.labels.get("alertname", ""), s.labels.get("region", ""), s.labels.get("alertstate", ""))
                         for s in prometheus.query(address, "ALERTS")})
    except (OSError, prometheus.PrometheusError) as exc:
        return {"error": str(exc)}
    return {"ready": ready, "scraped": scraped, "alerts": [list(a) for a in alerts]}


def _free_udp_port(local_ip: str) -> int:
    """A UDP port the kernel says is free on *local_ip* now (from the ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((local_ip, 0))
        return int(s.getsockname()[1])


def _free_media_ports(local_ip: str) -> int:
    """The first of 4 free consecutive UDP ports below the ephemeral range (SIPp binds audio RTP and
    RTCP, video RTP and RTCP from -mp), so calls placed at once never take each other's ports."""
    for _ in range(200):
        first = random.randrange(10000, 32000, 4)
        socks = []
        try:
            for port in range(first, first + 4):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(sock)
                sock.bind((local_ip, port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no 4 free consecutive UDP ports for SIPp's media")


def sipp_call(address: str, port: int, local_ip: str, hold_s: float, timeout_s: float) -> dict[str, Any]:
    """One SIPp call (INVITE, 200, ACK, hold, BYE): ok when SIPp counts it successful."""
    sipp = shutil.which("sipp")
    if not sipp:
        raise RuntimeError("sipp (Debian package sip-tester) is not installed")
    sip_port, media_port = _free_udp_port(local_ip), _free_media_ports(local_ip)
    t0 = time.monotonic()
    proc = subprocess.run([sipp, "-sf", SIPP_SCENARIO, "-s", "1000", "-m", "1", "-l", "1", "-d",
                           str(int(hold_s * 1000)), "-i", local_ip, "-p", str(sip_port), "-mp", str(media_port),
                           "-nostdin", "-timeout", f"{int(timeout_s)}s", "-timeout_error", "-recv_timeout",
                           f"{int(timeout_s * 1000)}", f"{address}:{port}"],
                          capture_output=True, text=True, timeout=timeout_s + 15, cwd=os.path.dirname(SIPP_SCENARIO))
    codes = re.findall(r"SIP/2\.0 ([3-6]\d\d)", proc.stderr)
    error = ""
    if proc.returncode != 0:
        error = (f"answered {codes[-1]}" if codes else
                 "no answer" if "timed out" in proc.stderr or "timeout" in proc.stderr.lower() else
                 " ".join(proc.stderr.split())[-300:])
    return {"ok": proc.returncode == 0, "exit": proc.returncode, "duration_s": round(time.monotonic() - t0, 3),
            "status": int(codes[-1]) if codes else (200 if proc.returncode == 0 else None), "error": error}


def openclaw_call(address: str, port: int, say: str, timeout_s: float) -> dict[str, Any]:
    """A real caller (pjsua2, flite speech): the agent's reply is transcribed in the report."""
    exe = os.path.join(os.path.dirname(sys.executable), "openclaw-voice")
    proc = subprocess.run([exe, "call", f"sip:1000@{address}:{port}", "--json", "--say", say],
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    report: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
    return {"ok": proc.returncode == 0, "exit": proc.returncode, "report": report,
            "error": "" if proc.returncode == 0 else (proc.stderr + proc.stdout)[-800:]}


def _origin(plan: LabPlan, name: str) -> RegionPlan:
    return plan.region(name) if name else plan.regions[0]


def one_call(plan: LabPlan, resolver: dns.resolver.Resolver, origin: RegionPlan, hold_s: float,
             timeout_s: float, use_openclaw: bool = False, say: str = "check my balance") -> dict[str, Any]:
    started = time.time()
    try:
        res = resolve_service(resolver, origin.client_address)
    except Exception as exc:  # noqa: BLE001 -- a failed lookup is a failed call, reported
        return {"t": started, "ok": False, "region": None, "address": None, "error": f"DNS: {exc}"}
    address = res["addresses"][0]
    region = next((r.name for r in plan.regions if r.address == address), None)
    result = (openclaw_call(address, res["port"], say, max(timeout_s, 90.0)) if use_openclaw
              else sipp_call(address, res["port"], origin.client_address, hold_s, timeout_s))
    return {"t": started, "region": region, "address": address, "dns": res, **result}


def loop(plan: LabPlan, origins: list[RegionPlan], duration_s: float, interval_s: float, hold_s: float,
         timeout_s: float, max_calls: int) -> None:
    """A call every *interval_s* for *duration_s* (at most *max_calls*), from each of *origins* in turn
    (one resolver cache per client network); a JSON line per finished call."""
    resolvers = {o.name: make_resolver() for o in origins}
    out_lock = threading.Lock()
    threads = []
    t_end = time.monotonic() + duration_s
    n = 0

    def run(seq: int) -> None:
        origin = origins[seq % len(origins)]
        rec = one_call(plan, resolvers[origin.name], origin, hold_s, timeout_s)
        rec["seq"], rec["from"] = seq, origin.name
        with out_lock:
            print(json.dumps(rec), flush=True)

    while time.monotonic() < t_end and n < max_calls:
        th = threading.Thread(target=run, args=(n,), daemon=True)
        th.start()
        threads.append(th)
        n += 1
        time.sleep(interval_s)
    for th in threads:
        th.join(timeout_s + 30)
    print(json.dumps({"done": True, "calls": n}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ops.lab.caller")
    ap.add_argument("--run-dir", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status")
    r = sub.add_parser("resolve")
    r.add_argument("--from", dest="origin", default="")
    r.add_argument("--ecs", default=None, help="send this EDNS Client Subnet (e.g. 10.77.103.0/24)")
    c = sub.add_parser("call")
    c.add_argument("--from", dest="origin", default="")
    c.add_argument("--hold-s", type=float, default=1.0)
    c.add_argument("--timeout-s", type=float, default=15.0)
    c.add_argument("--openclaw", action="store_true", help="call with openclaw-voice call (speech) instead of SIPp")
    c.add_argument("--say", default="check my balance")
    lp = sub.add_parser("loop")
    lp.add_argument("--from", dest="origin", default="", help="region(s) whose client network calls, in turn: a,b")
    lp.add_argument("--duration-s", type=float, default=30.0)
    lp.add_argument("--interval-s", type=float, default=0.5)
    lp.add_argument("--hold-s", type=float, default=3.0)
    lp.add_argument("--timeout-s", type=float, default=8.0)
    lp.add_argument("--max-calls", type=int, default=400)
    args = ap.parse_args(argv)
    plan = Lab.load(args.run_dir).plan
    if args.cmd == "status":
        print(json.dumps(status(plan)))
    elif args.cmd == "resolve":
        origin = _origin(plan, args.origin)
        print(json.dumps({"from": origin.client_address, "ecs": args.ecs,
                          **resolve_service(make_resolver(args.ecs), origin.client_address)}))
    elif args.cmd == "call":
        origin = _origin(plan, args.origin)
        print(json.dumps(one_call(plan, make_resolver(), origin, args.hold_s, args.timeout_s, args.openclaw,
                                  args.say)))
    else:
        loop(plan, [_origin(plan, o) for o in args.origin.split(",")], min(args.duration_s, 600.0), max(args.interval_s, 0.05),
             args.hold_s, args.timeout_s, min(args.max_calls, 2000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
