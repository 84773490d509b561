"""End-to-end calls against the real server process over loopback.

SIPp and the project's own pjsua2 test caller place real SIP calls with real
RTP; the agent recognises and synthesises speech with the embedded speech
server; what the agent said is checked by capturing its RTP on ``lo`` and
transcribing it.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent.speech.client import RecognitionOptions, SpeechClient
from media.pcap import rtp_streams
from tests.integration.conftest import (
    ROOT, AgentProcess, Capture, free_media_ports, free_port, heard_balance, run_caller, run_sipp, start_agent,
    stop_agent,
)

pytestmark = pytest.mark.integration

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")


def transcribe_8k(speech_uri: str, pcm8k: bytes) -> str:
    client = SpeechClient(speech_uri)
    finals: list[str] = []
    try:
        stream = client.open_recognition(RecognitionOptions(sample_rate_hz=8000, interim_results=False),
                                         on_interim=lambda t: None,
                                         on_final=lambda t, c: finals.append(t), on_error=lambda e: None)
        for i in range(0, len(pcm8k), 1600):
            stream.push_audio(pcm8k[i:i + 1600])
        stream.push_audio(bytes(16000))
        stream.end_input()
        stream.wait_done(30.0)
        stream.close()
    finally:
        client.close()
    return " ".join(finals)


def wait_idle(agent: AgentProcess) -> None:
    agent.wait_for(lambda: agent.metrics().get("openclaw_active_calls") == 0.0, 30.0, "no active calls")


def test_sipp_caller_asking_for_balance_hears_the_balance(agent: AgentProcess, tmp_path) -> None:
    """(a) A SIPp call streaming "check my balance" (PCMU) gets the balance prompt back on the wire."""
    wait_idle(agent)
    media_port = free_media_ports()
    cap = Capture(str(tmp_path / "call.pcap"), f"udp port {media_port}")
    try:
        result = run_sipp(os.path.join(SIPP_DIR, "caller-utterance.xml"), f"127.0.0.1:{agent.sip_port}",
                          "-s", "1000", "-m", "1", "-l", "1", "-mp", str(media_port))
    finally:
        pcap = cap.stop()
    assert result.returncode == 0, result.stdout.decode()[-2000:] + result.stderr.decode()[-2000:]
    streams = rtp_streams(pcap, {media_port})
    caller = [s for s in streams if s.sport == media_port]
    to_caller = [s for s in streams if s.dport == media_port]
    assert caller and to_caller, f"RTP both ways expected, got {[(s.sport, s.dport) for s in streams]}"
    caller_end = max(p.at_s for p in caller[0].packets)
    reply = to_caller[0]
    after = type(reply)(reply.src, reply.sport, reply.dst, reply.dport, reply.ssrc,
                        [p for p in reply.packets if p.at_s > caller_end])
    text = transcribe_8k(agent.speech_uri, after.audio(8000))
    assert heard_balance(text), text
    wait_idle(agent)
    record = agent.records()[-1]
    intents = [e["intent"] for e in record["dialogue"] if e["kind"] == "intent"]  # type: ignore[index,union-attr]
    assert intents[:1] == ["balance"], record


def test_five_simultaneous_calls_at_capacity_four(agent: AgentProcess, tmp_path) -> None:
    """(b) Five calls at once against capacity 4: four answered, one 503 with Retry-After."""
    wait_idle(agent)
    before = agent.metrics()
    trace = tmp_path / "messages.log"
    result = run_sipp(os.path.join(SIPP_DIR, "caller-hold.xml"), f"127.0.0.1:{agent.sip_port}",
                      "-s", "1000", "-m", "5", "-l", "5", "-r", "50", "-d", "4000", "-mp", str(free_media_ports()),
                      "-trace_msg", "-message_file", str(trace))
    assert result.returncode == 0, result.stdout.decode()[-2000:] + result.stderr.decode()[-2000:]
    messages = trace.read_text(errors="replace")
    answered = len(re.findall(r"^SIP/2\.0 200 OK\s*$(?:(?!^\s*$).)*?CSeq: 1 INVITE", messages, re.M | re.S))
    busy = re.findall(r"^SIP/2\.0 503 [^\n]*\n(?:(?!\n\s*\n).)*", messages, re.M | re.S)
    assert len(busy) == 1, messages[-3000:]
    assert re.search(r"^Retry-After: *\d+", busy[0], re.M), busy[0]
    assert answered == 4, messages[-3000:]
    assert "486" not in re.findall(r"^SIP/2\.0 (\d+)", messages, re.M)
    after = agent.metrics()
    key = 'openclaw_calls_total{outcome="rejected_capacity"}'
    assert after[key] - before[key] == 1
    assert after['openclaw_calls_total{outcome="answered"}'] - before['openclaw_calls_total{outcome="answered"}'] == 4
    wait_idle(agent)


def test_bye_during_greeting_tears_the_call_down(agent: AgentProcess, tmp_path) -> None:
    """(c) The caller hangs up one second into the greeting: no call, stream or gauge is left behind."""
    wait_idle(agent)
    n_records = len(agent.records())
    result = run_sipp(os.path.join(SIPP_DIR, "caller-hold.xml"), f"127.0.0.1:{agent.sip_port}",
                      "-s", "1000", "-m", "1", "-l", "1", "-d", "1000", "-mp", str(free_media_ports()))
    assert result.returncode == 0, result.stdout.decode()[-2000:]
    records = agent.wait_for(lambda: agent.records()[n_records:], 15.0, "the call record")
    record = records[-1]
    assert str(record["end_reason"]).startswith("disconnected"), record
    greeting = record["turns"][0]["agent"][0]  # type: ignore[index]
    assert greeting["total_ms"] is None or greeting["played_ms"] < greeting["total_ms"], greeting
    m = agent.metrics()
    assert m["openclaw_active_calls"] == 0.0
    assert agent.health()["active_calls"] == 0
    cid = record["call_id"]
    assert f"call {cid} session closed" in agent.log()


def test_caller_talking_over_the_greeting_stops_it(agent: AgentProcess) -> None:
    """(d) Speech during the greeting stops the agent's audio (within a generous 400 ms) and is answered."""
    wait_idle(agent)
    code, report, out = run_caller(agent.uri, "--barge-in-at", "600", "--say", "check my balance")
    assert code == 0, out[-3000:]
    turn = report["turns"][0]  # type: ignore[index]
    assert turn["barge_in_ms"] is not None and turn["barge_in_ms"] <= 400, turn
    assert heard_balance(str(turn["agent_text"])), turn
    wait_idle(agent)
    intents = [e["intent"] for e in agent.records()[-1]["dialogue"] if e["kind"] == "intent"]  # type: ignore[index,union-attr]
    assert intents[:1] == ["balance"], intents


