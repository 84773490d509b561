"""The embedded Riva-compatible speech server, driven through the real riva.client API.

A server subprocess (``python -m agent.speech.server --listen 127.0.0.1:0``) is shared by
the module; audio is flite speech resampled to telephony rates. The endpointer's pure
logic is also checked directly, without a server.
"""
from __future__ import annotations

import array
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import riva.client
from grpc_health.v1 import health_pb2, health_pb2_grpc
from riva.client.proto import riva_asr_pb2, riva_tts_pb2

from agent.speech.server import flite
from media import convert
from agent.speech.client import RecognitionOptions, RecognitionStream, SpeechClient, SpeechError
from agent.speech.server.main import (
    END_OF_SPEECH,
    END_OF_UTTERANCE_FIRST_PASS,
    START_OF_SPEECH,
    EndpointingParams,
    UtteranceEndpointer,
    split_sentences,
)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
RPC_TIMEOUT_S = 30.0
CHUNK_8K = 320  # 20 ms of pcm16 at 8 kHz


# --------------------------------------------------------------------------------------
# fixtures and helpers
# --------------------------------------------------------------------------------------


def _start_server_process() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.speech.server", "--listen", "127.0.0.1:0"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=60)
    except queue.Empty:
        proc.kill()
        raise AssertionError("speech server printed no listening line within 60 s")
    match = re.fullmatch(r"speech server listening on (127\.0\.0\.1:\d+)\n", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"unexpected first line from speech server: {line!r}")
    return proc, match.group(1)


@pytest.fixture(scope="module")
def server_address() -> Iterator[str]:
    proc, address = _start_server_process()
    yield address
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def auth(server_address: str) -> Iterator[riva.client.Auth]:
    a = riva.client.Auth(uri=server_address)
    yield a
    a.channel.close()


@pytest.fixture(scope="module")
def asr(auth: riva.client.Auth) -> riva.client.ASRService:
    return riva.client.ASRService(auth)


@pytest.fixture(scope="module")
def tts(auth: riva.client.Auth) -> riva.client.SpeechSynthesisService:
    return riva.client.SpeechSynthesisService(auth)


@pytest.fixture()
def client(server_address: str) -> Iterator[SpeechClient]:
    c = SpeechClient(server_address)
    yield c
    c.close()


def speech_8k(text: str, voice: str = "kal16") -> bytes:
    pcm, rate = flite.synthesize(text, voice)
    return convert.resample(pcm, rate, 8000)


def silence_8k(seconds: float) -> bytes:
    return b"\0\0" * int(8000 * seconds)


def chunks(pcm: bytes, size: int = CHUNK_8K) -> list[bytes]:
    return [pcm[i : i + size] for i in range(0, len(pcm), size)]


def streaming_config(
    *,
    sample_rate_hz: int = 8000,
    encoding: int = riva.client.AudioEncoding.LINEAR_PCM,
    interim_results: bool = True,
    language_code: str = "en-US",
    word_time_offsets: bool = False,
    **endpointing: float,
) -> riva_asr_pb2.StreamingRecognitionConfig:
    config = riva_asr_pb2.RecognitionConfig(
        encoding=encoding,
        sample_rate_hertz=sample_rate_hz,
        language_code=language_code,
        max_alternatives=1,
        enable_word_time_offsets=word_time_offsets,
    )
    for name, value in endpointing.items():
        setattr(config.endpointing_config, name, value)
    return riva_asr_pb2.StreamingRecognitionConfig(config=config, interim_results=interim_results)


def recognize_stream(
    asr: riva.client.ASRService, audio: bytes, config: riva_asr_pb2.StreamingRecognitionConfig, size: int = CHUNK_8K
) -> list[riva_asr_pb2.StreamingRecognitionResult]:
    results: list[riva_asr_pb2.StreamingRecognitionResult] = []
    for response in asr.streaming_response_generator(chunks(audio, size), config):
        results.extend(response.results)
    return results


def finals(results: list[riva_asr_pb2.StreamingRecognitionResult]) -> list[riva_asr_pb2.StreamingRecognitionResult]:
    return [r for r in results if r.is_final]


def white_noise(seconds: float, rms: int, rate: int = 8000) -> bytes:
    rng = random.Random(7)
    return array.array("h", [max(-32768, min(32767, int(rng.gauss(0, rms)))) for _ in range(int(rate * seconds))]).tobytes()


def mix(a: bytes, b: bytes) -> bytes:
    x = array.array("h", a)
    y = array.array("h", b)
    n = max(len(x), len(y))
    x.extend([0] * (n - len(x)))
    y.extend([0] * (n - len(y)))
    return array.array("h", [max(-32768, min(32767, p + q)) for p, q in zip(x, y)]).tobytes()


# --------------------------------------------------------------------------------------
# endpointer logic (pure)
# --------------------------------------------------------------------------------------


def _feed(endpointer: UtteranceEndpointer, pattern: list[tuple[bool, int]]) -> list[tuple[int, str]]:
    events: list[tuple[int, str]] = []
    frame = 0
    for voiced, count in pattern:
        for _ in range(count):
            event = endpointer.push(voiced)
            if event is not None:
                events.append((frame, event))
            frame += 1
    return events


def test_endpointer_ends_after_stop_history_of_unvoiced_frames() -> None:
    """With stop_history 300 ms the end comes on the 15th unvoiced 20 ms frame, not earlier."""
    endpointer = UtteranceEndpointer(EndpointingParams(stop_history_ms=300, stop_threshold=1.0))
    events = _feed(endpointer, [(False, 10), (True, 30), (False, 40)])
    assert events[0] == (10 + 2, START_OF_SPEECH)  # 0.3 of 10 frames = 3 voiced frames
    assert events[1] == (40 + 14, END_OF_SPEECH)
    assert len(events) == 2


