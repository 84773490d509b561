"""Races at answer through the real server and SIP stack: SIPp callers that hang up, cancel or withhold
the ACK at chosen moments (ops/sipp/caller-*.xml). Every call that reached the agent must end exactly
once -- one call record with an end_reason, its slot free again, openclaw_active_calls back to 0 --
and the agent must send no BYE it was not asked to send. Run against one ``serve`` process and
against ``serve --workers 2 --front kamailio``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from typing import Any, Iterator

import pytest

from tests.integration.conftest import ROOT, free_port, start_agent, stop_agent, wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.solo,  # the SIP stack's own timers (64 x T1) against a loaded machine
              pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp is not installed")]

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")
#: scenario -> what the agent's record of such a call must say
RACES = {
    "caller-bye-at-answer.xml": "disconnected 200",
    "caller-bye-before-ack.xml": "disconnected 200",
    "caller-cancel-at-answer.xml": "disconnected 200",
}


def sipp(scenario: str, target: str, tag: str, calls: int, limit: int, *extra: str,
         timeout_s: int = 60, rate: int = 50) -> subprocess.CompletedProcess[bytes]:
    """Run SIPp; on failure, its stderr carries the first errors SIPp logged (-trace_err)."""
    with tempfile.TemporaryDirectory() as tmp:
        errors = os.path.join(tmp, "errors.log")
        result = subprocess.run(
            ["sipp", "-sf", os.path.join(SIPP_DIR, scenario), "-i", "127.0.0.1", "-p", str(free_port()),
             "-nostdin", "-s", "1000", "-m", str(calls), "-l", str(limit), "-r", str(rate),
             "-cid_str", f"{tag}-%u-%p@%s", "-timeout", f"{timeout_s}s", "-timeout_error",
             "-trace_err", "-error_file", errors, *extra, target],
            capture_output=True, timeout=timeout_s + 30, cwd=ROOT)
        if result.returncode != 0 and os.path.exists(errors):
            with open(errors, "rb") as f:
                result.stderr = f.read()[:4000] + b"\n" + result.stderr
    return result


def metric(samples: dict[str, float], name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in samples.items() if k.split("{", 1)[0] == name and all(w in k for w in want))


class Target:
    """One server process or a node of workers, as these tests see it."""

    def __init__(self, sip_target: str, metrics: Any, records: Any, log: Any, capacity: int,
                 rate: int = 50, journal_root: str = "") -> None:
        self.sip_target, self.metrics, self.records, self.log, self.capacity = (
            sip_target, metrics, records, log, capacity)
        #: where the running calls' journals are (each goes once its call's record is written)
        self.journal_root = journal_root
        #: calls per second SIPp starts (Kamailio's flood limit blocks more than 100 requests in 2 s)
        self.rate = rate

    def idle(self, timeout_s: float = 30.0) -> dict[str, float]:
        return wait_until(lambda: (lambda m: m if metric(m, "openclaw_active_calls") == 0 else None)(self.metrics()),
                          timeout_s, "no call in progress", self.log)

    def assert_full_capacity_free(self, tag: str) -> None:
        """As many calls at once as the capacity: every one answered (no slot leaked, none refused)."""
        before = self.metrics()
        result = sipp("caller-soak.xml", self.sip_target, tag, self.capacity, self.capacity, "-d", "1500",
                      rate=self.rate)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        after = self.idle()
        if self.capacity <= 4:  # (behind Kamailio a worker's refusal is failed over to the other one)
            refused = metric(after, "openclaw_calls_total", outcome="rejected_capacity") - \
                metric(before, "openclaw_calls_total", outcome="rejected_capacity")
            assert refused == 0, f"{refused} calls refused although every slot should be free"
        # caller-soak.xml accepts a 503 too (ACKs it): a call refused has no record
        assert len([r for r in self.records() if str(r["call_id"]).startswith(f"{tag}-")]) == self.capacity
        self.assert_no_journal_left()

    def journals(self) -> list[str]:
        return [name for _folder, _dirs, names in os.walk(self.journal_root) for name in names]

    def assert_no_journal_left(self) -> None:
        """Every call so far has its record, so no journal is left (a restart would take one for a crash)."""
        wait_until(lambda: not self.journals(), 10.0, f"no call journal left in {self.journal_root}", self.log)


def _single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = str(tmp_path_factory.mktemp("races"))
    config = os.path.join(tmp, "config.yaml")
    with open(config, "w") as f:
        f.write("sip:\n  reconcile_interval_ms: 500\n")
    agent = start_agent(tmp, "--config", config)
    yield Target(f"127.0.0.1:{agent.sip_port}", agent.metrics, agent.records, agent.log, 4,
                 journal_root=agent.records_path + ".journal")
    assert stop_agent(agent) == 0
    assert "Traceback" not in agent.log(), agent.log()[-4000:]


def _workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if shutil.which("kamailio") is None:
        pytest.skip("kamailio is not installed (ops/bootstrap.sh installs it)")
    from tests.integration.test_workers import start_node, stop_node

    tmp = str(tmp_path_factory.mktemp("races-workers"))
    node = start_node(tmp)
    wait_until(lambda: len(node.front_states()) == 2 and all("A" in s for s in node.front_states().values()),
               30.0, "Kamailio to mark both workers up", node.log)

    def records() -> list[dict[str, Any]]:
        return node.records(0) + node.records(1) if os.path.isdir(node.records_dir) else []

    yield Target(node.target, node.metrics, records, node.log, 8, rate=8,
                 journal_root=os.path.join(node.records_dir, "journal"))
    stop_node(node)
    assert "Traceback" not in node.log(), node.log()[-4000:]


@pytest.fixture(scope="module", params=["single", "workers"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from (_single if request.param == "single" else _workers)(tmp_path_factory)


@pytest.mark.parametrize("scenario", sorted(RACES))
def test_a_caller_racing_the_answer_ends_its_call_once_and_frees_its_slot(target: Target, scenario: str) -> None:
    """Three rounds of the node's capacity of calls that hang up at answer (BYE right after the ACK, BYE
    with no ACK, CANCEL crossing the 200): SIPp sees no BYE from the agent (it would fail the call), each
    call has exactly one record with its end, no agent hangup is counted, the reconciler found nothing
    to repair, and afterwards every slot takes a call again."""
    tag = scenario.split(".")[0].replace("caller-", "") + ("-w" if target.capacity > 4 else "")
    before = target.metrics()
    n = 3 * target.capacity
    result = sipp(scenario, target.sip_target, tag, n, target.capacity, rate=target.rate)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    after = target.idle()
    mine = [r for r in target.records() if str(r["call_id"]).startswith(f"{tag}-")]
    ids = [r["call_id"] for r in mine]
    assert len(ids) == n and len(set(ids)) == n, sorted(ids)
    assert all(str(r["end_reason"]).startswith(RACES[scenario]) for r in mine), [r["end_reason"] for r in mine]
    assert not [r for r in mine if r.get("agent_hangup")]
    assert metric(after, "openclaw_agent_hangups_total") == metric(before, "openclaw_agent_hangups_total")
    assert metric(after, "openclaw_call_slot_repairs_total") == 0
    target.assert_full_capacity_free(f"{tag}-probe")


def test_a_call_whose_media_cannot_be_set_up_is_refused_and_holds_no_slot(target: Target) -> None:
    """Callers offering only G.729: each gets an error response (488 from pjsua) and ACKs it; no session
    or record is left, and right after them every slot takes a call (an admission pjsua answered itself
    must not keep counting against the capacity)."""
    tag = "nocodec" + ("-w" if target.capacity > 4 else "")
    result = sipp("caller-no-common-codec.xml", target.sip_target, tag, 2 * target.capacity, target.capacity,
                  rate=target.rate)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    target.idle()
    assert not [r for r in target.records() if str(r["call_id"]).startswith(f"{tag}-")]
    target.assert_full_capacity_free(f"{tag}-probe")


class NoAck:
    """Two callers that never ACK the 200, on their own agent: started with the module, so that the 32 s
    the agent waits for their ACKs (64*T1, RFC 3261) run beside the other tests."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._single = _single(tmp_path_factory)
        self.target = next(self._single)
        self.before = self.target.metrics()
        self.result: subprocess.CompletedProcess[bytes] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.result = sipp("caller-no-ack.xml", self.target.sip_target, "noack", 2, 2, timeout_s=70)

    def wait(self) -> subprocess.CompletedProcess[bytes]:
        self._thread.join(110)
        assert self.result is not None, "SIPp did not end"
        return self.result

    def close(self) -> None:
        self._thread.join(110)
        next(self._single, None)  # stops the agent; asserts its clean exit