def test_dtmf_one_works_like_saying_balance(agent: AgentProcess) -> None:
    """(e) RFC 4733 DTMF 1 gets the balance prompt; 4 says goodbye and the agent hangs up."""
    wait_idle(agent)
    code, report, out = run_caller(agent.uri, "--dtmf", "1", "--dtmf", "4")
    assert code == 0, out[-3000:]
    first, second = report["turns"]  # type: ignore[misc]
    # The balance prompt, as the caller's recogniser hears it ...
    assert heard_balance(str(first["agent_text"])), first
    # The goodbye prompt, "Thank you for calling OpenClaw Bank. Goodbye!", as the caller's
    # recogniser hears it: Whisper sometimes stops at the brand name, so either end will do ...
    said = str(second["agent_text"])
    assert "goodbye" in said or "thank you for calling" in said, second
    assert report["hung_up_by"] == "agent"
    # ... and the call record says which steps spoke, in order: key 1 the balance, key 4 goodbye.
    wait_idle(agent)
    steps = [e["step"] for e in agent.records()[-1]["dialogue"] if e["kind"] == "step"]  # type: ignore[index,union-attr]
    assert steps[-4:] == ["balance", "anything_else", "goodbye", "bye"], steps


def test_test_caller_reports_turns_and_latency(agent: AgentProcess) -> None:
    """The pjsua2 test caller speaks, hears the reply, transcribes it and times it."""
    wait_idle(agent)
    code, report, out = run_caller(agent.uri, "--say", "what are your opening hours")
    assert code == 0, out[-3000:]
    assert report["answered"] and report["codec"] == "PCMU"
    assert "thank you for calling" in str(report["greeting"])
    turn = report["turns"][0]  # type: ignore[index]
    heard = set(str(turn["agent_text"]).split())
    assert len(heard & {"open", "monday", "friday", "morning", "afternoon"}) >= 2, turn
    assert 0 < turn["latency_ms"] < 5000, turn