def test_endpointer_short_pause_does_not_end_the_utterance() -> None:
    """A pause shorter than stop_history keeps one utterance; only the long pause ends it."""
    endpointer = UtteranceEndpointer(EndpointingParams(stop_history_ms=400, stop_threshold=1.0))
    events = _feed(endpointer, [(True, 20), (False, 15), (True, 20), (False, 30)])
    assert [e for _, e in events] == [START_OF_SPEECH, END_OF_SPEECH]


def test_endpointer_first_pass_eou_fires_once_per_pause_and_rearms() -> None:
    """stop_history_eou gives one early event per pause, again after speech resumes."""
    params = EndpointingParams(stop_history_ms=800, stop_threshold=1.0, stop_history_eou_ms=200, stop_threshold_eou=1.0)
    endpointer = UtteranceEndpointer(params)
    events = _feed(endpointer, [(True, 20), (False, 15), (True, 10), (False, 45)])
    kinds = [e for _, e in events]
    assert kinds == [
        START_OF_SPEECH,
        END_OF_UTTERANCE_FIRST_PASS,
        END_OF_UTTERANCE_FIRST_PASS,
        END_OF_SPEECH,
    ]
    assert events[1][0] == 20 + 9  # 10th unvoiced frame = 200 ms


def test_endpointing_params_apply_riva_defaults_and_reject_bad_thresholds() -> None:
    """Unset/zero/negative fields use the defaults (800 ms stop); a threshold above 1 is rejected."""
    cfg = riva_asr_pb2.EndpointingConfig(stop_history=0, start_history=-1, stop_history_eou=250)
    params = EndpointingParams.from_proto(cfg)
    assert params.stop_history_ms == 800
    assert params.start_history_ms == 200
    assert params.stop_history_eou_ms == 250
    with pytest.raises(ValueError, match="stop_threshold"):
        EndpointingParams.from_proto(riva_asr_pb2.EndpointingConfig(stop_threshold=1.5))


def test_split_sentences() -> None:
    """Text is split after sentence punctuation and at line breaks, without empty parts."""
    assert split_sentences("Hello there. How are you?\nFine!  ") == ["Hello there.", "How are you?", "Fine!"]


# --------------------------------------------------------------------------------------
# process and health
# --------------------------------------------------------------------------------------


