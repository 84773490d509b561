"""The embedded speech server standing for a model version: the names it reports and accepts, and
its per-stream log of (call id, version) that a rollout's ground truth is built from."""
from __future__ import annotations

import logging
import threading

import grpc
import pytest
from riva.client.proto import riva_asr_pb2, riva_asr_pb2_grpc, riva_tts_pb2, riva_tts_pb2_grpc

from agent.regions.probe import GrpcProbeTransport
from agent.speech.client import RecognitionOptions, SpeechClient, SpeechError
from agent.speech.server.main import start_speech_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server():
    srv = start_speech_server("127.0.0.1:0", decode_processes=0, prewarm_decoders=1,
                              asr_model="pocketsphinx-en-US-2", tts_model_suffix="-2")
    yield srv
    srv.stop(grace=0.5)


def test_reported_models_carry_the_version(server) -> None:
    """GetRiva*Config report the given names, so version discovery sees asr:…-2 / tts:flite-…-2."""
    channel = grpc.insecure_channel(server.address)
    try:
        asr = riva_asr_pb2_grpc.RivaSpeechRecognitionStub(channel).GetRivaSpeechRecognitionConfig(
            riva_asr_pb2.RivaSpeechRecognitionConfigRequest(), timeout=10)
        tts = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel).GetRivaSynthesisConfig(
            riva_tts_pb2.RivaSynthesisConfigRequest(), timeout=10)
    finally:
        channel.close()
    assert [c.model_name for c in asr.model_config] == ["pocketsphinx-en-US-2"]
    assert tts.model_config and all(c.model_name.startswith("flite-") and c.model_name.endswith("-2")
                                    for c in tts.model_config)

    from twisted.internet.task import Clock

    got: list[frozenset[str] | None] = []
    done = threading.Event()
    transport = GrpcProbeTransport(Clock())
    try:
        transport.discover(server.address, "asr", 10.0, lambda v: (got.append(v), done.set()))
        assert done.wait(15)
    finally:
        transport.close()
    assert got == [frozenset({"asr:pocketsphinx-en-US-2"})]


def test_streams_are_logged_with_call_id_and_version_and_other_models_refused(server, caplog) -> None:
    """A recognition and a synthesis carrying a call id are logged with it and the version
    served; a request for the unversioned model name is refused (that model is not here)."""
    client = SpeechClient(server.address)
    try:
        with caplog.at_level(logging.INFO, logger="openclaw.speech_server.streams"):
            errors: list[Exception] = []
            stream = client.open_recognition(RecognitionOptions(sample_rate_hz=8000, call_id="call-42"),
                                             on_interim=lambda t: None, on_final=lambda t, c: None,
                                             on_error=errors.append)
            stream.push_audio(b"\0" * 3200)
            stream.end_input()
            assert stream.wait_done(20) and errors == []
            done = threading.Event()
            synth = client.synthesize_stream("hello", sample_rate_hz=8000, voice="kal16", call_id="call-42",
                                             on_audio=lambda pcm: None, on_done=done.set, on_error=errors.append)
            assert done.wait(20) and synth.wait_done(5) and errors == []
        lines = [r.getMessage() for r in caplog.records if r.name == "openclaw.speech_server.streams"]
        assert "stream kind=asr call_id=call-42 version=asr:pocketsphinx-en-US-2" in lines, lines
        assert "stream kind=tts call_id=call-42 version=tts:flite-kal16-2" in lines, lines

        refused: list[Exception] = []
        other = client.open_recognition(RecognitionOptions(sample_rate_hz=8000, model="pocketsphinx-en-US"),
                                        on_interim=lambda t: None, on_final=lambda t, c: None,
                                        on_error=refused.append)
        other.end_input()
        assert other.wait_done(20)
        assert len(refused) == 1 and isinstance(refused[0], SpeechError)
        assert "pocketsphinx-en-US-2" in str(refused[0]) and not refused[0].retryable
    finally:
        client.close()