def test_an_acknowledgement_after_the_menu_is_no_answer(agent: AgentProcess) -> None:
    """ "Okay" said after the menu was asked is not a request the agent failed to understand: no
    "sorry, I did not understand", nothing counted against the caller; the agent waits (its
    no-input prompt comes when the caller says nothing more), and "check my balance" is then
    answered."""
    wait_idle(agent)
    before = len(agent.records())
    # --silence 2.5: "okay" only once the menu is over (a loaded machine can stretch the gaps
    # between prompts past the caller's usual 1.2 s, and an "okay" over the menu is a barge-in)
    code, report, out = run_caller(agent.uri, "--silence", "2.5", "--say", "okay", "--say", "check my balance")
    assert code == 0, out[-3000:]
    agent.wait_for(lambda: len(agent.records()) > before, 30.0, "the call record")
    record = agent.records()[-1]
    kinds = [e["kind"] for e in record["dialogue"]]  # type: ignore[index,union-attr]
    assert "no_match" not in kinds, record["dialogue"]
    intents = [e["intent"] for e in record["dialogue"] if e["kind"] == "intent"]  # type: ignore[index,union-attr]
    assert intents == ["balance"], record["dialogue"]
    # The "okay" was heard as an acknowledgement: a turn that is no answer, or (when the caller's
    # timing put it over the end of the menu) a voice the prompt went on over.
    over_menu = any(p["outcome"] in ("resumed", "played_on", "ducked") for p in record["prompt_pauses"])
    assert "only an acknowledgement" in agent.log() or over_menu, agent.log()[-3000:]


def test_g722_and_pcma_calls_are_answered(agent: AgentProcess) -> None:
    """A-law and G.722 callers are understood too (the two calls at once: the agent holds 4)."""
    wait_idle(agent)
    codecs = ("PCMA", "G722")
    with ThreadPoolExecutor(len(codecs)) as pool:
        results = list(pool.map(lambda codec: run_caller(agent.uri, "--codec", codec, "--say", "check my balance"),
                                codecs))
    for codec, (code, report, out) in zip(codecs, results):
        assert code == 0, out[-3000:]
        assert report["codec"] == codec
        assert "balance" in report["turns"][0]["agent_text"], report  # type: ignore[index]


def test_offer_without_a_supported_codec_gets_488(agent: AgentProcess, tmp_path) -> None:
    """An INVITE offering only GSM is refused with 488 Not Acceptable Here."""
    scenario = open(os.path.join(SIPP_DIR, "caller-hold.xml")).read()
    scenario = scenario.replace("RTP/AVP 0 101", "RTP/AVP 3").replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:3 GSM/8000")
    scenario = scenario.replace('<recv response="503" optional="true" next="busy">',
                                '<recv response="488" optional="true" next="busy"><action></action></recv>\n'
                                '  <recv response="503" optional="true" next="busy">')
    path = tmp_path / "gsm-only.xml"
    path.write_text(scenario)
    trace = tmp_path / "gsm.log"
    result = run_sipp(str(path), f"127.0.0.1:{agent.sip_port}", "-s", "1000", "-m", "1", "-l", "1",
                      "-mp", str(free_media_ports()), "-trace_msg", "-message_file", str(trace))
    assert re.search(r"^SIP/2\.0 488", trace.read_text(errors="replace"), re.M), \
        trace.read_text(errors="replace")[-2000:] + result.stdout.decode()[-1000:]
    assert agent.proc.poll() is None