def test_health_reports_serving_overall_and_per_service(auth: riva.client.Auth) -> None:
    """grpc.health.v1 says SERVING for "", ASR and TTS, and NOT_FOUND for an unknown service."""
    stub = health_pb2_grpc.HealthStub(auth.channel)
    for service in ("", "nvidia.riva.asr.RivaSpeechRecognition", "nvidia.riva.tts.RivaSpeechSynthesis"):
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as err:
        stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_server_process_stops_cleanly_on_sigterm() -> None:
    """A separate server process prints its address, serves, and exits 0 on SIGTERM."""
    proc, address = _start_server_process()
    try:
        assert SpeechClient(address).check_health(timeout_s=5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------------------
# streaming recognition through riva.client
# --------------------------------------------------------------------------------------


def test_streaming_check_my_balance_interims_then_final(asr: riva.client.ASRService) -> None:
    """8 kHz speech in 20 ms chunks gives interim results first, then one final with "balance"."""
    audio = silence_8k(0.5) + speech_8k("Check my balance.") + silence_8k(1.2)
    results = recognize_stream(asr, audio, streaming_config())
    final_indexes = [i for i, r in enumerate(results) if r.is_final]
    assert len(final_indexes) == 1
    final = results[final_indexes[0]]
    assert "balance" in final.alternatives[0].transcript
    assert 0.0 < final.alternatives[0].confidence <= 1.0
    assert final.channel_tag == 1
    interims = [r for r in results[: final_indexes[0]] if not r.is_final]
    assert interims, "no interim result before the final"
    assert all(0.1 <= r.stability <= 0.9 for r in interims)
    assert all(r.alternatives[0].transcript for r in interims)
    processed = [r.audio_processed for r in results]
    assert processed == sorted(processed)
    assert processed[-1] <= len(audio) / 16000 + 1e-6


def test_two_utterances_in_one_stream_give_two_finals(asr: riva.client.ASRService) -> None:
    """Speech, 1 s of silence, more speech: the default 800 ms endpoint splits them into two finals."""
    audio = (
        silence_8k(0.3)
        + speech_8k("Check my balance.")
        + silence_8k(1.0)
        + speech_8k("I would like to speak to an agent.")
        + silence_8k(1.2)
    )
    got = finals(recognize_stream(asr, audio, streaming_config()))
    assert len(got) == 2
    # Each final is its own utterance (the general model is not sure of "to an agent": which
    # words it names for it depends on the decoder's state, so the check is on "speak").
    assert "balance" in got[0].alternatives[0].transcript
    assert "speak" in got[1].alternatives[0].transcript and "balance" not in got[1].alternatives[0].transcript
    assert got[0].audio_processed < got[1].audio_processed


def test_half_close_finalises_pending_speech(asr: riva.client.ASRService) -> None:
    """Audio that ends mid-utterance (no trailing silence) still yields its final on half-close."""
    audio = silence_8k(0.3) + speech_8k("Check my balance.")
    got = finals(recognize_stream(asr, audio, streaming_config(interim_results=False)))
    assert len(got) == 1
    assert "balance" in got[0].alternatives[0].transcript
    assert got[0].audio_processed == pytest.approx(len(audio) / 16000, abs=0.021)


def test_silence_only_stream_gives_no_results(asr: riva.client.ASRService) -> None:
    """Two seconds of digital silence produce no interim and no final."""
    assert recognize_stream(asr, silence_8k(2.0), streaming_config()) == []


def test_stop_history_sets_the_trailing_silence_before_the_final(asr: riva.client.ASRService) -> None:
    """A final arrives after stop_history ms of silence: 300 ms ends ~0.5 s of audio earlier than 800 ms."""
    audio = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(2.0)
    fast = finals(recognize_stream(asr, audio, streaming_config(interim_results=False, stop_history=300)))
    slow = finals(recognize_stream(asr, audio, streaming_config(interim_results=False, stop_history=800)))
    assert len(fast) == len(slow) == 1
    difference = slow[0].audio_processed - fast[0].audio_processed
    assert 0.4 <= difference <= 0.6
    assert slow[0].audio_processed < len(audio) / 16000 - 0.5  # ended by the endpoint, not by half-close


def test_stop_history_eou_sends_a_stable_partial_before_the_final(asr: riva.client.ASRService) -> None:
    """stop_history_eou emulates Riva's first pass: an interim with stability 1.0 precedes the final."""
    audio = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(1.5)
    results = recognize_stream(asr, audio, streaming_config(stop_history=800, stop_history_eou=200))
    final_index = next(i for i, r in enumerate(results) if r.is_final)
    stable = [r for r in results[:final_index] if r.stability == pytest.approx(1.0)]
    assert len(stable) == 1
    assert "balance" in stable[0].alternatives[0].transcript
    assert results[final_index].audio_processed - stable[0].audio_processed == pytest.approx(0.6, abs=0.1)


@pytest.mark.parametrize("encoding", ["MULAW", "ALAW"])
def test_g711_input_is_decoded(asr: riva.client.ASRService, encoding: str) -> None:
    """mu-law and A-law input at 8 kHz are decoded and recognised like linear PCM."""
    speech = silence_8k(0.3) + speech_8k("Check my balance.")
    pcm = speech + silence_8k(1.0)
    coded = convert.pcm16_to_ulaw(pcm) if encoding == "MULAW" else convert.pcm16_to_alaw(pcm)
    enc = getattr(riva.client.AudioEncoding, encoding)
    got = finals(recognize_stream(asr, coded, streaming_config(encoding=enc), size=160))
    assert len(got) == 1
    assert "balance" in got[0].alternatives[0].transcript
    # one byte per sample: the endpoint (800 ms after the speech) falls inside the audio sent
    speech_end_s = len(speech) / 16000
    assert speech_end_s + 0.3 < got[0].audio_processed <= len(coded) / 8000


def test_16k_input_is_recognised(asr: riva.client.ASRService) -> None:
    """Wideband 16 kHz input (no resampling) is recognised too."""
    pcm, _ = flite.synthesize("Check my balance.")
    audio = b"\0" * 9600 + pcm + b"\0" * 32000
    got = finals(recognize_stream(asr, audio, streaming_config(sample_rate_hz=16000), size=640))
    assert len(got) == 1
    assert "balance" in got[0].alternatives[0].transcript


def test_line_hiss_does_not_hold_the_utterance_open(asr: riva.client.ASRService) -> None:
    """Speech over steady -50 dBFS white noise still ends at the endpoint, before the stream does."""
    speech = silence_8k(0.5) + speech_8k("Check my balance.") + silence_8k(2.5)
    audio = mix(speech, white_noise(len(speech) / 16000, rms=100))
    got = finals(recognize_stream(asr, audio, streaming_config(interim_results=False)))
    assert len(got) == 1
    assert "balance" in got[0].alternatives[0].transcript
    assert got[0].audio_processed < len(audio) / 16000 - 1.0


def test_word_time_offsets_are_in_stream_time(asr: riva.client.ASRService) -> None:
    """With word offsets, words come in order with times measured from the start of the stream."""
    lead_s = 1.0
    audio = silence_8k(lead_s) + speech_8k("Check my balance.") + silence_8k(1.0)
    got = finals(recognize_stream(asr, audio, streaming_config(word_time_offsets=True)))
    words = got[0].alternatives[0].words
    assert [w.word for w in words][-1] == "balance"
    assert words[0].start_time >= lead_s * 1000 - 100
    for a, b in zip(words, words[1:]):
        assert a.start_time < a.end_time <= b.start_time + 10


def test_concurrent_streams_do_not_mix(asr: riva.client.ASRService) -> None:
    """Three simultaneous streams, each told the same three phrases (as the agent tells the
    server what a dialplan asks), each get their own phrase back."""
    phrases = {"balance": "Check my balance.", "agent": "I would like to speak to an agent.", "bill": "Pay my bill."}
    out: dict[str, list[str]] = {}
    config = streaming_config()
    config.config.speech_contexts.add(phrases=[p.rstrip(".").lower() for p in phrases.values()], boost=4.0)

    def run(key: str, text: str) -> None:
        audio = silence_8k(0.3) + speech_8k(text) + silence_8k(1.0)
        out[key] = [r.alternatives[0].transcript for r in finals(recognize_stream(asr, audio, config))]

    threads = [threading.Thread(target=run, args=item) for item in phrases.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=RPC_TIMEOUT_S)
    assert set(out) == set(phrases)
    for key, transcripts in out.items():
        assert len(transcripts) == 1 and key in transcripts[0], (key, transcripts)


def test_recognize_batch(asr: riva.client.ASRService) -> None:
    """The unary Recognize call returns one result per utterance."""
    audio = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(1.0) + speech_8k("Pay my bill.")
    config = riva_asr_pb2.RecognitionConfig(
        encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=8000, language_code="en-US"
    )
    response = asr.offline_recognize(audio, config)
    transcripts = [r.alternatives[0].transcript for r in response.results]
    assert len(transcripts) == 2
    assert "balance" in transcripts[0] and "bill" in transcripts[1]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (streaming_config(encoding=riva.client.AudioEncoding.FLAC), "unsupported encoding FLAC"),
        (streaming_config(encoding=riva.client.AudioEncoding.ENCODING_UNSPECIFIED), "unsupported encoding"),
        (streaming_config(sample_rate_hz=0), "sample_rate_hertz"),
        (streaming_config(language_code="de-DE"), "language_code 'de-DE'"),
        (streaming_config(stop_threshold=2.0), "stop_threshold"),
    ],
)
def test_invalid_streaming_config_is_invalid_argument(
    asr: riva.client.ASRService, config: riva_asr_pb2.StreamingRecognitionConfig, message: str
) -> None:
    """A bad streaming_config ends the stream with INVALID_ARGUMENT and says what is wrong."""
    with pytest.raises(grpc.RpcError) as err:
        recognize_stream(asr, silence_8k(0.2), config)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_audio_before_config_is_invalid_argument(asr: riva.client.ASRService) -> None:
    """A stream whose first request carries audio instead of streaming_config is rejected."""
    requests = iter([riva_asr_pb2.StreamingRecognizeRequest(audio_content=silence_8k(0.02))])
    with pytest.raises(grpc.RpcError) as err:
        list(asr.stub.StreamingRecognize(requests, timeout=RPC_TIMEOUT_S))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "streaming_config" in err.value.details()


