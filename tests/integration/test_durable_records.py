"""Durable, discreet records with a real server: kill -9 loses no finished turn; secrets stay out of sight.

- A server with calls in progress (SIPp callers taking turns with the demo line) gets SIGKILL;
  started again on the same call records, it writes each cut-off call's record from its journal
  (``end_reason: "crashed"``) with at least every turn the capture shows the agent answered.
- A server whose trunk password, admin token, webhook header and webhook query value come from
  ``!file``/``!env`` uses them (the registrar authorises, the webhook receives them), yet none of
  them, nor the webhook's query string, is in its log, its call records or ``/regions``; ``/admin``
  without the token gets 401 and a Bearer challenge.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.integration.conftest import (
    ROOT, Capture, free_media_ports, free_port, start_agent, stop_agent, wait_until,
)

pytestmark = pytest.mark.integration


def _crash_bench() -> Any:
    from ops.bench.scripts import load_script

    return load_script("crash-records", "crash_records_bench")


def _journal_turns(journal_root: str) -> dict[str, int]:
    """Caller turns per call in the journals on disk now."""
    found: dict[str, dict[int, bool]] = {}
    for folder, _dirs, names in os.walk(journal_root):
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                call_id = ""
                for line in f:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if entry.get("event") == "start":
                        call_id = entry["call_id"]
                    elif entry.get("event") == "turn" and (entry["turn"].get("caller") or entry["turn"].get("dtmf")):
                        found.setdefault(call_id, {})[entry["index"]] = True
    return {cid: len(turns) for cid, turns in found.items()}


def _records(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_kill_9_with_calls_in_progress_loses_no_finished_turn(tmp_path) -> None:
    """Two calls, two answered turns each at least, then SIGKILL: the restart records every turn."""
    bench = _crash_bench()
    tl = bench.tl
    run = str(tmp_path)
    records = os.path.join(run, "calls.jsonl")
    steps = bench.plan_call(tl.load_corpus(), random.Random(7), 4)
    media_dir = os.path.join(run, "media")
    os.makedirs(media_dir)
    tl.write_media(steps, media_dir)
    scenario = os.path.join(run, "callers.xml")
    with open(scenario, "w", encoding="iso-8859-1") as f:
        f.write(tl.scenario_xml(steps, media_dir))
    agent = start_agent(run, "--call-records", records, capacity=2)
    media_base = tl.free_udp_range(12)
    capture = Capture(os.path.join(run, "calls.pcap"),
                      f"udp and (port {agent.sip_port} or portrange {media_base}-{media_base + 11})")
    sipp = subprocess.Popen(
        [shutil.which("sipp") or "sipp", "-sf", scenario, "-s", "1000", "-i", "127.0.0.1", "-p", str(free_port()),
         "-mp", str(media_base), "-m", "2", "-l", "2", "-r", "1", "-rp", "500", "-nostdin", "-timeout", "150s",
         f"127.0.0.1:{agent.sip_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=run)
    try:
        journal_root = records + ".journal"
        wait_until(lambda: len(_journal_turns(journal_root)) == 2 and min(_journal_turns(journal_root).values()) >= 2,
                   120.0, "two caller turns journaled in each of two calls", agent.log)
        time.sleep(1.5)      # let the replies start on the wire too
        killed_at = time.time()
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait(timeout=10)
        time.sleep(1.0)
    finally:
        if sipp.poll() is None:
            sipp.kill()
            sipp.wait(timeout=10)
        pcap = capture.stop()
    assert _records(records) == [], "nothing was recorded before the crash: the calls were in progress"
    wire = bench.wire_turns(pcap, killed_at)
    assert len(wire) == 2 and min(wire.values()) >= 2, f"the capture shows two answered turns per call: {wire}"

    again = start_agent(run, "--call-records", records, capacity=2)
    try:
        recovered = {r["call_id"]: r for r in _records(records)}
        assert set(recovered) == set(wire)
        for call_id, on_wire in wire.items():
            record = recovered[call_id]
            assert record["end_reason"] == "crashed"
            assert bench.disk_turns(record) >= on_wire, (call_id, on_wire, record["turns"])
            assert record["caller"] and record["flow"] == "main"
        assert _journal_turns(journal_root) == {}, "the journals were consumed"
        assert "cut off by a crash" in again.log()
    finally:
        assert stop_agent(again) == 0
    # A further start finds nothing more to recover: no record is written twice.
    third = start_agent(run, "--call-records", records, capacity=2)
    try:
        assert len(_records(records)) == 2
    finally:
        assert stop_agent(third) == 0


# --------------------------------------------------------------------------- secrets

PLANTED = {
    "trunk_password": "trunk-pw-Q7v9xK2m",
    "admin_token": "admin-tok-Zr4p8WqL",
    "crm_header": "Bearer crm-hdr-Yt6s1NbV",
    "query_key": "qkey-Hd3j7PcA",
}


class _Api(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802
        _Api.seen.append((self.path, self.headers.get("Authorization", "")))
        body = json.dumps({"name": "Ada"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _http(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def test_secrets_are_used_but_never_logged_recorded_or_shown(tmp_path, monkeypatch) -> None:
    """Planted secrets work where they are meant to and appear nowhere else."""
    from tests.integration.registrar import FakeRegistrar

    registrar = FakeRegistrar("trunkuser", PLANTED["trunk_password"], grant_expires_s=60)
    api = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    (tmp_path / "trunk.secret").write_text(PLANTED["trunk_password"] + "\n")
    (tmp_path / "dialplan.yaml").write_text(f"""\