def test_unrouted_number_gets_404_and_bad_dialplan_refuses_to_start(tmp_path) -> None:
    """A number no route matches gets 404; a dialplan with an unknown key stops the server with file:line."""
    dialplan = tmp_path / "sales.yaml"
    dialplan.write_text(
        "version: 1\n"
        "routes:\n"
        "  - number: _2XXX\n"
        "    flow: main\n"
        "flows:\n"
        "  main:\n"
        "    steps:\n"
        "      - say: Welcome to the sales line. Goodbye.\n"
        "      - hangup: {reason: done}\n")
    agent = start_agent(str(tmp_path), "--dialplan", str(dialplan))
    try:
        code, report, out = run_caller(f"sip:1000@127.0.0.1:{agent.sip_port}", "--say", "hello")
        assert code != 0 and report["status"] == 404, out[-2000:]
        code, report, out = run_caller(f"sip:2000@127.0.0.1:{agent.sip_port}", "--say", "hello")
        assert report["answered"] and "goodbye" in str(report["greeting"]), out[-2000:]
        assert report["hung_up_by"] == "agent"
        m = agent.metrics()
        assert m['openclaw_calls_total{outcome="rejected_no_route"}'] == 1.0
    finally:
        assert stop_agent(agent) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(dialplan.read_text().replace("    flow: main\n", "    flow: main\n    flaw: x\n"))
    port = free_port()
    proc = subprocess.run([os.path.join(os.path.dirname(os.sys.executable), "openclaw-voice"), "serve",
                           "--host", "127.0.0.1", "--port", str(port), "--dialplan", str(bad)],
                          capture_output=True, timeout=60)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert f"{bad}:5:5:" in err and "flaw" in err, err


def test_trunk_registration_with_digest_refreshes_and_is_exposed(tmp_path) -> None:
    """The agent registers with digest credentials, refreshes before expiry, and reports it in metrics."""
    from tests.integration.registrar import FakeRegistrar

    registrar = FakeRegistrar("trunkuser", "s3cret", grant_expires_s=8)
    config = tmp_path / "config.yaml"
    config.write_text(
        "sip:\n"
        "  registration:\n"
        f"    registrar: sip:127.0.0.1:{registrar.port}\n"
        "    aor: sip:trunkuser@127.0.0.1\n"
        "    username: trunkuser\n"
        "    password: s3cret\n"
        "    expires_s: 60\n")
    agent = start_agent(str(tmp_path), "--config", str(config))
    try:
        agent.wait_for(lambda: len(registrar.authorized()) >= 2, 30.0, "a registration and its refresh")
        first, second = registrar.authorized()[:2]
        assert second.at - first.at < 8.0, "refreshed before the granted 8 s expired"
        assert registrar.registrations[0].authorized is False, "the first REGISTER was challenged"
        m = agent.metrics()
        assert m["openclaw_sip_registration_up"] == 1.0
        assert m["openclaw_sip_registration_status_code"] == 200.0
        assert "registration: 200" in agent.log()
    finally:
        assert stop_agent(agent) == 0
        registrar.stop()

    wrong = FakeRegistrar("trunkuser", "other-password")
    config.write_text(config.read_text().replace(str(registrar.port), str(wrong.port)))
    agent = start_agent(str(tmp_path), "--config", str(config))
    try:
        agent.wait_for(lambda: agent.metrics()["openclaw_sip_registration_status_code"] == 403.0, 30.0,
                       "the rejected registration to show")
        assert agent.metrics()["openclaw_sip_registration_up"] == 0.0
    finally:
        assert stop_agent(agent) == 0
        wrong.stop()