def test_cancelled_stream_leaves_server_usable(asr: riva.client.ASRService) -> None:
    """Cancelling a stream mid-utterance does not break the next stream (its decoder is reset)."""
    gate = threading.Event()
    audio = silence_8k(0.3) + speech_8k("I would like to speak to an agent.")

    def requests() -> Iterator[riva_asr_pb2.StreamingRecognizeRequest]:
        yield riva_asr_pb2.StreamingRecognizeRequest(streaming_config=streaming_config())
        for chunk in chunks(audio[: len(audio) * 2 // 3]):
            yield riva_asr_pb2.StreamingRecognizeRequest(audio_content=chunk)
        gate.wait(RPC_TIMEOUT_S)

    call = asr.stub.StreamingRecognize(requests())
    first = next(call)  # an interim proves the utterance is being decoded
    assert not first.results[0].is_final
    call.cancel()
    gate.set()
    audio2 = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(1.0)
    for _ in range(3):  # more streams than pre-built decoders
        got = finals(recognize_stream(asr, audio2, streaming_config()))
        assert len(got) == 1 and "balance" in got[0].alternatives[0].transcript


# --------------------------------------------------------------------------------------
# synthesis through riva.client
# --------------------------------------------------------------------------------------


def test_synthesize_online_streams_chunks_of_plausible_total_length(tts: riva.client.SpeechSynthesisService) -> None:
    """Two sentences come back as many chunks of at most 100 ms, 1.5 to 8 s in total."""
    text = "Your balance is forty two dollars. Is there anything else I can help you with?"
    sizes = [len(r.audio) for r in tts.synthesize_online(text, sample_rate_hz=8000)]
    assert len(sizes) > 1
    assert max(sizes) <= 8000 * 2 // 10
    assert 1.5 < sum(sizes) / 16000 < 8.0


def test_synthesized_speech_is_recognised(
    tts: riva.client.SpeechSynthesisService, asr: riva.client.ASRService
) -> None:
    """Audio from SynthesizeOnline at 8 kHz, fed back to StreamingRecognize, says what was asked."""
    audio = b"".join(r.audio for r in tts.synthesize_online("Check my balance.", sample_rate_hz=8000))
    got = finals(recognize_stream(asr, silence_8k(0.3) + audio + silence_8k(1.0), streaming_config()))
    assert len(got) == 1 and "balance" in got[0].alternatives[0].transcript


def test_synthesize_batch_encodings_and_rates(tts: riva.client.SpeechSynthesisService) -> None:
    """Batch Synthesize: mu-law has one byte per sample of the PCM length; 16 kHz doubles 8 kHz."""
    text = "Thank you for calling."
    pcm8 = tts.synthesize(text, sample_rate_hz=8000).audio
    ulaw8 = tts.synthesize(text, sample_rate_hz=8000, encoding=riva.client.AudioEncoding.MULAW).audio
    pcm16 = tts.synthesize(text, sample_rate_hz=16000).audio
    assert len(ulaw8) == len(pcm8) // 2
    assert abs(len(pcm16) - 2 * len(pcm8)) <= 8
    assert convert.rms_dbfs(pcm8) > -40


@pytest.mark.parametrize("voice", ["English-US.Female-1", "English-US-Male-1", "rms", "slt"])
def test_riva_and_flite_voice_names_are_accepted(tts: riva.client.SpeechSynthesisService, voice: str) -> None:
    """Riva-style English-US voice names and flite voice names both synthesise."""
    response = tts.synthesize("Hello.", voice_name=voice, sample_rate_hz=16000)
    assert len(response.audio) > 16000 * 2 * 0.2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": "", "sample_rate_hz": 16000}, "text must not be empty"),
        ({"text": "Hi.", "voice_name": "German-DE.Male-1", "sample_rate_hz": 16000}, "voice_name"),
        ({"text": "Hi.", "sample_rate_hz": 4000}, "sample_rate_hz"),
        ({"text": "Hi.", "language_code": "fr-FR", "sample_rate_hz": 16000}, "language_code"),
    ],
)
def test_invalid_synthesis_request_is_invalid_argument(
    tts: riva.client.SpeechSynthesisService, kwargs: dict[str, object], message: str
) -> None:
    """Empty text, unknown voice, unsupported rate or language end SynthesizeOnline with INVALID_ARGUMENT."""
    with pytest.raises(grpc.RpcError) as err:
        list(tts.synthesize_online(**kwargs))  # type: ignore[arg-type]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_synthesis_config_lists_voices(tts: riva.client.SpeechSynthesisService) -> None:
    """GetRivaSynthesisConfig lists one model per flite voice with its language, under its Riva
    voice name where it has one."""
    response = tts.stub.GetRivaSynthesisConfig(riva_tts_pb2.RivaSynthesisConfigRequest(), timeout=RPC_TIMEOUT_S)
    voices = {c.parameters["voice_name"] for c in response.model_config}
    assert voices == {"English-US.Male-1", "English-US.Male-2", "English-US.Male-3", "English-US.Female-1", "kal"}
    assert {c.parameters["flite_voice"] for c in response.model_config} == set(flite.VOICES)
    assert all(c.parameters["language_code"] == "en-US" for c in response.model_config)