version: 1
routes:
  - flow: main
flows:
  main:
    steps:
      - id: greeting
        say: "Hello."
      - id: lookup
        webhook:
          url: "http://127.0.0.1:{api.server_address[1]}/lookup?key={{{{ config.crm_key }}}}&caller={{{{ caller }}}}"
          method: GET
          headers:
            Authorization: !env OC_IT_CRM_HEADER
          save_as: acct
          fields: [name]
          on_failure: bye
      - id: hello
        say: "Welcome {{{{ acct.name }}}}."
      - id: bye
        hangup:
""")
    (tmp_path / "config.yaml").write_text(f"""\
sip:
  registration:
    registrar: sip:127.0.0.1:{registrar.port}
    aor: sip:trunkuser@127.0.0.1
    username: trunkuser
    password: !file trunk.secret
    expires_s: 60
admin:
  token: !env OC_IT_ADMIN_TOKEN
variables:
  crm_key: !env OC_IT_CRM_KEY
dialplans: [dialplan.yaml]
""")
    monkeypatch.setenv("OC_IT_ADMIN_TOKEN", PLANTED["admin_token"])
    monkeypatch.setenv("OC_IT_CRM_HEADER", PLANTED["crm_header"])
    monkeypatch.setenv("OC_IT_CRM_KEY", PLANTED["query_key"])
    records = str(tmp_path / "calls.jsonl")
    agent = start_agent(str(tmp_path), "--config", str(tmp_path / "config.yaml"), "--call-records", records)
    base = f"http://127.0.0.1:{agent.metrics_port}"
    try:
        agent.wait_for(lambda: registrar.authorized(), 30.0, "the trunk registration with the password from a file")
        sipp = subprocess.run(
            [shutil.which("sipp") or "sipp", "-sf", os.path.join(ROOT, "ops", "sipp", "bench-call.xml"), "-s", "1000",
             "-i", "127.0.0.1", "-p", str(free_port()), "-mp", str(free_media_ports()), "-m", "1", "-l", "1", "-d", "15000",
             "-nostdin", "-timeout", "60s", f"127.0.0.1:{agent.sip_port}"], capture_output=True, timeout=90)
        agent.wait_for(lambda: _records(records), 30.0, "the call record")
        assert _Api.seen, "the webhook was called"
        path, auth = _Api.seen[-1]
        assert f"key={PLANTED['query_key']}" in path and auth == PLANTED["crm_header"], "the secrets were sent"

        status, headers, body = _http(f"{base}/admin/drain", "POST")
        assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer"), (status, headers, body)
        status, headers, _ = _http(f"{base}/admin/drain", "POST", token="wrong-token")
        assert status == 401 and "invalid_token" in headers.get("WWW-Authenticate", "")
        _, _, regions = _http(f"{base}/regions")
        _, _, health = _http(f"{base}/healthz")
        status, _, body = _http(f"{base}/admin/end-calls", "POST", token=PLANTED["admin_token"])
        assert status == 200 and '"started": true' in body, body
    finally:
        stop_agent(agent)
        registrar.stop()
        api.shutdown()
    record = _records(records)[0]
    webhook_entries = [e for e in record["dialogue"] if e["kind"] == "webhook"]
    assert webhook_entries and webhook_entries[0]["text"].endswith("/lookup?***"), webhook_entries
    texts = {"log": agent.log(), "records": open(records, encoding="utf-8").read(), "/regions": regions,
             "/healthz": health}
    for where, text in texts.items():
        for name, value in PLANTED.items():
            assert value not in text, f"{name} appears in {where}"
        assert "/lookup?key" not in text and "&caller=" not in text, f"a webhook query string appears in {where}"
    assert sipp.returncode == 0, sipp.stderr.decode(errors="replace")[-2000:]


def test_sockets_listen_on_loopback_by_default(tmp_path) -> None:
    """With no config, /metrics, /healthz and /admin are not reachable on a non-loopback address."""
    agent = start_agent(str(tmp_path))
    try:
        with open(f"/proc/{agent.proc.pid}/net/tcp", encoding="ascii") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        listening = [r[1] for r in rows if r[3] == "0A"]          # state LISTEN
        port_hex = f"{agent.metrics_port:04X}"
        mine = [addr for addr in listening if addr.endswith(":" + port_hex)]
        assert mine == ["0100007F:" + port_hex], f"metrics listener bound to {mine}, expected 127.0.0.1 only"
    finally:
        assert stop_agent(agent) == 0


def test_own_listeners_for_status_and_admin_and_recordings_retention(tmp_path) -> None:
    """status and admin on their own ports (absent from the metrics port); old recordings removed at start."""
    import socket as socketlib

    recordings = tmp_path / "recordings"
    recordings.mkdir()
    old, new = recordings / "old.wav", recordings / "new.wav"
    for f in (old, new):
        f.write_bytes(b"RIFF" + b"\0" * 100)
    month_ago = time.time() - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    status_port, admin_port = free_port(socketlib.SOCK_STREAM), free_port(socketlib.SOCK_STREAM)
    (tmp_path / "config.yaml").write_text(f"""\
