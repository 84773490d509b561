"""SIP behaviour carriers test, with SIPp against the real server over loopback: CANCEL before the
answer, hold and resume (re-INVITE and UPDATE), DTMF in SIP INFO, early media, session timers
reaping a dead dialog, and a BYE crossing the agent's own.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from typing import Iterator

import pytest

from media.convert import rms_dbfs
from media.pcap import packet_pcm, read_udp, rtp_streams
from tests.integration.conftest import (
    ROOT, AgentProcess, Capture, free_media_ports, free_port, run_caller, start_agent, stop_agent,
)

pytestmark = pytest.mark.integration

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")
#: the two flows of the agent that tests timers and hang-ups: one waits (no-input 120 s), one
#: says goodbye and hangs up at once
DIALPLAN = """version: 1
routes:
  - {number: "2000", flow: waits}
  - {number: "3000", flow: hangs_up}
flows:
  waits:
    settings: {no_input_timeout_ms: 120000}
    steps:
      - id: menu
        ask:
          prompt: "Hello. Say goodbye to end the call."
          intents:
            bye: {examples: [goodbye], goto: done}
      - id: done
        hangup: {reason: caller_done}
  hangs_up:
    steps:
      - id: bye
        say: "Goodbye."
      - id: end
        hangup: {reason: ordered}
