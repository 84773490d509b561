"""``openclaw-voice call``: a pjsua2 test caller that talks to an agent.

It places a real SIP call, sends each caller turn as real RTP (speech
synthesised with flite through the speech API, a WAV file, or RFC 4733 DTMF),
waits for the agent's reply, records the agent's audio, transcribes it, and
reports per turn what was said, what the agent answered and how long the agent
took: from the caller's last voiced frame handed to its media bridge to the
first voiced frame of the agent's reply coming out of it (both stamped on the
caller's media clock thread, so the caller's jitter buffer is included).
"""
from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import wave
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet import defer, threads
from twisted.internet.task import deferLater

from media.convert import resample, rms_dbfs
from media.frames import SAMPLE_RATE_HZ
from media.playout import PlayoutBuffer, PlayoutEvent, PlayoutEventType
from sip.pjsua import SipCall, SipConfig, SipStack
from sip.transport import SrtpSettings, TlsSettings

#: a received frame louder than this counts as the agent speaking
VOICED_DBFS = -40.0


@dataclass(frozen=True)
class CallerTurn:
    kind: str          # "say", "wav" or "dtmf"
    value: str


@dataclass
class TurnResult:
    caller: str
    agent_text: str = ""
    latency_ms: float | None = None
    barge_in_ms: float | None = None
    agent_audio_ms: float = 0.0


@dataclass
class CallReport:
    uri: str
    answered: bool = False
    codec: str = ""
    status: int = 0
    greeting: str = ""
    turns: list[TurnResult] = field(default_factory=list)
    hung_up_by: str = ""
    error: str = ""
    #: the SIP transport the call went over, and whether its media was SRTP
    transport: str = "udp"
    srtp: bool = False

    @property
    def ok(self) -> bool:
        return self.answered and not self.error and all(
            t.latency_ms is not None or t.barge_in_ms is not None for t in self.turns)

    def as_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri, "answered": self.answered, "codec": self.codec, "status": self.status,
            "greeting": self.greeting, "hung_up_by": self.hung_up_by, "error": self.error, "ok": self.ok,
            "transport": self.transport, "srtp": self.srtp,
            "turns": [t.__dict__ for t in self.turns],
        }


class AgentAudioRecorder:
    """Received audio with clock-thread timestamps (FrameSink)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._frames: list[tuple[float, bytes, bool]] = []
        self._monotonic = monotonic

    def push_frame(self, pcm: bytes) -> None:
        voiced = rms_dbfs(pcm) > VOICED_DBFS
        with self._lock:
            self._frames.append((self._monotonic(), pcm, voiced))

    def first_voiced_after(self, t: float) -> float | None:
        with self._lock:
            for at, _, voiced in self._frames:
                if at >= t and voiced:
                    return at
        return None

    def last_voiced(self) -> float | None:
        with self._lock:
            for at, _, voiced in reversed(self._frames):
                if voiced:
                    return at
        return None

    def audio_between(self, start: float, end: float) -> bytes:
        with self._lock:
            return b"".join(pcm for at, pcm, _ in self._frames if start <= at <= end)


class CallerSource:
    """The caller's outgoing audio (FrameSource) with the time its last frame went out."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.playout = PlayoutBuffer(on_event=self._on_event)
        self._done: dict[int, PlayoutEvent] = {}
        self._started: dict[int, PlayoutEvent] = {}
        self._monotonic = monotonic
        #: time.monotonic() of every voiced frame sent
        self.voiced_at: list[float] = []

    def pull_frame(self, nbytes: int) -> bytes:
        frame = self.playout.pull_frame(nbytes)
        if rms_dbfs(frame) > VOICED_DBFS:
            self.voiced_at.append(self._monotonic())
        return frame

    def first_voiced_after(self, t: float) -> float | None:
        for at in self.voiced_at:
            if at >= t:
                return at
        return None

    def _on_event(self, event: PlayoutEvent) -> None:
        if event.type is PlayoutEventType.STARTED:
            self._started[event.segment_id] = event
        else:
            self._done[event.segment_id] = event

    def started(self, segment_id: int) -> PlayoutEvent | None:
        return self._started.get(segment_id)

    def finished(self, segment_id: int) -> PlayoutEvent | None:
        return self._done.get(segment_id)