# --------------------------------------------------------------------------------------
# agent.speech.client.SpeechClient
# --------------------------------------------------------------------------------------


class Recorder:
    """Collects callback invocations with the thread they ran on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.threads: set[str] = set()
        self.final = threading.Event()
        self.done = threading.Event()
        self.error = threading.Event()
        self._lock = threading.Lock()

    def _add(self, kind: str, value: object) -> None:
        with self._lock:
            self.events.append((kind, value))
            self.threads.add(threading.current_thread().name)

    def on_interim(self, text: str) -> None:
        self._add("interim", text)

    def on_final(self, text: str, confidence: float) -> None:
        self._add("final", (text, confidence))
        self.final.set()

    def on_audio(self, audio: bytes) -> None:
        self._add("audio", audio)

    def on_done(self) -> None:
        self._add("done", None)
        self.done.set()

    def on_error(self, error: Exception) -> None:
        self._add("error", error)
        self.error.set()

    def kinds(self) -> list[str]:
        with self._lock:
            return [k for k, _ in self.events]


def _open(client: SpeechClient, rec: Recorder, **options: object) -> RecognitionStream:
    return client.open_recognition(
        RecognitionOptions(sample_rate_hz=8000, **options),  # type: ignore[arg-type]
        on_interim=rec.on_interim, on_final=rec.on_final, on_error=rec.on_error,
    )


def test_client_health_and_wait_ready(client: SpeechClient) -> None:
    """check_health is True and wait_ready returns at once against a running server."""
    assert client.check_health()
    client.wait_ready(timeout_s=10)


def test_client_recognition_callbacks_on_worker_thread(client: SpeechClient) -> None:
    """Interims then a final with "balance" arrive through the callbacks, on the stream's thread."""
    rec = Recorder()
    stream = _open(client, rec, stop_history_ms=400)
    audio = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(0.8)
    for chunk in chunks(audio):
        stream.push_audio(chunk)
    assert rec.final.wait(RPC_TIMEOUT_S)
    stream.end_input()
    assert stream.wait_done(RPC_TIMEOUT_S)
    stream.close()
    kinds = rec.kinds()
    assert kinds.count("final") == 1 and "interim" in kinds
    assert kinds.index("interim") < kinds.index("final")
    final = next(v for k, v in rec.events if k == "final")
    assert isinstance(final, tuple)
    text, confidence = final
    assert "balance" in text and 0 < confidence <= 1
    assert rec.threads == {"speech-recognition"}
    assert stream.dropped_chunks == 0


def _final_text(client: SpeechClient, text: str, **kwargs: object) -> str:
    rec = Recorder()
    stream = _open(client, rec, interim_results=False, **kwargs)
    for chunk in chunks(silence_8k(0.3) + speech_8k(text)):
        stream.push_audio(chunk)
    stream.end_input()
    assert stream.wait_done(RPC_TIMEOUT_S)
    stream.close()
    finals = [v[0] for k, v in rec.events if k == "final"]  # type: ignore[index]
    assert len(finals) == 1, rec.events
    return str(finals[0])


def test_phrase_hints_decode_with_a_model_of_just_those_phrases(client: SpeechClient) -> None:
    """By default speech_contexts phrases are decoded with a model of just those phrases, and
    words that do not read as them are Whisper's (--open-speech whisper): the hinted request
    comes out as the hint phrase, "balance" under unrelated hints is still heard."""
    hints = ("check my balance", "opening hours", "talk to an agent", "goodbye")
    assert _final_text(client, "I would like to check my balance.", phrases=hints).endswith("check my balance")
    heard = _final_text(client, "Check my balance.", phrases=("open the door", "turn on the lights")).split()
    assert "balance" in heard, heard
    # The next stream without hints is heard as itself too.
    assert "balance" in _final_text(client, "Check my balance.")


def _local_final(hints: object, text: str, phrases: tuple[str, ...]) -> str:
    """*text* said over 8 kHz µ-law to an in-process recognition session of *hints* (a HintModels)."""
    from agent.speech.server.main import DecoderPool, LocalRecognitionSession, RecognitionSettings

    settings = RecognitionSettings(encoding=riva.client.AudioEncoding.MULAW, sample_rate_hz=8000,
                                   endpointing=EndpointingParams(stop_history_ms=300), interim_results=False,
                                   word_time_offsets=False, phrases=phrases)
    session = LocalRecognitionSession(settings, DecoderPool(max_idle=0), hints)  # type: ignore[arg-type]
    audio = convert.pcm16_to_ulaw(silence_8k(0.3) + speech_8k(text)) + b"\xff" * 4000
    try:
        events = []
        for i in range(0, len(audio), 160):
            events += session.process(audio[i:i + 160])
        events += session.finish()
    finally:
        session.close()
    return " ".join(e.transcript for e in events if not hasattr(e, "stability"))