"""


#: session timers of 90 s (RFC 4028's smallest interval: pjsip reaps a dead dialog 60 s in)
TIMERS = "sip:\n  session_timers:\n    mode: optional\n    expires_s: 90\n    min_se_s: 90\n"


def sipp(scenario: str, agent: AgentProcess, *args: str, sip_port: int = 0, media_port: int = 0,
         timeout_s: float = 120.0, trace: str = "") -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("sipp")
    assert exe, "sipp (Debian package sip-tester) is not installed; run ops/bootstrap.sh"
    cmd = [exe, "-sf", os.path.join(SIPP_DIR, scenario), "-i", "127.0.0.1", "-p", str(sip_port or free_port()),
           "-mp", str(media_port or free_port()), "-nostdin", "-timeout", f"{int(timeout_s)}s", "-timeout_error",
           *(("-trace_msg", "-message_file", trace) if trace else ()), *args, f"127.0.0.1:{agent.sip_port}"]
    result = subprocess.run(cmd, capture_output=True, timeout=timeout_s + 30, cwd=ROOT)
    assert result.returncode == 0, (result.stdout.decode(errors="replace")[-2500:]
                                    + result.stderr.decode(errors="replace")[-1500:]
                                    + (open(trace, errors="replace").read()[-3000:] if trace else ""))
    return result


def _agent(tmp: str, config: str, *extra: str, capacity: int = 1) -> AgentProcess:
    path = os.path.join(tmp, "config.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(config)
    rtp = free_port()
    return start_agent(tmp, "--config", path, "--rtp-port", str(rtp), "--rtp-port-range", "16", *extra,
                       capacity=capacity, ready_timeout_s=180.0)


def _finish(agent: AgentProcess) -> None:
    assert stop_agent(agent) == 0, agent.log()[-3000:]
    assert "Traceback" not in agent.log(), agent.log()[-6000:]


@pytest.fixture(scope="module")
def ringing_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """The default dialplan, 180 Ringing for 1.5 s before the answer, capacity 1."""
    a = _agent(str(tmp_path_factory.mktemp("ringing")), "sip:\n  answer:\n    ring_ms: 1500\n")
    yield a
    _finish(a)


@pytest.fixture(scope="module")
def timer_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """Session timers of 90 s, the waiting and hanging-up flows, capacity 1."""
    tmp = str(tmp_path_factory.mktemp("timers"))
    dialplan = os.path.join(tmp, "flows.yaml")
    with open(dialplan, "w", encoding="utf-8") as f:
        f.write(DIALPLAN)
    a = _agent(tmp, TIMERS, "--dialplan", dialplan)
    yield a
    _finish(a)


def _idle(agent: AgentProcess) -> None:
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 60.0, "no active calls")


def _answered(agent: AgentProcess) -> float:
    return agent.metrics().get('openclaw_calls_total{outcome="answered"}', 0.0)


def _record(agent: AgentProcess, call_id: str) -> dict[str, object]:
    # The record is written when the agent has finished with the call, which may be a moment
    # after SIPp has seen the last response.
    agent.wait_for(lambda: any(r["call_id"] == call_id for r in agent.records()), what=f"the record of {call_id}")
    found = [r for r in agent.records() if r["call_id"] == call_id]
    assert len(found) == 1, f"{len(found)} records of {call_id}"
    return found[0]


def _call_ids(trace: str) -> list[str]:
    ids: list[str] = []
    with open(trace, errors="replace") as f:
        for line in f:
            if line.startswith("Call-ID:") and line.split(":", 1)[1].strip() not in ids:
                ids.append(line.split(":", 1)[1].strip())
    return ids


def test_cancel_before_answer_frees_the_call(ringing_agent: AgentProcess, tmp_path) -> None:
    """A CANCEL while the agent rings gets 200, the INVITE 487; the call is recorded as cancelled,
    and the only slot (capacity 1) is free at once for the next call, which is answered."""
    agent = ringing_agent
    _idle(agent)
    trace = str(tmp_path / "cancel.log")
    sipp("caller-cancel.xml", agent, "-s", "1000", "-m", "1", timeout_s=30, trace=trace)
    (call_id,) = _call_ids(trace)
    record = _record(agent, call_id)
    assert "487" in str(record["end_reason"]) and record["turns"] == [], record
    assert agent.metrics().get("openclaw_active_calls") == 0.0
    answered = _answered(agent)
    sipp("caller-hold.xml", agent, "-s", "1000", "-m", "1", "-d", "1000", timeout_s=30)
    assert _answered(agent) == answered + 1


def _sip_times(pcap: str, port: int) -> list[tuple[float, str]]:
    """(time, first line + CSeq) of every SIP message to or from *port* in the capture."""
    out = []
    with open(pcap, "rb") as f:
        for p in read_udp(f):
            if port in (p.sport, p.dport) and p.payload[:3] in (b"SIP", b"INV", b"UPD", b"ACK", b"BYE"):
                text = p.payload.decode(errors="replace")
                cseq = next((ln for ln in text.split("\r\n") if ln.lower().startswith("cseq:")), "")
                out.append((p.at_s, text.split("\r\n", 1)[0] + " | " + cseq))
    return out


@pytest.mark.parametrize("scenario,method", [("caller-hold-reinvite.xml", "INVITE"),
                                             ("caller-hold-update.xml", "UPDATE")])
def test_hold_and_resume(ringing_agent: AgentProcess, tmp_path, scenario: str, method: str) -> None:
    """On hold for 22 s (longer than the greeting, the menu prompt and its 5 s no-input wait
    together) the agent sends no voice and neither talks on nor counts silence; after the resume
    its prompt goes on from where it stopped, and the caller's "check my balance" is answered."""
    agent = ringing_agent
    _idle(agent)
    sip_port, media_port = free_media_ports(), free_port()
    trace = str(tmp_path / "hold.log")
    cap = Capture(str(tmp_path / "hold.pcap"), f"udp port {sip_port} or udp port {media_port}")
    try:
        sipp(scenario, agent, "-s", "1000", "-m", "1", "-d", "22000", sip_port=sip_port, media_port=media_port,
             timeout_s=90, trace=trace)
    finally:
        pcap = cap.stop()
    (call_id,) = _call_ids(trace)
    _idle(agent)
    record = _record(agent, call_id)
    assert record["holds"] == 1 and 20.0 < float(record["held_s"]) < 30.0, record  # type: ignore[arg-type]
    assert f"call {call_id} no input" not in agent.log()
    turns = record["turns"]
    assert isinstance(turns, list) and len(turns) == 2 and turns[1]["caller"] == "check my balance", turns
    # Before the caller spoke the agent had been heard 1.3 s before the hold and 1 s after it,
    # then under the caller's request, ducked, until it was judged (4.52 s in all once, on a
    # loaded machine): talking on during the hold, its prompts would have played ~13 s more.
    said_ms = sum(p["played_ms"] for p in turns[0]["agent"])
    assert said_ms < 6000, turns[0]
    assert any(e["intent"] == "balance" for e in record["dialogue"]), record  # type: ignore[union-attr,index]
    sip = _sip_times(pcap, sip_port)
    held_at = next(t for t, m in sip if m.startswith("SIP/2.0 200") and f"2 {method}" in m)
    resumed_at = next(t for t, m in sip if m.startswith(method) and f"3 {method}" in m)
    to_caller = [s for s in rtp_streams(pcap, {media_port}) if s.dport == media_port]
    assert to_caller, "no RTP from the agent"
    voiced = [p.at_s for s in to_caller for p in s.packets
              if (pcm := packet_pcm(p)) is not None and rms_dbfs(pcm) > -40.0]
    assert not [t for t in voiced if held_at + 0.3 < t < resumed_at], "the agent talked into the held line"
    assert len([t for t in voiced if t > resumed_at]) > 100, "the agent's audio did not come back"
    assert len([t for t in voiced if t < held_at]) > 25