def read_wav(path: str) -> bytes:
    """A WAV file as 16 kHz mono 16-bit PCM."""
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16-bit PCM WAV, got {8 * w.getsampwidth()}-bit")
        pcm = w.readframes(w.getnframes())
        if w.getnchannels() == 2:
            import numpy as np

            a = np.frombuffer(pcm, dtype="<i2").reshape(-1, 2).mean(axis=1).astype("<i2")
            pcm = a.tobytes()
        elif w.getnchannels() != 1:
            raise ValueError(f"{path}: expected mono or stereo, got {w.getnchannels()} channels")
        return resample(pcm, w.getframerate(), SAMPLE_RATE_HZ)


def transcribe(speech: Any, pcm: bytes, timeout_s: float = 20.0, narrowband: bool = False) -> str:
    """Blocking: run *pcm* (16 kHz) through streaming recognition, return the finals.

    *narrowband*: the audio came through a G.711 call; it is sent at 8 kHz.
    """
    from agent.speech.client import RecognitionOptions

    rate = SAMPLE_RATE_HZ
    if narrowband:
        pcm, rate = resample(pcm, SAMPLE_RATE_HZ, 8000), 8000
    finals: list[str] = []
    stream = speech.open_recognition(RecognitionOptions(sample_rate_hz=rate, interim_results=False),
                                     on_interim=lambda t: None,
                                     on_final=lambda text, _conf: finals.append(text), on_error=lambda e: None)
    step = rate * 2 // 10
    for i in range(0, len(pcm), step):
        stream.push_audio(pcm[i: i + step])
    stream.push_audio(bytes(rate * 2))  # a second of silence ends the last utterance
    stream.end_input()
    stream.wait_done(timeout_s)
    stream.close()
    return " ".join(t.strip() for t in finals if t.strip())


