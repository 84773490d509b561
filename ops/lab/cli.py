"""``ops/regions-lab up|status|kill REGION|revive REGION|call|down``: see docs/deployment.md.

The lab's rooms: ``plan.py`` (pure: names, addresses, ports, the PowerDNS zone, each namespace's
services), ``netns.py`` (namespaces, the hub bridge, veths), ``lab.py`` (start, readiness, kill and
revive, teardown; state in the run directory), ``caller.py`` (inside the caller namespace: resolve
the SIP service through DNS and call), this file (the command line).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
from typing import Any

from ops.lab import netns
from ops.lab.lab import DEFAULT_RUN_BASE, Lab, LabError, new_prefix
from ops.lab.plan import DEFAULT_REGIONS, LabPlan


def _run_dir(args: argparse.Namespace) -> str:
    if args.run_dir:
        return os.path.abspath(args.run_dir)
    labs = sorted(p for p in glob.glob(os.path.join(DEFAULT_RUN_BASE, "*")) if os.path.exists(os.path.join(p, "plan.json")))
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise LabError(f"no lab under {DEFAULT_RUN_BASE}: start one with `ops/regions-lab up`")
    raise LabError(f"several labs under {DEFAULT_RUN_BASE} ({', '.join(map(os.path.basename, labs))}): "
                   "pick one with --run-dir")


def _print_status(lab: Lab, st: dict[str, Any]) -> None:
    for name, r in st["regions"].items():
        ready = r["ready"]
        why = "" if ready.get("code") == 200 else f" ({', '.join(ready.get('reasons', [])) or ready.get('error', '')})"
        print(f"region {name:10} {r['address']:12} ready: {ready.get('code')}{why}"
              f"  free slots {ready.get('free_slots', '-')}")
    for net, answer in st["dns"].items():
        names = [getattr(lab.region_of(a), "name", a) for a in answer["addresses"]]
        print(f"DNS from {net:16} sip -> {', '.join(names) or answer.get('error', '(nothing)')}"
              f"  TTL {answer.get('ttl_s', '-')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ops/regions-lab", description="Three regions, PowerDNS GSLB and a caller "
                                 "in network namespaces on one machine (docs/deployment.md).")
    ap.add_argument("--run-dir", help=f"the lab's state and logs (default {DEFAULT_RUN_BASE}/PREFIX)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build the namespaces and start every region, the DNS and the caller side")
    up.add_argument("--prefix", help="namespace name prefix (default: ocl + 6 random hex digits)")
    up.add_argument("--regions", default=",".join(DEFAULT_REGIONS), help="comma-separated region names")
    up.add_argument("--workers", type=int, default=1, help="worker processes per region (default 1)")
    up.add_argument("--ttl", type=int, default=5, help="TTL of the SIP service records, seconds (default 5)")
    up.add_argument("--health-interval", type=int, default=1, help="PowerDNS health-check interval, s (default 1)")
    up.add_argument("--timeout", type=float, default=240.0, help="give up (and tear down) after this many seconds")
    sub.add_parser("status", help="each region's readiness and what DNS answers each client network")
    k = sub.add_parser("kill", help="SIGKILL every process of a region (front, node, speech, relays)")
    k.add_argument("region")
    rv = sub.add_parser("revive", help="start a killed region again")
    rv.add_argument("region")
    c = sub.add_parser("call", help="resolve the SIP service from a client network and place one call")
    c.add_argument("--from", dest="origin", default="", help="the region whose client network calls")
    c.add_argument("--openclaw", action="store_true", help="openclaw-voice call (speech) instead of SIPp")
    sub.add_parser("down", help="stop everything and delete the namespaces")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "up":
            why = netns.netns_available()
            if why:
                raise LabError(why)
            prefix = args.prefix or new_prefix()
            run_dir = os.path.abspath(args.run_dir or os.path.join(DEFAULT_RUN_BASE, prefix))
            plan = LabPlan(prefix, run_dir, tuple(x for x in args.regions.split(",") if x), args.workers, args.ttl,
                           args.health_interval)
            lab = Lab(plan)
            # SIGTERM/SIGHUP during start-up: unwind through up()'s teardown like Ctrl-C does
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, lambda n, _f: sys.exit(128 + n))
            lab.up(timeout_s=min(args.timeout, 900.0))
            print(f"lab {prefix} up; run dir {run_dir}")
            _print_status(lab, lab.status())
            return 0
        lab = Lab.load(_run_dir(args))
        if args.cmd == "status":
            _print_status(lab, lab.status())
        elif args.cmd == "kill":
            n = lab.kill(args.region)
            print(f"region {args.region}: {n} signals sent (SIGKILL)")
        elif args.cmd == "revive":
            lab.revive(args.region)
            print(f"region {args.region} running again")
        elif args.cmd == "call":
            extra = ["--openclaw"] if args.openclaw else []
            result = lab.in_caller("call", *(["--from", args.origin] if args.origin else []), *extra,
                                   timeout_s=120.0)
            print(json.dumps(result))
            return 0 if result.get("ok") else 1
        elif args.cmd == "down":
            errors = lab.down()
            if not errors:
                os.replace(os.path.join(lab.plan.run_dir, "plan.json"), os.path.join(lab.plan.run_dir, "plan.down.json"))
            return 1 if errors else 0
    except (LabError, RuntimeError, KeyError, ValueError) as exc:
        print(f"regions-lab: {exc}", file=sys.stderr)
        return 1
    return 0