@pytest.fixture(scope="module", autouse=True)
def no_ack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoAck | None]:
    """Started first when the no-ACK test is to run (else nothing is started)."""
    name = "test_a_200_never_acknowledged_is_ended_by_the_agent_after_64_t1_with_its_reason"
    if not any(item.name == name and item.module is request.module for item in request.session.items):
        yield None
        return
    run = NoAck(tmp_path_factory)
    yield run
    run.close()


def test_a_200_never_acknowledged_is_ended_by_the_agent_after_64_t1_with_its_reason(no_ack: NoAck) -> None:
    """Callers that never ACK: after 32 s the agent sends a BYE (SIPp's scenario waits for it and answers
    it), logs and counts it as a timeout, and writes one record per call with that reason. (One process
    shows it: the timeout is the SIP stack's. The calls were placed when the module started.)"""
    target = no_ack.target
    result = no_ack.wait()
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    after = target.idle()
    mine = [r for r in target.records() if str(r["call_id"]).startswith("noack-")]
    assert len(mine) == 2
    assert all(str(r.get("agent_hangup", "")).startswith("timeout: no ACK") for r in mine), mine
    assert metric(after, "openclaw_agent_hangups_total", reason="timeout") - \
        metric(no_ack.before, "openclaw_agent_hangups_total", reason="timeout") == 2
    assert target.log().count("hanging up (BYE): timeout: no ACK for the 200") >= 2
    target.assert_full_capacity_free("noack-probe")