def test_dtmf_in_sip_info(ringing_agent: AgentProcess, tmp_path) -> None:
    """INFO with application/dtmf-relay (Signal=1) and with application/dtmf (body 2) each get
    200 OK and act as keys: 1 chooses the balance, 2 the opening hours."""
    agent = ringing_agent
    _idle(agent)
    trace = str(tmp_path / "info.log")
    sipp("caller-info-dtmf.xml", agent, "-s", "1000", "-m", "1", timeout_s=60, trace=trace)
    (call_id,) = _call_ids(trace)
    _idle(agent)
    record = _record(agent, call_id)
    keys = [(e["text"], e["intent"]) for e in record["dialogue"] if e["kind"] == "intent"]  # type: ignore[index,union-attr]
    assert keys == [("dtmf 1", "balance"), ("dtmf 2", "hours")], record["dialogue"]
    assert [t["dtmf"] for t in record["turns"]][1:] == ["1", "2"], record["turns"]  # type: ignore[union-attr,index]


def test_early_media(tmp_path) -> None:
    """early_media: the agent answers 183 with SDP and its greeting is on the wire before the 200."""
    agent = _agent(str(tmp_path), "sip:\n  answer:\n    ring_ms: 2500\n    early_media: true\n")
    try:
        sip_port, media_port = free_media_ports(), free_port()
        cap = Capture(str(tmp_path / "early.pcap"), f"udp port {sip_port} or udp port {media_port}")
        try:
            sipp("caller-early-media.xml", agent, "-s", "1000", "-m", "1", sip_port=sip_port, media_port=media_port,
                 timeout_s=30)
        finally:
            pcap = cap.stop()
        sip = _sip_times(pcap, sip_port)
        progress_at = next(t for t, m in sip if m.startswith("SIP/2.0 183"))
        answered_at = next(t for t, m in sip if m.startswith("SIP/2.0 200") and "1 INVITE" in m)
        assert answered_at - progress_at > 2.0, sip
        voiced = [p.at_s for s in rtp_streams(pcap, {media_port}) if s.dport == media_port for p in s.packets
                  if (pcm := packet_pcm(p)) is not None and rms_dbfs(pcm) > -40.0]
        early = [t for t in voiced if progress_at < t < answered_at]
        assert len(early) > 50, f"{len(early)} voiced packets before the 200 OK"
    finally:
        _finish(agent)


def test_bye_crossing_the_agents_bye(timer_agent: AgentProcess, tmp_path) -> None:
    """Three calls whose caller sends BYE while the agent's own BYE is unanswered: every call
    gets one record, nothing fails, and the one slot (capacity 1) is free after each."""
    agent = timer_agent
    _idle(agent)
    trace = str(tmp_path / "race.log")
    sipp("caller-bye-race.xml", agent, "-s", "3000", "-m", "3", "-l", "1", timeout_s=90, trace=trace)
    ids = _call_ids(trace)
    assert len(ids) == 3
    _idle(agent)
    for cid in ids:
        record = _record(agent, cid)
        assert record["turns"][0]["agent"][0]["text"] == "Goodbye.", record  # type: ignore[index]
    assert agent.metrics().get('openclaw_calls_total{outcome="rejected_capacity"}', 0.0) == 0.0


