"""Riva as deployed: the embedded speech server behind TLS and a required token, reached by the
agent's speech client and region probes with a root CA, a client certificate and metadata; and a
real call through it, with a second region whose token is wrong shown down on /regions."""
from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import grpc
import pytest

from agent.speech.api import RecognitionOptions, SpeechConnection
from agent.speech.client import SpeechClient, SpeechError
from agent.speech.server.main import start_speech_server
from agent.speech.server.security import server_credentials
from tests.integration.conftest import ROOT, run_caller, start_agent, stop_agent
from tests.tls_certs import TestCA

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = str(tmp_path_factory.mktemp("pki"))
    ca = TestCA(directory)
    return {"ca": ca, "server": ca.issue("speech", dns=("localhost",), ips=("127.0.0.1",)),
            "client": ca.issue("agent", client=True), "other": TestCA(directory, "Unknown CA")}


@pytest.fixture(scope="module")
def secured(pki: dict[str, Any]) -> Any:
    """An in-process speech server: TLS with the test CA's certificate, token required."""
    server = start_speech_server("127.0.0.1:0", decode_processes=0, prewarm_decoders=1,
                                 credentials=server_credentials(pki["server"].cert, pki["server"].key),
                                 auth_token=TOKEN)
    yield server
    server.stop(grace=0.5)


@pytest.fixture(scope="module")
def mutual(pki: dict[str, Any]) -> Any:
    """The same with mutual TLS: clients must show a certificate from the test CA."""
    server = start_speech_server("127.0.0.1:0", decode_processes=0, prewarm_decoders=1,
                                 credentials=server_credentials(pki["server"].cert, pki["server"].key, pki["ca"].pem))
    yield server
    server.stop(grace=0.5)


def client(address: str, **connection: Any) -> SpeechClient:
    return SpeechClient(address, connection=SpeechConnection(**connection))


def test_tls_and_the_token_let_health_and_synthesis_through(secured: Any, pki: dict[str, Any]) -> None:
    """With the root CA and the bearer token, health is SERVING and a Riva voice name synthesises."""
    c = client(secured.address, use_ssl=True, root_ca=pki["ca"].pem, metadata=(("authorization", f"Bearer {TOKEN}"),))
    try:
        assert c.check_health(2.0)
        audio = c.synthesize("Hello there.", sample_rate_hz=16000, voice="English-US.Female-1")
        assert len(audio) > 16000 * 2 * 0.3
    finally:
        c.close()


def test_a_wrong_or_missing_token_is_unauthenticated(secured: Any, pki: dict[str, Any]) -> None:
    """A wrong token, or none, gets UNAUTHENTICATED with a reason, on health and synthesis alike."""
    for metadata, reason in (((("authorization", "Bearer nope"),), "does not carry the expected token"),
                             ((), "missing authorization metadata")):
        c = client(secured.address, root_ca=pki["ca"].pem, metadata=metadata)
        try:
            assert not c.check_health(2.0)
            with pytest.raises(SpeechError) as err:
                c.synthesize("Hello.", sample_rate_hz=16000)
            assert err.value.code == "UNAUTHENTICATED" and reason in str(err.value), err.value
        finally:
            c.close()


def test_an_unknown_ca_or_plaintext_cannot_connect(secured: Any, pki: dict[str, Any]) -> None:
    """The server's certificate is checked: another root CA fails, and so does plaintext."""
    for connection in ({"root_ca": pki["other"].pem}, {}):
        c = client(secured.address, metadata=(("authorization", f"Bearer {TOKEN}"),), **connection)
        try:
            with pytest.raises(SpeechError) as err:
                c.synthesize("Hello.", sample_rate_hz=16000, timeout_s=3.0)
            assert err.value.code == "UNAVAILABLE", err.value
        finally:
            c.close()


def test_mutual_tls_needs_the_client_certificate(mutual: Any, pki: dict[str, Any]) -> None:
    """A server requiring client certificates serves the agent's, and refuses a client without one."""
    good = client(mutual.address, root_ca=pki["ca"].pem, client_cert=pki["client"].cert, client_key=pki["client"].key)
    bare = client(mutual.address, root_ca=pki["ca"].pem)
    try:
        assert good.check_health(3.0)
        assert not bare.check_health(3.0)
    finally:
        good.close()
        bare.close()


def recognise_error(c: SpeechClient, options: RecognitionOptions) -> str:
    """Open a recognition with *options*, push a little silence; the error text it ends with ("" if none)."""
    errors: queue.Queue[Exception] = queue.Queue()
    stream = c.open_recognition(options, on_interim=lambda t: None, on_final=lambda t, c: None, on_error=errors.put)
    stream.push_audio(b"\0" * 3200)
    stream.end_input()
    stream.wait_done(10.0)
    stream.close()
    return "" if errors.empty() else str(errors.get())


