"""``serve --workers 2 --front kamailio``: real Kamailio, real workers, real SIP and RTP on loopback.

A supervisor (an embedded speech server, two worker processes of capacity 4,
and Kamailio with the dispatcher module) is shared by the tests that leave it
as they found it; the tests that stop it start their own. They drive it with
SIPp through Kamailio's port only. Kamailio's own view of the workers
is read with ``kamcmd dispatcher.list`` on the supervisor's control socket.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

from media.pcap import rtp_streams
from tests.integration.conftest import (
    OPENCLAW, ROOT, Capture, free_media_ports, free_port, free_sip_port, port_block, read_health, read_metrics, run_sipp,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.solo,  # up to sixteen calls at once: they need the machine to themselves
    pytest.mark.skipif(shutil.which("kamailio") is None or shutil.which("kamcmd") is None,
                       reason="kamailio is not installed (ops/bootstrap.sh installs it)"),
]

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")
GOODBYE = "We have to end this call now"


@dataclass
class Node:
    """A running supervisor with its workers and Kamailio."""

    proc: subprocess.Popen[bytes]
    sip_port: int
    worker_port: int
    metrics_port: int
    rtp_port: int
    rtp_range: int
    run_dir: str
    records_dir: str
    log_path: str
    workers: int = 2

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.sip_port}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def health(self) -> dict[str, Any]:
        return read_health(self.metrics_port)

    def metrics(self) -> dict[str, float]:
        return read_metrics(self.metrics_port, timeout_s=10)

    def front_states(self) -> dict[str, str]:
        out = subprocess.run(["kamcmd", "-s", f"unix:{self.run_dir}/kamailio.ctl", "dispatcher.list"],
                             capture_output=True, timeout=5).stdout.decode()
        return dict(re.findall(r"URI:\s*(\S+)\s+FLAGS:\s*(\S+)", out))

    def worker_uri(self, i: int) -> str:
        return f"sip:127.0.0.1:{self.worker_port + i}"

    def records(self, worker: int) -> list[dict[str, Any]]:
        out = []
        for name in sorted(os.listdir(self.records_dir)):
            if name.endswith(f".w{worker}.jsonl"):
                with open(os.path.join(self.records_dir, name), encoding="utf-8") as f:
                    out += [json.loads(line) for line in f if line.strip()]
        return out

    def wait_for(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        return wait_until(predicate, timeout_s, what, self.log, interval_s=0.05)

    def worker_range(self, i: int) -> range:
        per = self.rtp_range // self.workers
        return range(self.rtp_port + i * per, self.rtp_port + (i + 1) * per)


def start_node(tmp_path: str, *extra: str, workers: int = 2, capacity: int = 4,
               env: dict[str, str] | None = None) -> Node:
    sip_port = free_sip_port()
    worker_port = port_block(workers, 20000, 30000)
    metrics_port = port_block(workers + 1, 30000, 32000)
    rtp_port = port_block(1, 42000, 58000) // 2 * 2
    rtp_range = 60 * workers
    run_dir = os.path.join(tmp_path, "run")
    records_dir = os.path.join(tmp_path, "calls")
    log_path = os.path.join(tmp_path, "supervisor.log")
    logf = open(log_path, "wb")
    proc = subprocess.Popen(
        [OPENCLAW, "serve", "--workers", str(workers), "--front", "kamailio", "--host", "127.0.0.1",
         "--port", str(sip_port), "--worker-port", str(worker_port), "--metrics-port", str(metrics_port),
         "--rtp-port", str(rtp_port), "--rtp-port-range", str(rtp_range), "--capacity", str(capacity),
         "--call-records", records_dir, "--run-dir", run_dir, *extra],
        stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})})
    node = Node(proc, sip_port, worker_port, metrics_port, rtp_port, rtp_range, run_dir, records_dir, log_path,
                workers)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if "supervisor ready" in node.log():
            return node
        if proc.poll() is not None:
            raise AssertionError(f"supervisor exited with {proc.returncode}:\n{node.log()[-5000:]}")
        time.sleep(0.2)
    stop_node(node)
    raise AssertionError(f"supervisor not ready in 90 s:\n{node.log()[-5000:]}")


def stop_node(node: Node) -> int:
    """SIGTERM (drain), then SIGTERM again (goodbye), then SIGKILL of everything it started."""
    pids = _descendants(node.proc.pid)
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        if node.proc.poll() is not None:
            break
        node.proc.send_signal(sig)
        try:
            node.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    for pid in pids:  # whatever outlived it (it should not)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return node.proc.returncode


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True).stdout.decode().split()
    children: dict[int, list[int]] = {}
    for child, parent in zip(out[::2], out[1::2]):
        children.setdefault(int(parent), []).append(int(child))
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One node for the tests that leave it as they found it (a killed worker is restarted, a stopped one
    continued); the tests that stop the node start their own."""
    n = start_node(str(tmp_path_factory.mktemp("node")))
    yield n
    code = stop_node(n)
    assert code == 0, f"supervisor exited with {code}:\n{n.log()[-4000:]}"
    assert "Traceback" not in n.log(), n.log()[-6000:]


