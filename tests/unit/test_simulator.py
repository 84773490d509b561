"""Tests for agent.tools.simulator: scripted simulations of the example dialplans, failure reports,
and the interactive loop fed from a string."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from agent.dialplan.model import load_dialplan
from agent.tools.simulator import SimulatedCall, parse_now, run_interactive, run_script
from agent.integrations.webhook import MockWebhooks

DIALPLANS = Path(__file__).resolve().parents[2] / "dialplans"
SIMULATIONS = DIALPLANS / "simulations"


@pytest.mark.parametrize("name", ["default", "bank", "appointments"])
def test_example_scripts_pass(name: str) -> None:
    """Every scenario shipped for the example dialplans passes."""
    out = io.StringIO()
    status = run_script([], str(SIMULATIONS / f"{name}.yaml"), stdout=out)
    assert status == 0, out.getvalue()
    assert "0 failed" in out.getvalue() and "FAIL" not in out.getvalue()


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_wrong_expectation_fails_with_what_was_said(tmp_path: Path) -> None:
    """A mismatch exits 1 and shows the expectation, the agent's words and the call so far."""
    script = write(tmp_path, "s.yaml", f"""\
        dialplan: {DIALPLANS / 'default.yaml'}
        scenarios:
          - name: wrong balance
            turns:
              - {{}}
              - say: "check my balance"
                expect: {{regex: "balance is zero"}}
              - dtmf: "4"
            end: {{reason: transferred}}
        """)
    out = io.StringIO()
    assert run_script([], script, stdout=out) == 1
    report = out.getvalue()
    assert "FAIL wrong balance" in report
    assert "turn 2 (say 'check my balance'): expected the agent to say /balance is zero/ (regex)" \
        in report
    assert "| Your account balance is one hundred twenty three dollars" in report
    assert "end: expected the call to end with 'transferred', but it ended with 'caller_done'" \
        in report
    assert report.strip().endswith("0 passed, 1 failed")


def test_expect_steps_and_variables_are_checked(tmp_path: Path) -> None:
    """expect_steps names steps that must run; expect_variables checks final values."""
    script = write(tmp_path, "s.yaml", f"""\
        dialplan: {DIALPLANS / 'default.yaml'}
        scenarios:
          - name: steps
            turns:
              - {{}}
              - dtmf: "2"
                expect_steps: [hours, anything_else, balance]
            expect_variables: {{intent: balance}}
        """)
    out = io.StringIO()
    assert run_script([], script, stdout=out) == 1
    assert "expected step 'balance' to run; ran: main/hours -> main/anything_else" in out.getvalue()
    assert "variables: expected intent = 'balance', found 'hours'" in out.getvalue()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("scenarios: []", "expected 'scenarios', a list of at least one scenario"),
        ("scenarios: [{turns: [{}, {expect: x}]}]",
         "scenario 1, turn 2: expected one of 'say', 'dtmf' or 'silence'"),
        ("scenarios: [{turns: [{say: x, expct: y}]}]", "unknown key 'expct'"),
        ("scenarios: [{turns: [{expect: {regex: '('}}]}]", "bad regex '('"),
    ],
)
def test_malformed_scripts_exit_2_with_the_reason(tmp_path: Path, body: str, message: str) -> None:
    """Script mistakes are reported (with the file) and exit with status 2."""
    script = write(tmp_path, "s.yaml", f"dialplan: {DIALPLANS / 'default.yaml'}\n{body}\n")
    out = io.StringIO()
    assert run_script([], script, stdout=out) == 2
    assert message in out.getvalue() and script in out.getvalue()


def test_an_invalid_dialplan_is_reported_with_positions(tmp_path: Path) -> None:
    """The dialplan under test is validated first; its errors name file:line:column."""
    plan = write(tmp_path, "p.yaml", "version: 1\nroutes: [{flow: nope}]\n")
    script = write(tmp_path, "s.yaml", "scenarios: [{turns: [{}]}]\n")
    out = io.StringIO()
    assert run_script([plan], script, stdout=out) == 2
    assert f"{plan}:2:17: 'flow' refers to unknown flow 'nope'" in out.getvalue()


def test_interactive_session_reads_lines_and_prints_steps() -> None:
    """Typed lines are speech, '#n' keys, empty silence; output shows steps and prompts."""
    plan = load_dialplan(str(DIALPLANS / "default.yaml"))
    call = SimulatedCall(plan, number="1000", variables={"config.transfer_uri": "sip:a@b"})
    stdin = io.StringIO("what are your opening hours\n\n/vars\n#4\n")
    out = io.StringIO()
    assert run_interactive(call, stdin=stdin, stdout=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[1:3] == ["[main/greeting]", "agent: Thank you for calling OpenClaw Bank."]
    assert "caller> what are your opening hours" in lines
    hours = lines.index("[main/hours]")
    assert lines[hours + 1].startswith("agent: We are open Monday to Friday")
    assert "  no input" in lines and "  intent = 'hours'" in lines
    assert lines[-1] == "[hangup: caller_done]"


def test_unrouted_number_is_a_404() -> None:
    """A number no route takes ends the simulation at once, like the server's 404."""
    plan = load_dialplan(str(DIALPLANS / "bank.yaml"))
    call = SimulatedCall(plan, number="999")
    out = io.StringIO()
    assert run_interactive(call, stdin=io.StringIO(""), stdout=out) == 1
    assert "[no route for 999 from +15550000000: 404 Not Found]" in out.getvalue()


def test_simulated_call_with_mocks_and_a_fixed_clock() -> None:
    """The bank line on a Tuesday morning looks the account up through the mock file."""
    plan = load_dialplan(str(DIALPLANS / "bank.yaml"))
    mocks = MockWebhooks.from_file(str(SIMULATIONS / "bank-webhooks.yaml"))
    call = SimulatedCall(plan, number="18005550100", now=parse_now("2025-03-04T10:00:00-05:00"),
                         webhooks=mocks, variables={"config.bank_api_url": "https://api.x"})
    call.start()
    out = call.dtmf("12345678#")
    assert any(o.text.startswith("[webhook POST https://api.x/accounts/lookup -> ok 200")
               for o in out)
    assert mocks.calls[0].step == "lookup"
    assert call.variables()["acct.name"] == "Ann Smith"


def test_parse_now_requires_iso_8601() -> None:
    """--now takes ISO 8601; a missing offset means UTC."""
    assert parse_now("2025-03-04T10:00:00").utcoffset().total_seconds() == 0
    with pytest.raises(ValueError):
        parse_now("next tuesday")