def test_whisper_hears_a_fast_sentence_to_its_last_word() -> None:
    """A long sentence said fast keeps its last words: the bound on Whisper's tokens (CTranslate2
    generates at most half the max_length it is given) once cut this one after "account"."""
    from agent.speech.server.whisper import WhisperTranscriber

    pcm, rate = flite.synthesize("Hi, I'm just calling to see how much I have in my checking account today.", "awb")
    heard = WhisperTranscriber().transcribe(convert.resample(pcm, rate, 16000)).text
    assert heard.endswith("checking account today"), heard


def test_the_hint_decoder_alone_cannot_hear_words_outside_the_hints() -> None:
    """--open-speech hints: "balance" (neither hinted nor among the everyday words a hint model
    also knows) cannot be heard under unrelated hints."""
    from agent.speech.server.main import HintModels

    hints = HintModels(open_speech="hints")
    assert "balance" not in hints.background_words()
    heard = _local_final(hints, "Check my balance.", ("open the door", "turn on the lights")).split()
    assert heard and "balance" not in heard, heard


def test_with_the_general_model_alongside_speech_outside_the_hints_is_heard() -> None:
    """--general-alongside-hints: a hinted stream is decoded by the general model too, whose words
    are used when the hint model's do not read as the hints: "balance" under unrelated hints is
    heard, and the hinted request still comes out as the hint phrase."""
    from agent.speech.server.main import HintModels

    hints = HintModels(general_alongside=True)
    assert "balance" in _local_final(hints, "Check my balance.", ("open the door", "turn on the lights")).split()
    assert _local_final(hints, "I would like to check my balance.",
                        ("check my balance", "opening hours", "talk to an agent", "goodbye")).endswith("check my balance")


def test_client_end_input_delivers_final_for_unfinished_utterance(client: SpeechClient) -> None:
    """end_input() half-closes; the server finalises the speech in flight and the stream completes."""
    rec = Recorder()
    stream = _open(client, rec, interim_results=False)
    for chunk in chunks(silence_8k(0.3) + speech_8k("Pay my bill.")):
        stream.push_audio(chunk)
    stream.end_input()
    assert stream.wait_done(RPC_TIMEOUT_S)
    stream.close()
    assert [k for k in rec.kinds()] == ["final"]
    assert "bill" in rec.events[0][1][0]  # type: ignore[index]


def test_client_close_mid_stream_is_prompt_and_silent(client: SpeechClient) -> None:
    """close() during an utterance returns promptly, ends the worker, and reports no error."""
    rec = Recorder()
    stream = _open(client, rec)
    for chunk in chunks(silence_8k(0.3) + speech_8k("I would like to speak to an agent.")):
        stream.push_audio(chunk)
    stream.close()
    assert stream.done
    count = len(rec.events)
    stream.push_audio(silence_8k(0.02))  # ignored after close
    assert len(rec.events) == count
    assert "error" not in rec.kinds()


def test_push_audio_drops_oldest_when_queue_full() -> None:
    """push_audio never blocks: with the RPC not consuming, the queue keeps the newest chunks."""
    release = threading.Event()
    sent: list[bytes] = []

    class BlockingStub:
        def StreamingRecognize(self, requests: Iterator[riva_asr_pb2.StreamingRecognizeRequest], metadata: object) -> list[object]:  # noqa: N802
            release.wait(RPC_TIMEOUT_S)
            for request in requests:
                if request.audio_content:
                    sent.append(request.audio_content)
            return []

    class FakeAsr:
        stub = BlockingStub()

        class auth:  # noqa: N801
            @staticmethod
            def get_auth_metadata() -> list[tuple[str, str]]:
                return []

    rec = Recorder()
    stream = RecognitionStream(
        FakeAsr(),  # type: ignore[arg-type]
        streaming_config(),
        on_interim=rec.on_interim,
        on_final=rec.on_final,
        on_error=rec.on_error,
        max_queue_chunks=4,
    )
    for i in range(10):
        stream.push_audio(bytes([i]) * 2)
    assert stream.dropped_chunks == 6
    stream.end_input()
    release.set()
    assert stream.wait_done(RPC_TIMEOUT_S)
    assert b"".join(sent) == b"".join(bytes([i]) * 2 for i in range(6, 10))


def test_client_synthesize_returns_pcm(client: SpeechClient) -> None:
    """Blocking synthesize returns pcm16 at the requested rate with a plausible duration."""
    audio = client.synthesize("Thank you for calling.", sample_rate_hz=8000)
    assert 0.8 < len(audio) / 16000 < 4.0


def test_client_synthesize_stream_chunks_then_done(client: SpeechClient) -> None:
    """synthesize_stream delivers several audio chunks, then on_done once, on the worker thread."""
    rec = Recorder()
    stream = client.synthesize_stream(
        "Your balance is forty two dollars. Goodbye.",
        sample_rate_hz=8000,
        on_audio=rec.on_audio,
        on_done=rec.on_done,
        on_error=rec.on_error,
    )
    assert rec.done.wait(RPC_TIMEOUT_S)
    assert stream.wait_done(RPC_TIMEOUT_S)
    kinds = rec.kinds()
    assert kinds.count("audio") > 1 and kinds[-1] == "done" and kinds.count("done") == 1
    assert rec.threads == {"speech-synthesis"}