@pytest.fixture
def node(shared_node: Node) -> Node:
    """The shared node with both workers up in Kamailio and no call in progress."""
    n = shared_node
    assert n.proc.poll() is None, f"the node exited:\n{n.log()[-4000:]}"
    n.wait_for(lambda: all(n.front_states().get(n.worker_uri(i)) == "AP" for i in range(n.workers)), 30,
               "both workers up in Kamailio")
    n.wait_for(lambda: n.health()["active_calls"] == 0, 60, "no call in progress")
    return n


@dataclass
class SippCall:
    call_id: str
    invited_at: float = 0.0
    invite_status: list[int] = field(default_factory=list)
    bye_status: list[int] = field(default_factory=list)
    retry_after: bool = False


def rms(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return float(np.sqrt(np.mean(samples ** 2))) if samples.size else 0.0


def sipp_calls(trace: str) -> dict[str, SippCall]:
    """Per Call-ID: when SIPp sent the INVITE (epoch s), the final INVITE and BYE responses it got."""
    calls: dict[str, SippCall] = {}
    blocks = re.split(r"^-{20,} (\d{4}-\d\d-\d\d)\s+(\d\d:\d\d:\d\d\.\d+)\s*$", trace, flags=re.M)
    for i in range(1, len(blocks) - 2, 3):
        at = time.mktime(time.strptime(f"{blocks[i]} {blocks[i + 1][:8]}", "%Y-%m-%d %H:%M:%S"))
        at += float("0" + blocks[i + 1][8:])
        body = blocks[i + 2]
        m = re.search(r"^Call-ID:\s*(\S+)", body, re.M | re.I)
        cseq = re.search(r"^CSeq:\s*\d+\s+(\w+)", body, re.M | re.I)
        if not m or not cseq:
            continue
        call = calls.setdefault(m.group(1), SippCall(m.group(1)))
        status = re.search(r"^SIP/2\.0 (\d{3})", body, re.M)
        if "message sent" in body and re.search(r"^INVITE ", body, re.M) and not call.invited_at:
            call.invited_at = at
        elif "message received" in body and status:
            code = int(status.group(1))
            if cseq.group(1) == "INVITE" and code >= 200:
                call.invite_status.append(code)
                if code == 503 and re.search(r"^Retry-After:\s*\d+", body, re.M | re.I):
                    call.retry_after = True
            elif cseq.group(1) == "BYE" and code >= 200:
                call.bye_status.append(code)
    return calls


def test_sixteen_calls_complete_with_audio_both_ways_spread_over_both_workers(node: Node, tmp_path: Any) -> None:
    """16 SIPp calls through Kamailio (4 at a time) all complete: each worker answers some, the caller's
    words reach a worker (it heard "check my balance", in all calls but at most one), the agent's voiced RTP reaches the caller, and the
    caller's BYE, routed by Record-Route, reaches the worker holding the call (200, not 481)."""
    scenario = os.path.join(SIPP_DIR, "caller-utterance.xml")
    trace = tmp_path / "messages.log"
    cap = Capture(str(tmp_path / "rtp.pcap"), f"udp portrange {node.rtp_port}-{node.rtp_port + node.rtp_range - 1}")
    try:
        # 4 at a time: 8 callers talking at once saturate the one embedded speech server on 2 cores
        # (see ops/bench/capacity); the spread and routing are the same.
        result = run_sipp(scenario, node.target, "-s", "1000", "-m", "16", "-l", "4", "-r", "2",
                          "-mp", str(free_media_ports()), "-trace_msg", "-message_file", str(trace), timeout_s=90)
    finally:
        pcap = cap.stop()
    out = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    assert result.returncode == 0, out[-3000:] + node.log()[-3000:]
    calls = sipp_calls(trace.read_text(errors="replace"))
    assert len(calls) == 16
    assert all(c.invite_status == [200] and c.bye_status == [200] for c in calls.values()), calls
    # Kamailio record-routed each dialog: the caller's BYE, sent to the proxy with a Route header,
    # names the Contact of the worker that answered -- the one whose records hold the call.
    bye_port = {cid: int(port) for port, cid in re.findall(
        r"^BYE sip:agent@127\.0\.0\.1:(\d+) SIP/2\.0\n(?:(?!\n\n).)*?^Call-ID: (\S+)",
        trace.read_text(errors="replace"), re.M | re.S)}
    assert len(bye_port) == 16, bye_port

    def mine(i: int) -> list[dict[str, Any]]:  # (the node is shared: other tests' calls have records too)
        return [r for r in node.records(i) if r["call_id"] in calls]

    node.wait_for(lambda: sum(len(mine(i)) for i in range(2)) == 16, 30, "16 call records")
    per_worker = [mine(i) for i in range(2)]
    assert all(len(r) >= 4 for r in per_worker), [len(r) for r in per_worker]
    assert sorted(r["call_id"] for rs in per_worker for r in rs) == sorted(calls)
    log = node.log()
    misheard = []
    for i, records in enumerate(per_worker):
        for r in records:
            assert r["worker"] == i
            assert bye_port[r["call_id"]] == node.worker_port + i
            assert r["end_reason"].startswith("disconnected 200"), r["end_reason"]
            # every RTP packet of the caller's 1.9 s utterance (96) reached the worker holding the call
            assert r["rtp"]["rx_packets"] >= 96 and r["rtp"]["rx_lost"] == 0, (r["call_id"], r["rtp"])
            # and the worker recognised the caller's words
            heard = re.findall(r"\[worker %d\] .* call %s heard '([^']*)'" % (i, re.escape(r["call_id"])), log)
            assert heard, (r["call_id"], r["rtp"])
            if not any("balance" in t for t in heard):
                misheard.append((r["call_id"], heard, r["rtp"]))
    # Four calls at a time beside Kamailio and two workers on two cores can hold up a worker's
    # media thread: in the one failure seen, a call's jitter buffer discarded 58 packets and
    # "balance" came out as "b oh and". Words must be heard in every call, the right ones in all
    # but one (capacity is measured by ops/bench/capacity, not here).
    assert len(misheard) <= 1, misheard

    streams = rtp_streams(pcap)
    agent_ports = range(node.rtp_port, node.rtp_port + node.rtp_range)
    from_agent = [s for s in streams if s.sport in agent_ports and rms(s.audio()) > 300]
    to_agent = [s for s in streams if s.dport in agent_ports and rms(s.audio()) > 300]
    assert len(from_agent) >= 16 and len(to_agent) >= 16, (len(from_agent), len(to_agent))
    for i in range(2):
        assert any(s.sport in node.worker_range(i) for s in from_agent), f"no agent audio from worker {i}"


def test_twelve_simultaneous_calls_at_capacity_eight(node: Node, tmp_path: Any) -> None:
    """12 calls at once against 2 workers x 4: 8 answered, 4 refused by Kamailio with 503 + Retry-After
    after every worker refused (never 486), and every refusal is counted (workers and front)."""
    before = node.metrics()
    trace = tmp_path / "messages.log"
    result = run_sipp(os.path.join(SIPP_DIR, "caller-hold.xml"), node.target, "-s", "1000", "-m", "12", "-l", "12",
                      "-r", "50", "-d", "5000", "-mp", str(free_media_ports()), "-trace_msg", "-message_file", str(trace))
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out[-3000:] + node.log()[-3000:]
    calls = sipp_calls(trace.read_text(errors="replace"))
    statuses = sorted(c.invite_status[-1] for c in calls.values())
    assert statuses == [200] * 8 + [503] * 4, statuses
    assert all(c.retry_after for c in calls.values() if c.invite_status[-1] == 503)
    # the held calls ended with the caller's BYE (sent without Route: Call-ID stickiness found the worker)
    assert all(c.bye_status == [200] for c in calls.values() if c.invite_status[-1] == 200), calls
    after = node.metrics()

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    answered = [delta(f'openclaw_calls_total{{outcome="answered",worker="{i}"}}') for i in range(2)]
    assert answered == [4.0, 4.0], answered
    refused_by_workers = sum(delta(f'openclaw_calls_total{{outcome="rejected_capacity",worker="{i}"}}')
                             for i in range(2))
    assert refused_by_workers >= 4
    assert delta('openclaw_front_rejected_total{reason="all_workers_busy"}') == 4


def test_kill_9_worker_under_load_fails_over_and_rejoins(node: Node, tmp_path: Any) -> None:
    """kill -9 of a worker while calls arrive: Kamailio marks it down (the supervisor tells it at once),
    no call placed after that fails, no caller is ever refused (at most 4 calls are open at once: the
    surviving worker alone has room for all of them), the supervisor restarts the worker, tells Kamailio
    the moment it is ready, and it takes calls again."""
    victim = node.health()["workers"][0]
    assert victim["status"] == "ready" and victim["pid"]
    trace = tmp_path / "load.log"
    scenario = os.path.join(SIPP_DIR, "caller-hold.xml")  # BYEs follow Record-Route to the call's worker
    # -l 4: the node's capacity while one worker is down. More calls at once than that may rightly be
    # refused (503 + Retry-After: every live worker full), e.g. when an INVITE sent to the dying worker
    # fails over after WORKER_TIMEOUT_MS on top of the calls the survivor already holds.
    sipp = subprocess.Popen(
        ["sipp", "-sf", scenario, "-i", "127.0.0.1", "-p", str(free_port()),
         "-nostdin", "-timeout", "60s", "-s", "1000", "-m", "24", "-l", "4", "-r", "2", "-d", "1500",
         "-mp", str(free_media_ports()), "-trace_msg", "-message_file", str(trace), node.target],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        time.sleep(3.0)
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.time()
        node.wait_for(lambda: node.front_states().get(node.worker_uri(0), "").startswith("I"), 10,
                      "Kamailio to mark worker 0 inactive")
        down_s = time.time() - killed_at
        print(f"\nKamailio marked the killed worker down {down_s * 1000:.0f} ms after kill -9 (supervisor notice)")
        sipp.wait(timeout=60)
    finally:
        if sipp.poll() is None:
            sipp.kill()
    assert down_s < 1.0
    calls = sipp_calls(trace.read_text(errors="replace"))
    late = [c for c in calls.values() if c.invited_at > killed_at + down_s]
    assert len(late) >= 8, len(late)
    failed = [c for c in late if c.invite_status != [200] or c.bye_status != [200]]
    assert not failed, failed
    # a live worker always had a free slot for every caller: none was refused
    refused = [c for c in calls.values() if 503 in c.invite_status]
    assert not refused, refused

    health = node.wait_for(lambda: (lambda h: h if h["workers"][0]["status"] == "ready" else None)(node.health()),
                           30, "worker 0 restarted")
    assert health["workers"][0]["restarts"] == 1 and health["workers"][0]["pid"] != victim["pid"]
    assert "signal SIGKILL" in health["workers"][0]["last_exit"]
    node.wait_for(lambda: node.front_states().get(node.worker_uri(0), "") == "AP", 30, "worker 0 up in Kamailio")
    # the supervisor itself marked the new worker up when it said ready (not Kamailio's next probe)
    node.wait_for(lambda: re.search(r"kamailio: worker 0 \(\S+\) marked up", node.log()), 10,
                  "the supervisor's notice that worker 0 is up")
    m = node.metrics()
    assert m['openclaw_worker_restarts_total{reason="crashed",worker="0"}'] == 1
    result = run_sipp(scenario, node.target, "-s", "1000", "-m", "4", "-l", "4",
                      "-r", "20", "-d", "500", "-mp", str(free_media_ports()))
    assert result.returncode == 0, result.stdout.decode()[-2000:]
    assert node.metrics()['openclaw_calls_total{outcome="answered",worker="0"}'] >= 1, "the new worker 0 got no call"


def test_kamailio_probes_alone_notice_a_hung_worker(node: Node, tmp_path: Any) -> None:
    """A worker that hangs (SIGSTOP: its process lives, so only probes can tell) is marked down by
    Kamailio's own OPTIONS probes (every 1 s, 1 s timeout) within about two seconds; calls then go to the
    other worker without failing, and the worker rejoins when it answers again (SIGCONT)."""
    node.wait_for(lambda: node.front_states().get(node.worker_uri(1)) == "AP", 30, "worker 1 up")
    pid = node.health()["workers"][1]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        stopped_at = time.time()
        node.wait_for(lambda: node.front_states().get(node.worker_uri(1), "").startswith("I"), 10,
                      "Kamailio's probes to mark worker 1 down")
        down_s = time.time() - stopped_at
        print(f"\nKamailio's probes marked the hung worker down {down_s * 1000:.0f} ms after SIGSTOP")
        trace = tmp_path / "calls.log"
        result = run_sipp(os.path.join(SIPP_DIR, "caller-hold.xml"), node.target, "-s", "1000", "-m", "4",
                          "-l", "4", "-r", "20", "-d", "500", "-mp", str(free_media_ports()), "-trace_msg",
                          "-message_file", str(trace))
        assert result.returncode == 0, result.stdout.decode()[-2000:]
        calls = sipp_calls(trace.read_text(errors="replace"))
        assert [c.invite_status for c in calls.values()] == [[200]] * 4
    finally:
        os.kill(pid, signal.SIGCONT)
    assert down_s <= 2.6
    node.wait_for(lambda: node.front_states().get(node.worker_uri(1)) == "AP", 20, "worker 1 back up")
    assert node.health()["workers"][1]["restarts"] == 0


def test_sigterm_drains_calls_in_progress_finish_and_nothing_new_is_accepted(tmp_path: Any) -> None:
    """SIGTERM to the supervisor during 4 calls: workers answer Kamailio's probes 503 (marked down), a new
    call gets 503 + Retry-After, the 4 calls go on to the caller's own BYE, then every process exits 0."""
    node = start_node(str(tmp_path))
    try:
        kamailio_pid = node.health()["front"]["pid"]
        scenario = os.path.join(SIPP_DIR, "caller-utterance.xml")
        trace = tmp_path / "calls.log"
        sipp = subprocess.Popen(
            ["sipp", "-sf", scenario, "-i", "127.0.0.1", "-p", str(free_port()), "-nostdin", "-timeout", "60s",
             "-s", "1000", "-m", "4", "-l", "4", "-r", "20", "-mp", str(free_media_ports()), "-trace_msg",
             "-message_file", str(trace), node.target],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        node.wait_for(lambda: node.health()["active_calls"] == 4, 30, "4 calls up")
        node.proc.send_signal(signal.SIGTERM)
        node.wait_for(lambda: all(f.startswith("I") for f in node.front_states().values()), 15,
                      "Kamailio to mark both draining workers down")
        late = tmp_path / "late.log"
        result = run_sipp(os.path.join(SIPP_DIR, "caller-hold.xml"), node.target, "-s", "1000", "-m", "1",
                          "-l", "1", "-d", "500", "-mp", str(free_media_ports()), "-trace_msg", "-message_file", str(late))
        assert result.returncode == 0, result.stdout.decode()[-2000:]
        refused = list(sipp_calls(late.read_text(errors="replace")).values())
        assert refused[0].invite_status == [503] and refused[0].retry_after
        assert node.proc.poll() is None, "the supervisor must wait for the calls in progress"
        sipp.wait(timeout=40)
        assert sipp.returncode == 0, sipp.stdout.read().decode()[-3000:] if sipp.stdout else ""
        calls = sipp_calls(trace.read_text(errors="replace"))
        assert len(calls) == 4 and all(c.bye_status == [200] for c in calls.values())
        node.proc.wait(timeout=20)
        assert node.proc.returncode == 0
        records = node.records(0) + node.records(1)
        assert sorted(r["call_id"] for r in records) == sorted(calls)
        assert all(r["end_reason"].startswith("disconnected 200") for r in records)
        assert all(r["duration_s"] > 10 for r in records)
        with pytest.raises(ProcessLookupError):
            os.kill(kamailio_pid, 0)
        log = node.log()
        assert "draining" in log and "supervisor stopped" in log
    finally:
        stop_node(node)


_HOLD_UNTIL_BYE = """<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="wait for the agent's BYE">
  <send retrans="500"><![CDATA[
INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: <sip:5550102@[local_ip]:[local_port]>;tag=[pid]T[call_number]
To: <sip:[service]@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 INVITE
Contact: <sip:5550102@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Type: application/sdp
Content-Length: [len]

v=0
o=sipp 1 1 IN IP4 [local_ip]
s=-
c=IN IP4 [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 0
a=rtpmap:0 PCMU/8000
]]></send>
  <recv response="100" optional="true"/>
  <recv response="200" rrs="true"/>
  <send><![CDATA[
ACK [next_url] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: <sip:5550102@[local_ip]:[local_port]>;tag=[pid]T[call_number]
To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
Call-ID: [call_id]
[routes]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0
]]></send>
  <recv request="BYE" timeout="40000"/>
  <send><![CDATA[
SIP/2.0 200 OK
[last_Via:]
[last_From:]
[last_To:]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0
]]></send>
</scenario>
"""


def test_second_sigterm_ends_calls_with_a_goodbye_then_bye(tmp_path: Any) -> None:
    """A second SIGTERM during the drain: the agent says goodbye on each call, then sends BYE itself
    (through Kamailio), and the node exits 0."""
    node = start_node(str(tmp_path))
    try:
        scenario = tmp_path / "wait-bye.xml"
        scenario.write_text(_HOLD_UNTIL_BYE)
        sipp = subprocess.Popen(
            ["sipp", "-sf", str(scenario), "-i", "127.0.0.1", "-p", str(free_port()), "-nostdin", "-timeout", "60s",
             "-s", "1000", "-m", "2", "-l", "2", "-r", "20", "-mp", str(free_media_ports()), node.target],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        node.wait_for(lambda: node.health()["active_calls"] == 2, 30, "2 calls up")
        time.sleep(1.0)
        node.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert node.proc.poll() is None
        node.proc.send_signal(signal.SIGTERM)
        sipp.wait(timeout=30)
        assert sipp.returncode == 0, sipp.stdout.read().decode()[-3000:] if sipp.stdout else ""
        node.proc.wait(timeout=20)
        assert node.proc.returncode == 0
        records = node.records(0) + node.records(1)
        assert len(records) == 2
        for r in records:
            said = [p for t in r["turns"] for p in t["agent"] if p["text"].startswith(GOODBYE)]
            assert said and said[-1]["played_ms"] > 3000 and not said[-1]["interrupted"], said
        assert node.log().count("hanging up: server stopping") == 2
    finally:
        stop_node(node)
