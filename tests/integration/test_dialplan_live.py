"""Dialplans in a running server: the bank example's transfer over real SIP, and hot reload
while a call is in progress."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from tests.integration.conftest import ROOT, free_media_ports, free_port, run_sipp, start_agent, stop_agent

pytestmark = pytest.mark.integration

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")


def test_sipp_caller_reaches_the_bank_lines_transfer(tmp_path) -> None:
    """A SIPp caller asks the bank example for an agent: the agent sends REFER to the queue and,
    once SIPp reports the transfer succeeded, hangs up."""
    bank = open(os.path.join(ROOT, "dialplans", "bank.yaml")).read()
    # Open around the clock (the test must not depend on when it runs), no holidays.
    bank = re.sub(r"          open:\n(?:            .*\n)+", '          open: {daily: "00:00-24:00"}\n', bank, count=1)
    bank = re.sub(r"          holidays:\n(?:            - .*\n)+", "", bank, count=1)
    bank = bank.replace("          holiday: holiday\n", "")
    bank = re.sub(r"\n      - id: holiday\n.*?\n        next: voicemail\n", "\n", bank, flags=re.S)
    dialplan = tmp_path / "bank.yaml"
    dialplan.write_text(bank)
    config = tmp_path / "config.yaml"
    config.write_text(
        "variables:\n"
        "  support_queue_uri: sip:support@127.0.0.1:5999\n"
        "  bank_api_url: http://127.0.0.1:9\n"
        "  bank_api_token: test\n")
    agent = start_agent(str(tmp_path), "--config", str(config), "--dialplan", str(dialplan))
    try:
        trace = tmp_path / "transfer.log"
        result = run_sipp(os.path.join(SIPP_DIR, "caller-transfer.xml"), f"127.0.0.1:{agent.sip_port}",
                          "-s", "2000", "-m", "1", "-l", "1", "-mp", str(free_media_ports()),
                          "-trace_msg", "-message_file", str(trace), timeout_s=90)
        messages = trace.read_text(errors="replace")
        assert result.returncode == 0, messages[-4000:] + agent.log()[-3000:]
        refer = re.search(r"^REFER .*?(?=\n\s*\n)", messages, re.M | re.S)
        assert refer and re.search(r"^Refer-To: *<?sip:support@127\.0\.0\.1:5999", refer.group(0), re.M | re.I), \
            messages[-3000:]
        record = agent.wait_for(lambda: agent.records(), 15.0, "the call record")[-1]
        assert record["transfer_target"] == "sip:support@127.0.0.1:5999"
        steps = [e["step"] for e in record["dialogue"] if e["kind"] == "step"]  # type: ignore[index,union-attr]
        assert steps[:3] == ["welcome", "check_hours", "get_account"] and "to_agent" in steps, steps
        assert agent.metrics()['openclaw_transfers_total{result="succeeded"}'] == 1.0
    finally:
        assert stop_agent(agent) == 0


FLOW = """version: 1
routes:
  - flow: main
flows:
  main:
    settings: {{no_input_timeout_ms: 20000}}
    steps:
      - id: {name}_greeting
        say: "This is the {name} line."
      - id: {name}_menu
        ask:
          prompt: "Say goodbye when you are done."
          intents:
            bye: {{examples: ["goodbye"], goto: {name}_bye}}
          no_input: {{reprompts: [], then: {name}_bye}}
          no_match: {{reprompts: [], then: {name}_bye}}
      - id: {name}_bye
        say: "Goodbye."
      - hangup:
"""


def steps_of(record) -> list[str]:  # type: ignore[no-untyped-def]
    return [e["step"] for e in record["dialogue"] if e["kind"] == "step"]


def test_hot_reload_keeps_calls_on_their_version(tmp_path) -> None:
    """A call in progress finishes on the version it started with, the next call gets the new one,
    and an invalid edit changes nothing."""
    dialplan = tmp_path / "live.yaml"
    dialplan.write_text(FLOW.format(name="first"))
    agent = start_agent(str(tmp_path), "--dialplan", str(dialplan))
    sipp_a = None
    try:
        hold = os.path.join(SIPP_DIR, "caller-hold.xml")
        sipp_a = subprocess.Popen(
            ["sipp", "-sf", hold, "-i", "127.0.0.1", "-p", str(free_port()), "-nostdin", "-s", "1000",
             "-m", "1", "-l", "1", "-d", "8000", "-mp", str(free_media_ports()), "-timeout", "60s", "-timeout_error",
             f"127.0.0.1:{agent.sip_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        agent.wait_for(lambda: agent.metrics()["openclaw_active_calls"] == 1.0, 20.0, "call A in progress")
        dialplan.write_text(FLOW.format(name="second"))  # picked up by the file watcher
        agent.wait_for(lambda: agent.metrics()["openclaw_dialplan_generation"] == 2.0, 20.0, "the reload")
        result = run_sipp(hold, f"127.0.0.1:{agent.sip_port}", "-s", "1000", "-m", "1", "-l", "1", "-d", "2000",
                          "-mp", str(free_media_ports()))
        assert result.returncode == 0
        assert sipp_a.wait(timeout=60) == 0, "call A was dropped by the reload"
        records = agent.wait_for(lambda: len(agent.records()) >= 2 and agent.records(), 20.0, "two records")
        by_start = {steps_of(r)[0]: r for r in records}
        assert set(by_start) == {"first_greeting", "second_greeting"}, records
        assert str(by_start["first_greeting"]["end_reason"]).startswith("disconnected")

        dialplan.write_text(FLOW.format(name="third").replace("flow: main", "flow: missing"))
        agent.proc.send_signal(signal.SIGHUP)
        agent.wait_for(lambda: agent.metrics()['openclaw_dialplan_reloads_total{result="invalid"}'] >= 1.0,
                       20.0, "the refused reload")
        assert agent.metrics()["openclaw_dialplan_generation"] == 2.0
        assert f"{dialplan}:3:11:" in agent.log() and "missing" in agent.log()
        result = run_sipp(hold, f"127.0.0.1:{agent.sip_port}", "-s", "1000", "-m", "1", "-l", "1", "-d", "1000",
                          "-mp", str(free_media_ports()))
        assert result.returncode == 0
        time.sleep(0.5)
        last = agent.wait_for(lambda: len(agent.records()) >= 3 and agent.records(), 20.0, "a third record")[-1]
        assert steps_of(last)[0] == "second_greeting"
    finally:
        if sipp_a is not None and sipp_a.poll() is None:
            sipp_a.kill()
        assert stop_agent(agent) == 0