def test_client_synthesize_stream_cancel_stops_callbacks(client: SpeechClient) -> None:
    """After cancel() returns, neither more audio nor on_done is delivered."""
    rec = Recorder()
    stream = client.synthesize_stream(
        " ".join(["This is a long announcement that keeps going."] * 20),
        sample_rate_hz=8000,
        on_audio=rec.on_audio,
        on_done=rec.on_done,
        on_error=rec.on_error,
    )
    stream.cancel()
    count = len(rec.events)
    assert stream.wait_done(RPC_TIMEOUT_S)
    assert len(rec.events) == count
    assert "done" not in rec.kinds() and "error" not in rec.kinds()


def test_client_errors_say_whether_retryable(client: SpeechClient) -> None:
    """A bad request is a non-retryable INVALID_ARGUMENT; an unreachable server is retryable."""
    with pytest.raises(SpeechError) as bad:
        client.synthesize("Hello.", sample_rate_hz=8000, voice="Klingon.Male-1")
    assert bad.value.code == "INVALID_ARGUMENT" and not bad.value.retryable
    dead = SpeechClient("127.0.0.1:1")
    try:
        assert not dead.check_health(timeout_s=2)
        with pytest.raises(TimeoutError):
            dead.wait_ready(timeout_s=0.5)
        with pytest.raises(SpeechError) as down:
            dead.synthesize("Hello.", sample_rate_hz=8000, timeout_s=5)
        assert down.value.retryable
        rec = Recorder()
        stream = dead.open_recognition(
            RecognitionOptions(sample_rate_hz=8000), on_interim=rec.on_interim, on_final=rec.on_final,
            on_error=rec.on_error,
        )
        assert rec.error.wait(RPC_TIMEOUT_S)
        error = rec.events[-1][1]
        assert isinstance(error, SpeechError) and error.retryable and error.code == "UNAVAILABLE"
        stream.close()
    finally:
        dead.close()


# --------------------------------------------------------------------------------------
# decode workers
# --------------------------------------------------------------------------------------