class TestCaller:
    """Runs one scripted call on the reactor.

    Its waits poll with deferLater every 10-20 ms: the audio they wait for is stamped on
    pjsua2's media clock thread, which fires no reactor event.
    """

    def __init__(self, reactor: Any, speech: Any, uri: str, turns: list[CallerTurn], *, voice: str = "kal16",
                 greeting_timeout_s: float = 20.0, reply_timeout_s: float = 15.0, silence_s: float = 1.2,
                 barge_in_at_ms: int | None = None, codecs: tuple[str, ...] = ("PCMU", "PCMA", "G722"),
                 headers: tuple[tuple[str, str], ...] = (), transport: str = "udp",
                 tls: TlsSettings | None = None, srtp: str = "off") -> None:
        self.reactor = reactor
        self.speech = speech
        self.uri = with_transport(uri, transport)
        self.transport = transport
        self.tls = tls or TlsSettings(port=0)
        self.srtp = srtp
        self.turns = turns
        self.voice = voice
        self.greeting_timeout_s = greeting_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.silence_s = silence_s
        self.barge_in_at_ms = barge_in_at_ms
        self.codecs = codecs
        self.headers = headers
        self.report = CallReport(self.uri, transport=transport)
        self.recorder = AgentAudioRecorder()
        self.source = CallerSource()
        self.stack: SipStack | None = None
        self.call: SipCall | None = None
        self._disconnected: defer.Deferred[None] = defer.Deferred()
        self._confirmed: defer.Deferred[None] = defer.Deferred()

    @defer.inlineCallbacks
    def run(self) -> Any:
        audio: list[bytes | None] = []
        for turn in self.turns:
            if turn.kind == "say":
                pcm = yield threads.deferToThread(self.speech.synthesize, turn.value,
                                                  sample_rate_hz=SAMPLE_RATE_HZ, voice=self.voice)
                audio.append(pcm)
            elif turn.kind == "wav":
                audio.append(read_wav(turn.value))
            else:
                audio.append(None)
        transports = ("udp",) if self.transport == "udp" else ("udp", self.transport)
        self.stack = SipStack(SipConfig(host="127.0.0.1" if "127.0.0.1" in self.uri else "0.0.0.0", port=0,
                                        rtp_port=0, codecs=self.codecs, log_level=0, user="caller",
                                        transports=transports, tls=self.tls,
                                        srtp=SrtpSettings(policy=self.srtp)), self.reactor)
        self.stack.start()
        try:
            yield self._converse(audio)
        except Exception as e:
            self.report.error = f"{type(e).__name__}: {e}"
        finally:
            if self.call is not None and self.report.answered:
                self.report.srtp = self.call.srtp  # settled by the answer's SDP
            if self.call is not None and not self.call.disconnected:
                self.call.hangup()
                self.report.hung_up_by = self.report.hung_up_by or "caller"
                yield defer.DeferredList([self._disconnected], fireOnOneErrback=False)
            yield deferLater(self.reactor, 0.1)
            self.stack.stop()
        return self.report

    @defer.inlineCallbacks
    def _converse(self, audio: list[bytes | None]) -> Any:
        call = self.stack.make_call(self.uri, self.headers)  # type: ignore[union-attr]
        self.call = call
        call.attach_media(self.recorder, self.source)

        def confirmed() -> None:
            self.report.answered = True
            self.report.codec = call.codec
            if not self._confirmed.called:
                self._confirmed.callback(None)

        def disconnected(code: int, reason: str) -> None:
            self.report.status = self.report.status or code
            if not self.report.answered:
                self.report.error = f"call failed: {code} {reason}"
            elif not self.report.hung_up_by:
                self.report.hung_up_by = "agent"
            if not self._confirmed.called:
                self._confirmed.callback(None)
            if not self._disconnected.called:
                self._disconnected.callback(None)

        call.callbacks.on_confirmed = confirmed
        call.callbacks.on_disconnected = disconnected
        timeout = self.reactor.callLater(30.0, lambda: self._confirmed.called or self._confirmed.callback(None))
        yield self._confirmed
        if timeout.active():
            timeout.cancel()
        if not self.report.answered:
            if not self.report.error:
                self.report.error = "no answer within 30 s"
            return
        self.report.status = 200
        self.report.codec = call.codec
        answered_at = time.monotonic()
        if self.barge_in_at_ms is None:
            greeting_end = yield self._wait_agent_done(answered_at, self.greeting_timeout_s)
            self.report.greeting = yield self._transcribe(answered_at, greeting_end)
        else:
            first = yield self._wait_first_voice(answered_at, self.greeting_timeout_s)
            if first is None:
                raise RuntimeError("the agent said nothing")
            yield deferLater(self.reactor, self.barge_in_at_ms / 1000.0)
        for i, (turn, pcm) in enumerate(zip(self.turns, audio)):
            if call.disconnected:
                break
            result = TurnResult(caller=turn.value if turn.kind != "dtmf" else f"DTMF {turn.value}")
            self.report.turns.append(result)
            barge = self.barge_in_at_ms is not None and i == 0
            if pcm is None:
                call.send_dtmf(turn.value)
                end_at = time.monotonic()
            else:
                sid = self.source.playout.play(pcm)
                if barge:
                    yield self._measure_barge_in(sid, result)
                end_at = yield self._wait_segment(sid)
            first = yield self._wait_first_voice(end_at, self.reply_timeout_s)
            if first is None:
                continue
            result.latency_ms = round((first - end_at) * 1000.0, 1)
            last = yield self._wait_agent_done(first, self.reply_timeout_s)
            result.agent_audio_ms = round((last - first) * 1000.0)
            result.agent_text = yield self._transcribe(first, last)

    @defer.inlineCallbacks
    def _measure_barge_in(self, sid: int, result: TurnResult) -> Any:
        # From the caller's first voiced frame to the agent's last voiced frame.
        while self.source.started(sid) is None:
            if self._ended():
                return
            yield deferLater(self.reactor, 0.01)
        segment_start = self.source.started(sid).at_s  # type: ignore[union-attr]
        while self.source.first_voiced_after(segment_start) is None and self.source.finished(sid) is None:
            if self._ended():
                return
            yield deferLater(self.reactor, 0.01)
        started = self.source.first_voiced_after(segment_start) or segment_start
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            last = self.recorder.last_voiced()
            if last is not None and time.monotonic() - last > 0.3:
                result.barge_in_ms = round(max(0.0, last - started) * 1000.0, 1)
                return
            yield deferLater(self.reactor, 0.02)

    def _ended(self) -> bool:
        return self.call is None or self.call.disconnected

    @defer.inlineCallbacks
    def _wait_segment(self, sid: int) -> Any:
        """When the caller's turn *sid* ended (its last voiced frame); now, if the call ended
        before it was played out (the agent hung up while the caller spoke or waited to)."""
        while self.source.finished(sid) is None:
            if self._ended():
                return time.monotonic()
            yield deferLater(self.reactor, 0.01)
        finished = self.source.finished(sid).at_s  # type: ignore[union-attr]
        # The turn ends with the caller's last voiced frame, not trailing silence.
        voiced = [t for t in self.source.voiced_at if t <= finished]
        return voiced[-1] if voiced else finished

    @defer.inlineCallbacks
    def _wait_first_voice(self, after: float, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.call is not None and not self.call.disconnected:
            at = self.recorder.first_voiced_after(after)
            if at is not None:
                return at
            yield deferLater(self.reactor, 0.01)
        return self.recorder.first_voiced_after(after)

    @defer.inlineCallbacks
    def _wait_agent_done(self, after: float, timeout_s: float) -> Any:
        """Wait until the agent has spoken and then been silent for ``silence_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.call is not None and not self.call.disconnected:
            last = self.recorder.last_voiced()
            if last is not None and last >= after and time.monotonic() - last >= self.silence_s:
                return last
            yield deferLater(self.reactor, 0.02)
        return self.recorder.last_voiced() or time.monotonic()

    def _transcribe(self, start: float, end: float) -> defer.Deferred[str]:
        pcm = self.recorder.audio_between(start - 0.05, end + 0.05)
        narrowband = self.report.codec.upper() in ("PCMU", "PCMA")
        return threads.deferToThread(transcribe, self.speech, pcm, narrowband=narrowband)


def with_transport(uri: str, transport: str) -> str:
    """*uri* with ``;transport=`` set for TCP or TLS (unchanged when it names one already)."""
    if transport == "udp" or ";transport=" in uri.lower():
        return uri
    return f"{uri};transport={transport}"


def format_report(report: CallReport) -> str:
    media = f"{report.codec}, {'SRTP' if report.srtp else 'RTP'}, SIP over {report.transport.upper()}"
    lines = [f"call {report.uri}: " + (f"answered ({media})" if report.answered else
                                      f"FAILED {report.error or report.status}")]
    if report.greeting:
        lines.append(f"  greeting: {report.greeting}")
    header = f"  {'#':>2}  {'caller said':<32} {'agent answered':<48} {'latency':>9}"
    lines.append(header)
    for i, t in enumerate(report.turns, 1):
        lat = f"{t.latency_ms:.0f} ms" if t.latency_ms is not None else "no reply"
        if t.barge_in_ms is not None:
            lat += f" (agent stopped {t.barge_in_ms:.0f} ms after caller began)"
        lines.append(f"  {i:>2}  {t.caller[:32]:<32} {t.agent_text[:48]:<48} {lat:>9}")
    lat = [t.latency_ms for t in report.turns if t.latency_ms is not None]
    if lat:
        lines.append(f"  turn latency: median {statistics.median(lat):.0f} ms, worst {max(lat):.0f} ms "
                     f"({len(lat)} turns; caller's last voiced frame out → agent's first voiced frame in)")
    if report.hung_up_by:
        lines.append(f"  hung up by: {report.hung_up_by}")
    if report.error:
        lines.append(f"  error: {report.error}")
    return "\n".join(lines)


def report_json(report: CallReport) -> str:
    return json.dumps(report.as_dict())


def main_call(args: Any) -> int:
    """Entry point of ``openclaw-voice call`` (args from agent.app.cli)."""
    from twisted.internet import reactor

    from agent.speech.client import SpeechClient

    turns = list(args.turns or [])
    embedded = None
    if args.speech_uri:
        uri = args.speech_uri
    else:
        from agent.speech.server.main import start_speech_server

        embedded = start_speech_server("127.0.0.1:0")
        uri = embedded.address
    speech = SpeechClient(uri)
    speech.wait_ready(30.0)
    tls = TlsSettings(port=0, ca_file=args.tls_ca or "", certificate_file=args.tls_cert or "",
                      private_key_file=args.tls_key or "", verify_server=not args.tls_no_verify)
    caller = TestCaller(reactor, speech, args.uri, turns, voice=args.voice, barge_in_at_ms=args.barge_in_at,
                        codecs=tuple(args.codec) if args.codec else ("PCMU", "PCMA", "G722"),
                        silence_s=args.silence, transport=args.transport, tls=tls, srtp=args.srtp)
    outcome: dict[str, Any] = {}

    def finish(report: CallReport) -> None:
        outcome["report"] = report
        reactor.stop()

    def fail(failure: Any) -> None:
        outcome["error"] = failure.getErrorMessage()
        reactor.stop()

    reactor.callWhenRunning(lambda: caller.run().addCallbacks(finish, fail))
    reactor.run()
    speech.close()
    if embedded is not None:
        embedded.stop(0)
    report = outcome.get("report")
    if report is None:
        print(f"call failed: {outcome.get('error')}", file=sys.stderr)
        return 1
    print(report_json(report) if args.json else format_report(report))
    return 0 if report.ok else 1