status: {{host: 127.0.0.1, port: {status_port}}}
admin: {{token: tok-0123456789, port: {admin_port}}}
recordings_dir: {recordings}
recordings_retention: {{max_age_days: 30}}
""")
    agent = start_agent(str(tmp_path), "--config", str(tmp_path / "config.yaml"))
    try:
        metrics = f"http://127.0.0.1:{agent.metrics_port}"
        assert _http(f"{metrics}/metrics")[0] == 200
        assert _http(f"{metrics}/healthz")[0] == 404 and _http(f"{metrics}/admin/drain", "POST")[0] == 404
        assert _http(f"http://127.0.0.1:{status_port}/healthz")[0] == 200
        assert _http(f"http://127.0.0.1:{status_port}/regions")[0] == 200
        assert _http(f"http://127.0.0.1:{status_port}/metrics")[0] == 404
        assert _http(f"http://127.0.0.1:{admin_port}/admin/end-calls", "POST")[0] == 401
        assert _http(f"http://127.0.0.1:{admin_port}/admin/end-calls", "POST", token="tok-0123456789")[0] == 200
        agent.wait_for(lambda: not old.exists(), 10.0, "the month-old recording to be removed")
        assert new.exists()
    finally:
        assert stop_agent(agent) == 0


def test_supervisor_admin_needs_the_token_and_then_replaces_a_worker(tmp_path) -> None:
    """The supervisor's /admin (serve --workers 2): 401 without the token; with it, worker 0 is
    drained and replaced (the documented rolling restart)."""
    from tests.integration.test_workers import start_node, stop_node

    token = "node-admin-token-4567"
    node = start_node(str(tmp_path), env={"OPENCLAW_ADMIN_TOKEN": token})
    try:
        url = f"http://127.0.0.1:{node.metrics_port}/admin/workers/0/drain"
        before = node.health()["workers"][0]["pid"]
        status, headers, _ = _http(url, "POST")
        assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer")
        time.sleep(1.0)
        assert node.health()["workers"][0]["pid"] == before, "nothing happened without the token"
        status, _, body = _http(url, "POST", token=token)
        assert status == 200 and '"started": true' in body, body
        node.wait_for(lambda: (lambda w: w["status"] == "ready" and w["pid"] != before)(node.health()["workers"][0]),
                      60, "worker 0 replaced")
        assert token not in node.log()
    finally:
        assert stop_node(node) == 0
