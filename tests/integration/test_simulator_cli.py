"""The dialplan tools as integrators run them: `openclaw-voice dialplan check|simulate`, as real
processes with piped standard input and exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DIALPLANS = ROOT / "dialplans"
SIMULATIONS = DIALPLANS / "simulations"


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.app.cli", "dialplan", *args],
        input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )


def test_check_accepts_the_examples_together_and_each() -> None:
    """The three example dialplans pass `dialplan check`, as one dialplan and one by one."""
    paths = [str(DIALPLANS / n) for n in ("default.yaml", "bank.yaml", "appointments.yaml")]
    together = cli("check", *paths)
    assert together.returncode == 0, together.stderr
    assert "ok (5 routes, 3 flows" in together.stdout
    each = cli("check", "--each", *paths)
    assert each.returncode == 0 and each.stdout.count(": ok (") == 3


def test_check_reports_every_problem_with_file_line_column(tmp_path: Path) -> None:
    """A broken dialplan exits 1, listing file:line:column: message for each problem."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\n"
        "routes: [{number: '_1[', flow: main}]\n"
        "flows:\n"
        "  main:\n"
        "    steps:\n"
        "      - say: 'Hi {{ nmae }}'\n"
        "      - goto: nowhere\n"
    )
    result = cli("check", str(bad))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == f"{bad}:2:19: bad pattern in 'number': unclosed '[' in pattern '_1['"
    assert lines[1].startswith(f"{bad}:6:21: in 'say': unknown variable 'nmae'")
    assert lines[2].startswith(f"{bad}:7:15: 'goto' refers to unknown step 'nowhere'")
    assert lines[-1] == f"{bad}: 3 problems"


def test_interactive_simulation_over_a_pipe() -> None:
    """Typed turns (speech, a key, silence, /quit) drive the demo line in a real process."""
    result = cli("simulate", str(DIALPLANS / "default.yaml"), "--number", "1000",
                 "--var", "config.transfer_uri=sip:agent@pbx",
                 stdin="check my balance\n\n#2\n/quit\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "agent: Thank you for calling OpenClaw Bank." in out
    assert "[main/balance]\nagent: Your account balance is one hundred twenty three dollars" in out
    assert "caller> \n  no input\nagent: I'm sorry, I did not hear you." in out
    assert "agent: We are open Monday to Friday" in out
    assert out.rstrip().endswith("[the caller hung up]")


def test_scripted_simulations_pass_and_fail_with_exit_status(tmp_path: Path) -> None:
    """--script exits 0 when every scenario passes and 1 when one does not."""
    ok = cli("simulate", "--script", str(SIMULATIONS / "bank.yaml"))
    assert ok.returncode == 0, ok.stdout
    assert "PASS balance by keypad" in ok.stdout
    script = tmp_path / "wrong.yaml"
    script.write_text(f"dialplan: {DIALPLANS / 'default.yaml'}\n"
                      "scenarios:\n  - name: greeting\n    turns:\n      - expect: Farewell\n")
    bad = cli("simulate", "--script", str(script))
    assert bad.returncode == 1
    assert "FAIL greeting" in bad.stdout and "expected the agent to say 'Farewell'" in bad.stdout


class _Api(BaseHTTPRequestHandler):
    """The integrator's API for the real-webhook simulation."""

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        answer = {"found": body.get("account") == "12345678", "name": "Real Ann",
                  "balance": 99, "status": "active"}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_simulation_with_real_webhooks(api_url: str) -> None:
    """--webhooks real calls the integrator's HTTP endpoint from the simulator."""
    result = cli(
        "simulate", str(DIALPLANS / "bank.yaml"), "--number", "2000",
        "--now", "2025-03-04T10:00:00-05:00", "--webhooks", "real",
        "--var", f"config.bank_api_url={api_url}",
        stdin="#12345678#\n#1\n/quit\n",
    )
    assert result.returncode == 0, result.stderr
    assert f"[webhook POST {api_url}/accounts/lookup -> ok 200 (4 fields)]" in result.stdout
    assert "agent: Thank you, Real Ann." in result.stdout
    assert "agent: Your balance is 99 dollars." in result.stdout


def test_simulate_rejects_bad_arguments() -> None:
    """A bad --var or --now is refused with exit status 2 and the reason."""
    bad_var = cli("simulate", str(DIALPLANS / "default.yaml"), "--var", "novalue")
    assert bad_var.returncode == 2 and "expected --var NAME=VALUE" in bad_var.stderr
    bad_now = cli("simulate", str(DIALPLANS / "default.yaml"), "--now", "soon")
    assert bad_now.returncode == 2 and "ISO 8601" in bad_now.stderr
    assert os.path.exists(DIALPLANS / "schema.json")