def test_rfc4733_dtmf_still_works(ringing_agent: AgentProcess) -> None:
    """The RFC 4733 path next to INFO: the pjsua2 caller's key 1 (telephone-event) gets the balance.
    (Its optional SRTP offer is answered with plain RTP by an agent whose SRTP is off.)"""
    agent = ringing_agent
    _idle(agent)
    before = len(agent.records())
    code, report, out = run_caller(agent.uri, "--dtmf", "1", "--srtp", "optional", timeout_s=120)
    assert code == 0, out[-3000:]
    assert report["srtp"] is False, report  # keys offered, but this agent's SRTP is off
    assert report["turns"][0]["agent_text"], report  # type: ignore[index]  # the caller heard the reply
    # What the key chose is read from the agent's record, not from the caller's recognition of the
    # reply, which a loaded machine can garble.
    agent.wait_for(lambda: len(agent.records()) > before, what="the call's record")
    (record,) = agent.records()[before:]
    keys = [(e["text"], e["intent"]) for e in record["dialogue"] if e["kind"] == "intent"]  # type: ignore[index,union-attr]
    assert keys[:1] == [("dtmf 1", "balance")], record["dialogue"]


class DeadDialog:
    """A caller that asked for session timers and then goes silent, started with the module: its minute
    of waiting for the agent's BYE runs beside the other tests, on its own agent (capacity 1)."""

    def __init__(self, tmp: str) -> None:
        dialplan = os.path.join(tmp, "flows.yaml")
        with open(dialplan, "w", encoding="utf-8") as f:
            f.write(DIALPLAN)
        self.agent = _agent(tmp, TIMERS, "--dialplan", dialplan)
        self.trace = os.path.join(tmp, "timer.log")
        self.output = os.path.join(tmp, "sipp.out")
        self._out = open(self.output, "wb")  # (a pipe could fill up while nobody reads it)
        exe = shutil.which("sipp")
        assert exe, "sipp (Debian package sip-tester) is not installed; run ops/bootstrap.sh"
        self.started = time.monotonic()
        self.ended = 0.0
        self.proc = subprocess.Popen(
            [exe, "-sf", os.path.join(SIPP_DIR, "caller-session-timer.xml"), "-i", "127.0.0.1", "-p", str(free_port()),
             "-mp", str(free_media_ports()), "-nostdin", "-timeout", "120s", "-timeout_error", "-trace_msg",
             "-message_file", self.trace, "-s", "2000", "-m", "1", f"127.0.0.1:{self.agent.sip_port}"],
            stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT)
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()

    def result(self, timeout_s: float = 150.0) -> tuple[int, float, str]:
        """(SIPp's exit status, seconds from its start to its end, its output)."""
        self._waiter.join(timeout_s)
        assert not self._waiter.is_alive(), "SIPp did not end"
        with open(self.output, encoding="utf-8", errors="replace") as f:
            return self.proc.returncode, self.ended - self.started, f.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        _finish(self.agent)


@pytest.fixture(scope="module", autouse=True)
def dead_dialog(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeadDialog | None]:
    """Started first when test_session_timer_reaps_a_dead_dialog is to run (else nothing is started)."""
    if not any(item.name == "test_session_timer_reaps_a_dead_dialog" and item.module is request.module
               for item in request.session.items):
        yield None
        return
    run = DeadDialog(str(tmp_path_factory.mktemp("dead-dialog")))
    yield run
    run.close()


def test_session_timer_reaps_a_dead_dialog(dead_dialog: DeadDialog) -> None:
    """A caller that asked for a 90 s session interval and then never refreshes (dead) is sent a
    BYE by the agent about 60 s in, although the dialogue would wait 120 s for it. (The call was
    placed when the module started; this test, the module's last, collects it.)"""
    agent = dead_dialog.agent
    code, elapsed, out = dead_dialog.result()
    assert code == 0, out[-2500:] + open(dead_dialog.trace, errors="replace").read()[-3000:]
    assert 50.0 < elapsed < 95.0, elapsed
    (call_id,) = _call_ids(dead_dialog.trace)
    _idle(agent)
    record = _record(agent, call_id)
    assert "408" in str(record["end_reason"]), record  # "disconnected 408 No session refresh received."