def test_language_and_model_reach_the_recognition_config(secured: Any, pki: dict[str, Any]) -> None:
    """The flow's language and model go in RecognitionConfig: the server's own model and en-US are
    accepted; French, or a model it does not have, are refused by name."""
    c = client(secured.address, root_ca=pki["ca"].pem, metadata=(("authorization", f"Bearer {TOKEN}"),))
    try:
        assert recognise_error(c, RecognitionOptions(8000, language_code="en-US", model="pocketsphinx-en-US")) == ""
        assert "language_code 'fr-FR'" in recognise_error(c, RecognitionOptions(8000, language_code="fr-FR"))
        assert "model 'parakeet-1.1b'" in recognise_error(c, RecognitionOptions(8000, model="parakeet-1.1b"))
    finally:
        c.close()


def test_probe_reports_the_unauthenticated_reason(secured: Any, pki: dict[str, Any]) -> None:
    """The region prober's health check carries the region's metadata; a wrong token is a failure
    whose text names UNAUTHENTICATED and why."""
    from agent.regions.probe import GrpcProbeTransport

    outcomes: queue.Queue[Any] = queue.Queue()
    for token in (TOKEN, "wrong"):
        transport = GrpcProbeTransport(None, http=object(),  # type: ignore[arg-type]
                                       connections={secured.address: SpeechConnection(
                                           root_ca=pki["ca"].pem, metadata=(("authorization", f"Bearer {token}"),))})
        transport.check(secured.address, 3.0, outcomes.put)
        outcome = outcomes.get(timeout=5.0)
        transport._closed = True
        for channel in transport._channels.values():
            channel.close()
        if token == TOKEN:
            assert outcome.ok and outcome.serving, outcome
        else:
            assert not outcome.ok and outcome.error.startswith("UNAUTHENTICATED: authorization metadata"), outcome


# ------------------------------------------------------------------------------------------ a real call


def start_secured_server(pki: dict[str, Any]) -> tuple[subprocess.Popen[str], int]:
    """``python -m agent.speech.server`` with TLS and a token from the environment."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.speech.server", "--listen", "127.0.0.1:0", "--decode-processes", "1",
         "--tls-cert", pki["server"].cert, "--tls-key", pki["server"].key, "--auth-token-env", "SPEECH_TOKEN"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "SPEECH_TOKEN": TOKEN})
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    line = lines.get(timeout=90)
    match = re.fullmatch(r"speech server listening on 127\.0\.0\.1:(\d+) \(TLS, token required\)\n", line)
    assert match, line
    return proc, int(match.group(1))


def test_a_real_call_through_tls_and_a_token_and_a_wrong_token_fails_its_region(tmp_path, pki: dict[str, Any]) -> None:
    """The agent reaches a TLS speech server with a bearer token from a secret file and a
    function-id; a call is recognised and answered through it. A second region on the same server
    with a wrong token (from the environment) is down on /regions with UNAUTHENTICATED and its
    reason, and the log says so."""
    proc, port = start_secured_server(pki)
    try:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        config = tmp_path / "config.yaml"
        config.write_text(
            "speech:\n"
            "  regions:\n"
            "    - name: secure\n"
            f"      uri: localhost:{port}\n"
            "      use_ssl: true\n"
            f"      root_ca: {pki['ca'].pem}\n"
            "      metadata:\n"
            "        authorization: {file: token, prefix: 'Bearer '}\n"
            "        function-id: 0149dedb-2be8-4195-b9a0-e57e0e14f972\n"
            "    - name: badkey\n"
            f"      uri: 127.0.0.1:{port}\n"
            "      use_ssl: true\n"
            f"      root_ca: {pki['ca'].pem}\n"
            "      metadata:\n"
            "        authorization: {env: WRONG_SPEECH_TOKEN, prefix: 'Bearer '}\n")
        os.environ["WRONG_SPEECH_TOKEN"] = "not-the-token"
        try:
            agent = start_agent(str(tmp_path), "--config", str(config))
        finally:
            del os.environ["WRONG_SPEECH_TOKEN"]
        try:
            code, report, out = run_caller(agent.uri, "--say", "check my balance")
            assert code == 0, out + agent.log()[-3000:]
            (turn,) = report["turns"]  # type: ignore[misc]
            # the balance reply, by two of its words: under load the test caller's own
            # transcription of the reply can miss its first second
            heard = set(str(turn["agent_text"]).split())
            assert len(heard & {"account", "balance", "dollars", "cents", "hundred"}) >= 2, report
            record = agent.wait_for(lambda: agent.records(), 20.0, "the call record")[-1]
            assert record["region"] == "secure" and not record["failovers"], record
            doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/regions",
                                                    timeout=5).read())
            regions = {r["name"]: r for r in doc["regions"]}
            assert regions["secure"]["up"], regions["secure"]
            bad = regions["badkey"]
            assert not bad["up"], bad
            failure = bad["endpoints"][0]["last_failure"]
            assert failure.startswith("UNAUTHENTICATED: authorization metadata does not carry the expected token"), bad
            log = agent.log()
            assert re.search(r"region endpoint 127\.0\.0\.1:\d+ \(asr,tts\) probe failed: UNAUTHENTICATED", log), log[-3000:]
            assert "speech region secure: asr localhost" in log and "over TLS with metadata authorization, function-id" in log
            assert TOKEN not in log and "not-the-token" not in log
        finally:
            assert stop_agent(agent) == 0
    finally:
        proc.terminate()
        proc.wait(timeout=20)
