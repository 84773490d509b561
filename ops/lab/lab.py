"""A running lab: start its services, wait for them, kill and revive regions, tear it all down.

State lives in the run directory (``plan.json``, ``logs/``, each region's files), so ``status``,
``kill``, ``revive`` and ``down`` work from another shell. Processes are found through their
namespaces (``ip netns pids``), never by name.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from typing import Any

from ops.lab import netns
from ops.lab.plan import ROOT, LabPlan, RegionPlan, Service, plan_from_json, plan_to_json

DEFAULT_RUN_BASE = os.path.join(ROOT, "var", "regions-lab")


class LabError(RuntimeError):
    pass


def new_prefix() -> str:
    return "ocl" + secrets.token_hex(3)


class Lab:
    def __init__(self, plan: LabPlan) -> None:
        self.plan = plan
        self.logs = os.path.join(plan.run_dir, "logs")

    # -- state ----------------------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: str) -> "Lab":
        path = os.path.join(run_dir, "plan.json")
        if not os.path.exists(path):
            raise LabError(f"no lab in {run_dir} (no plan.json): start one with `ops/regions-lab up`")
        with open(path, encoding="utf-8") as f:
            return cls(plan_from_json(f.read()))

    def _write(self, path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def log_path(self, service: Service) -> str:
        return os.path.join(self.logs, f"{service.region or 'lab'}-{service.name}.log")

    # -- up -------------------------------------------------------------------------------
    def up(self, timeout_s: float = 240.0, say: Any = print) -> None:
        """Everything, or nothing: any failure tears down what was made."""
        p = self.plan
        clash = netns.existing() & set(p.namespaces())
        if clash:  # another lab's: refuse before touching anything (the teardown below would remove it)
            raise LabError(f"namespaces already exist: {', '.join(sorted(clash))} (a lab with prefix {p.prefix!r} "
                           "runs: `ops/regions-lab --run-dir DIR down` it or pick another --prefix)")
        os.makedirs(self.logs, exist_ok=True)
        self._write(os.path.join(p.run_dir, "plan.json"), plan_to_json(p))  # first: `down` can always clean
        deadline = time.monotonic() + timeout_s
        try:
            netns.create(p)
            self._write(os.path.join(p.dns_dir, "pdns.conf"), p.pdns_conf())
            self._write(os.path.join(p.dns_dir, "named.conf"), p.named_conf())
            self._write(os.path.join(p.dns_dir, "voice.lab.zone"), p.zone())
            for r in p.regions:
                self._write(os.path.join(p.region_dir(r), "node.yaml"), p.node_config(r))
            services = p.services()
            # speech and relays before the nodes: a node waits for its regions' first probes
            first = [s for s in services if s.name != "node"]
            self._start_and_wait(first, deadline, say)
            self._start_and_wait([s for s in services if s.name == "node"], deadline, say)
            self.wait_dns(deadline, say)
        except BaseException:
            say("lab: start-up failed; tearing everything down")
            self.down(say=lambda *_: None)
            raise

    def _start(self, service: Service) -> tuple[Service, int, subprocess.Popen[bytes]]:
        for file_path, text in service.files:
            self._write(file_path, text)
        path = self.log_path(service)
        offset = os.path.getsize(path) if os.path.exists(path) else 0
        env = {**os.environ, **dict(service.env), "PYTHONPATH": ROOT}
        with open(path, "ab") as log:
            proc = subprocess.Popen(["ip", "netns", "exec", service.namespace, *service.argv], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                    start_new_session=True)
        return service, offset, proc

    def _start_and_wait(self, services: list[Service], deadline: float, say: Any) -> None:
        started = [self._start(s) for s in services]
        pending = list(started)
        while pending:
            for item in list(pending):
                service, offset, proc = item
                with open(self.log_path(service), "rb") as f:
                    f.seek(offset)
                    text = f.read().decode("utf-8", "replace")
                if service.ready_line in text:
                    pending.remove(item)
                    say(f"lab: {service.region or 'lab'} {service.name} ready (pid {proc.pid})")
                elif proc.poll() is not None:
                    raise LabError(f"{service.region or 'lab'} {service.name} exited with {proc.returncode}:\n"
                                   f"{text[-3000:]}")
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"{s.region or 'lab'} {s.name}" for s, _, _ in pending)
                raise LabError(f"not ready in time: {names} (logs in {self.logs})")
            time.sleep(0.2)

    # -- the caller namespace ---------------------------------------------------------------
    def in_caller(self, *args: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Run ``ops/lab/caller.py ARGS`` in the caller namespace; its last JSON line."""
        proc = subprocess.run(["ip", "netns", "exec", self.plan.caller_ns, sys.executable, "-m", "ops.lab.caller",
                               "--run-dir", self.plan.run_dir, *args], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": ROOT}, timeout=timeout_s)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise LabError(f"caller {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any]:
        return self.in_caller("status")

    def wait_dns(self, deadline: float, say: Any, expect_down: tuple[str, ...] = ()) -> dict[str, Any]:
        """Until every client network gets its nearest region that is up (health checks warmed)."""
        while True:
            st = self.status()
            want = {net: self.expected_answer(net, expect_down) for net in st["dns"]}
            got = {net: answer["addresses"] for net, answer in st["dns"].items()}
            if all(got[net] == [want[net]] for net in want):
                say("lab: DNS answers the nearest healthy region for every client network")
                return st
            if time.monotonic() > deadline:
                raise LabError(f"DNS did not settle: answers {got}, expected {want}")
            time.sleep(0.5)

    def expected_answer(self, client_network: str, down: tuple[str, ...] = ()) -> str:
        near = next(r for r in self.plan.regions if r.client_network == client_network)
        return next(r.address for r in self.plan.preference(near) if r.name not in down)

    # -- kill / revive / down -------------------------------------------------------------
    def kill(self, name: str) -> int:
        """The region dies for real: SIGKILL to every process in its namespace (front, node, speech, relays)."""
        region = self.plan.region(name)
        return netns.kill_all(region.namespace)

    def revive(self, name: str, timeout_s: float = 180.0, say: Any = print) -> None:
        region = self.plan.region(name)
        if netns.pids(region.namespace):
            raise LabError(f"region {name} still has processes: kill it first")
        deadline = time.monotonic() + timeout_s
        services = self.plan.region_services(region)
        self._start_and_wait([s for s in services if s.name != "node"], deadline, say)
        self._start_and_wait([s for s in services if s.name == "node"], deadline, say)

    def down(self, say: Any = print) -> list[str]:
        errors = netns.destroy(self.plan)
        say(f"lab {self.plan.prefix}: namespaces and processes removed" + (f"; errors: {errors}" if errors else ""))
        return errors

    def region_of(self, address: str) -> RegionPlan | None:
        return next((r for r in self.plan.regions if r.address == address), None)
