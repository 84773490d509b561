"""Namespaces, the hub bridge and the veths of a lab, with ``ip`` (iproute2).

(``ip`` rather than pyroute2: the lab starts its processes with ``ip netns exec`` anyway, and the
commands below are what an operator would type to inspect or repair a lab by hand.)

The hub is a bridge inside the hub namespace (nothing in the root namespace); every other namespace
has one veth, ``eth0``, whose peer in the hub is enslaved to the bridge. Links are created directly in
their namespaces (``ip -n NS link add ... peer ... netns HUB``) so no name ever exists in the root
namespace, and deleting the namespaces removes everything.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

from ops.lab.plan import DNS_ADDRESS, HUB_PREFIX_LEN, LabPlan


def ip(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def netns_available() -> str:
    """'' when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root)"
    name = f"ocl-probe-{os.getpid()}"
    try:
        ip("netns", "add", name)
    except (RuntimeError, OSError) as exc:
        return f"cannot create a network namespace: {exc}"
    ip("netns", "del", name, check=False)
    return ""


def existing() -> set[str]:
    return {line.split()[0] for line in ip("netns", "list", check=False).splitlines() if line.strip()}


def _attach(plan: LabPlan, ns: str, hub_port: str, addresses: list[str]) -> None:
    ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", hub_port, "netns", plan.hub_ns)
    ip("-n", plan.hub_ns, "link", "set", hub_port, "master", "br0")
    ip("-n", plan.hub_ns, "link", "set", hub_port, "up")
    for a in addresses:
        ip("-n", ns, "addr", "add", f"{a}/{HUB_PREFIX_LEN}", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")
    # on-link default route: programs that find their own address by routing (pjsua) pick eth0's
    ip("-n", ns, "route", "add", "default", "dev", "eth0")


def create(plan: LabPlan) -> None:
    """Every namespace with loopback up, the hub bridge, one veth per namespace, the addresses."""
    clash = existing() & set(plan.namespaces())
    if clash:
        raise RuntimeError(f"namespaces already exist: {', '.join(sorted(clash))} (another lab with prefix "
                           f"{plan.prefix!r}? `ops/regions-lab down` it or pick another --prefix)")
    for ns in plan.namespaces():
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", plan.hub_ns, "link", "add", "br0", "type", "bridge")
    ip("-n", plan.hub_ns, "link", "set", "br0", "up")
    _attach(plan, plan.dns_ns, "vdns", [DNS_ADDRESS])
    _attach(plan, plan.caller_ns, "vcaller", [r.client_address for r in plan.regions])
    for r in plan.regions:
        _attach(plan, r.namespace, f"vr{r.index}", [r.address])


def pids(ns: str) -> list[int]:
    out = ip("netns", "pids", ns, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def kill_all(ns: str, sig: int = signal.SIGKILL, wait_s: float = 5.0) -> int:
    """Send *sig* to every process in *ns* (repeated until none is left or *wait_s* passed)."""
    deadline = time.monotonic() + wait_s
    killed = 0
    while time.monotonic() < deadline:
        found = pids(ns)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, sig)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


def destroy(plan: LabPlan) -> list[str]:
    """Stop every process in the lab's namespaces (TERM, then KILL) and delete the namespaces."""
    errors = []
    present = existing()
    for ns in reversed(plan.namespaces()):
        if ns not in present:
            continue
        for pid in pids(ns):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(pids(ns) for ns in plan.namespaces() if ns in present):
        time.sleep(0.1)
    for ns in reversed(plan.namespaces()):
        if ns not in present:
            continue
        kill_all(ns)
        try:
            ip("netns", "del", ns)
        except RuntimeError as exc:
            errors.append(str(exc))
    return errors