def _decode_worker_pids(server_pid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and b"spawn_main" in cmdline:
            pids.append(int(entry.name))
    return pids


def test_killed_decode_workers_fail_streams_retryably_and_are_replaced() -> None:
    """SIGKILLing every decode worker fails the open stream with UNAVAILABLE; the server then recovers."""
    proc, address = _start_server_process()
    auth = riva.client.Auth(uri=address)
    asr = riva.client.ASRService(auth)
    try:
        workers = _decode_worker_pids(proc.pid)
        assert workers, "no decode worker processes found"
        gate = threading.Event()

        def requests() -> Iterator[riva_asr_pb2.StreamingRecognizeRequest]:
            yield riva_asr_pb2.StreamingRecognizeRequest(streaming_config=streaming_config())
            for chunk in chunks(silence_8k(0.3) + speech_8k("I would like to speak to an agent.")):
                yield riva_asr_pb2.StreamingRecognizeRequest(audio_content=chunk)
            gate.wait(RPC_TIMEOUT_S)
            yield riva_asr_pb2.StreamingRecognizeRequest(audio_content=silence_8k(0.1))

        call = asr.stub.StreamingRecognize(requests())
        next(call)  # the stream is being decoded
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        gate.set()
        with pytest.raises(grpc.RpcError) as err:
            list(call)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "decode worker" in err.value.details()

        audio = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(1.0)
        recovered: list[str] = []
        for _ in range(120):  # retry as a client would, for up to ~60 s while workers restart
            try:
                recovered = [r.alternatives[0].transcript for r in finals(recognize_stream(asr, audio, streaming_config()))]
                break
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                threading.Event().wait(0.5)
        assert len(recovered) == 1 and "balance" in recovered[0]
        assert proc.poll() is None
    finally:
        auth.channel.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_in_process_decoding_mode_recognises() -> None:
    """With decode_processes=0 the server decodes in its gRPC threads and still recognises speech."""
    from agent.speech.server.main import start_speech_server

    server = start_speech_server("127.0.0.1:0", decode_processes=0, prewarm_decoders=1)
    auth = riva.client.Auth(uri=server.address)
    try:
        audio = silence_8k(0.3) + speech_8k("Check my balance.") + silence_8k(1.0)
        got = finals(recognize_stream(riva.client.ASRService(auth), audio, streaming_config()))
        assert len(got) == 1 and "balance" in got[0].alternatives[0].transcript
    finally:
        auth.channel.close()
        server.stop(grace=0)


def _corpus_ulaw(name: str) -> bytes:
    data = (REPO_ROOT / "ops" / "bench" / "corpus" / name).read_bytes()
    return data[data.index(b"data") + 8:]


def test_a_stream_does_not_inherit_the_previous_streams_channel() -> None:
    """A pooled decoder reused for the next call starts from the telephone mean again: the same
    caller audio gives the same hypotheses whether the decoder is new or has just decoded
    another caller (before, it kept that caller's cepstral mean, and the first call after
    start-up was decoded with the wideband one)."""
    from agent.dialplan.model import load_dialplans
    from agent.speech.server.main import (
        TELEPHONE_CMN, DecoderPool, HintModels, LocalRecognitionSession, RecognitionSettings)

    phrases = load_dialplans([str(REPO_ROOT / "dialplans" / "default.yaml")]).phrase_hints("main")
    settings = RecognitionSettings(encoding=riva.client.AudioEncoding.MULAW, sample_rate_hz=8000,
                                   endpointing=EndpointingParams(stop_history_ms=300), interim_results=True,
                                   word_time_offsets=False, phrases=phrases)
    silence = b"\xff" * 4000
    caller = silence + _corpus_ulaw("backchannel-mm-hmm-awb.wav") + silence \
        + _corpus_ulaw("turn-check-my-balance-rms.wav") + silence
    other = silence + _corpus_ulaw("turn-what-are-your-opening-hours-kal16.wav") + silence

    def decode(hints: HintModels, audio: bytes) -> list[tuple[str, str]]:
        session = LocalRecognitionSession(settings, DecoderPool(max_idle=0), hints)
        try:
            events = []
            for i in range(0, len(audio), 160):
                events += session.process(audio[i:i + 160])
            events += session.finish()
            return [(type(e).__name__, e.transcript) for e in events]
        finally:
            session.close()

    hints = HintModels()
    fresh = decode(hints, caller)
    assert any(t == "mhm" for _, t in fresh) and ("FinalHypothesis", "check my balance") in fresh, fresh
    decode(hints, other)  # the pooled hint decoder now carries another voice's mean
    decoder = hints.pool_for(phrases).acquire()
    carried = [float(c) for c in decoder.get_cmn().split(",")]
    assert max(abs(a - float(b)) for a, b in zip(carried, TELEPHONE_CMN.split(","))) > 1.0
    hints.pool_for(phrases).release(decoder)
    assert decode(hints, caller) == fresh


def test_the_last_word_is_heard_soon_after_the_voice_ends() -> None:
    """kal16's "check my balance": the recogniser's look-ahead used to hold "balance" back
    until ~100 ms of audio after the voice ended ("check my about" until then); the flush
    when the voice drops away brings it within 70 ms, with the same final words."""
    from agent.dialplan.model import load_dialplans
    from agent.speech.server.main import DecoderPool, HintModels, LocalRecognitionSession, RecognitionSettings

    manifest = json.loads((REPO_ROOT / "ops" / "bench" / "corpus" / "manifest.json").read_text())
    item = next(f for f in manifest["files"] if f["file"] == "turn-check-my-balance-kal16.wav")
    phrases = load_dialplans([str(REPO_ROOT / "dialplans" / "default.yaml")]).phrase_hints("main")
    settings = RecognitionSettings(encoding=riva.client.AudioEncoding.MULAW, sample_rate_hz=8000,
                                   endpointing=EndpointingParams(stop_history_ms=300), interim_results=True,
                                   word_time_offsets=False, phrases=phrases)
    audio = _corpus_ulaw(item["file"]) + b"\xff" * 4000
    session = LocalRecognitionSession(settings, DecoderPool(max_idle=0), HintModels())
    heard_at_ms = None
    finals = []
    try:
        for i in range(0, len(audio), 80):  # 10 ms at a time, as the agent sends
            for event in session.process(audio[i:i + 80]):
                if event.transcript.endswith("balance") and heard_at_ms is None:
                    heard_at_ms = (i + 80) // 8
                if not hasattr(event, "stability"):
                    finals.append(event.transcript)
        finals += [e.transcript for e in session.finish()]
    finally:
        session.close()
    assert finals == ["check my balance"]
    assert heard_at_ms is not None and heard_at_ms - item["voiced_end_ms"] <= 70, heard_at_ms


def test_client_asks_for_other_readings_and_gets_them_before_each_result(client: SpeechClient) -> None:
    """max_alternatives 4: Whisper's beam gives some utterances other readings, each delivered
    right before the interim or final it belongs to, never repeating it or each other; 1 (the
    default) gives none (the callback hears an empty tuple)."""
    def readings_of(text: str, n: int) -> list[tuple[str, object]]:
        rec = Recorder()
        stream = client.open_recognition(
            RecognitionOptions(sample_rate_hz=8000, stop_history_ms=400, max_alternatives=n),
            on_interim=rec.on_interim, on_final=rec.on_final, on_error=rec.on_error,
            on_alternatives=lambda texts: rec._add("alternatives", texts))
        for chunk in chunks(silence_8k(0.3) + convert.ulaw_to_pcm16(convert.pcm16_to_ulaw(speech_8k(text)))
                            + silence_8k(0.8)):
            stream.push_audio(chunk)
        assert rec.final.wait(RPC_TIMEOUT_S)
        stream.end_input()
        assert stream.wait_done(RPC_TIMEOUT_S)
        stream.close()
        return list(rec.events)

    found = 0
    for text in ("What time do you close?", "I want to speak to a person.", "Nothing else."):
        events = readings_of(text, 4)
        kinds = [k for k, _ in events]
        for i, (kind, value) in enumerate(events):
            if kind in ("interim", "final"):
                assert i > 0 and kinds[i - 1] == "alternatives", events
                words = value if kind == "interim" else value[0]  # type: ignore[index]
                others = events[i - 1][1]
                assert isinstance(others, tuple) and len(others) <= 3 and words not in others, events
                assert len(set(others)) == len(others), events
                found += bool(others)
    assert found, "no utterance had another reading"
    assert all(v == () for k, v in readings_of("What time do you close?", 1) if k == "alternatives")


def test_client_asks_for_punctuation_and_hears_a_sure_sentence_end(client: SpeechClient) -> None:
    """Asked to punctuate, the embedded recogniser ends Whisper's words with the question mark
    it is sure of ("what time do you close?") and leaves a half-sentence bare ("i was wondering
    if"); not asked, it writes no mark."""
    def final_of(text: str, punctuation: bool) -> str:
        rec = Recorder()
        stream = _open(client, rec, stop_history_ms=400, punctuation=punctuation)
        for chunk in chunks(silence_8k(0.3) + convert.ulaw_to_pcm16(convert.pcm16_to_ulaw(speech_8k(text)))
                            + silence_8k(0.8)):
            stream.push_audio(chunk)
        assert rec.final.wait(RPC_TIMEOUT_S)
        stream.close()
        return next(v[0] for k, v in rec.events if k == "final")  # type: ignore[index]

    assert final_of("What time do you close?", True) == "what time do you close?"
    assert final_of("I was wondering if", True) == "i was wondering if"
    assert final_of("What time do you close?", False) == "what time do you close"
