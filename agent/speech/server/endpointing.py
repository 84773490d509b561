"""Riva-style endpointing on voiced/unvoiced 20 ms frames (sans-I/O: no audio, no clock).

Riva's ``EndpointingConfig`` counts the acoustic model's non-blank/blank tokens; here voiced and
unvoiced frames stand in for them (see docs/speech.md for the rules).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from riva.client.proto import riva_asr_pb2

from agent.speech.server.rpc import ConfigError

#: the endpointing's frame
FRAME_MS = 20


@dataclass(frozen=True)
class EndpointingParams:
    """Riva ``EndpointingConfig`` values after defaults are applied (ms and 0..1 ratios)."""

    start_history_ms: int = 200
    start_threshold: float = 0.3
    stop_history_ms: int = 800
    stop_threshold: float = 0.98
    stop_history_eou_ms: int = 0
    stop_threshold_eou: float = 0.98

    @classmethod
    def from_proto(cls, cfg: riva_asr_pb2.EndpointingConfig | None) -> EndpointingParams:
        """Apply defaults for absent, zero or negative fields; reject thresholds above 1."""
        default = cls()
        if cfg is None:
            return default

        def history(name: str, fallback: int) -> int:
            if cfg.HasField(name) and getattr(cfg, name) > 0:
                return int(getattr(cfg, name))
            return fallback

        def threshold(name: str, fallback: float) -> float:
            if not cfg.HasField(name):
                return fallback
            value = float(getattr(cfg, name))
            if value > 1.0:
                raise ConfigError(f"endpointing_config.{name} must be between 0.0 and 1.0, got {value}")
            return value if value > 0.0 else fallback

        params = cls(
            start_history_ms=history("start_history", default.start_history_ms),
            start_threshold=threshold("start_threshold", default.start_threshold),
            stop_history_ms=history("stop_history", default.stop_history_ms),
            stop_threshold=threshold("stop_threshold", default.stop_threshold),
            stop_history_eou_ms=history("stop_history_eou", default.stop_history_eou_ms),
            stop_threshold_eou=threshold("stop_threshold_eou", default.stop_threshold_eou),
        )
        return params


START_OF_SPEECH = "start"
END_OF_UTTERANCE_FIRST_PASS = "eou"
END_OF_SPEECH = "end"


def frames_for(ms: int) -> int:
    """Whole frames covering *ms* (at least one)."""
    return max(1, math.ceil(ms / FRAME_MS))


class UtteranceEndpointer:
    """Decides start and end of utterances from a sequence of voiced/unvoiced 20 ms frames.

    Pure: no audio, no clock. :meth:`push` returns ``START_OF_SPEECH``,
    ``END_OF_UTTERANCE_FIRST_PASS``, ``END_OF_SPEECH`` or ``None`` for each frame.
    """

    def __init__(self, params: EndpointingParams) -> None:
        self.params = params
        self._start_frames = frames_for(params.start_history_ms)
        self._start_needed = max(1, math.ceil(params.start_threshold * self._start_frames - 1e-9))
        self._stop_frames = frames_for(params.stop_history_ms)
        self._stop_needed = max(1, math.ceil(params.stop_threshold * self._stop_frames - 1e-9))
        eou_ms = params.stop_history_eou_ms
        self._eou_frames = frames_for(eou_ms) if 0 < eou_ms < params.stop_history_ms else 0
        self._eou_needed = max(1, math.ceil(params.stop_threshold_eou * self._eou_frames - 1e-9))
        self._start_window: deque[bool] = deque(maxlen=self._start_frames)
        self._stop_window: deque[bool] = deque(maxlen=self._stop_frames)
        self._eou_fired = False
        self.in_speech = False
        self.speech_frames = 0

    @property
    def start_history_frames(self) -> int:
        return self._start_frames

    def push(self, voiced: bool) -> str | None:
        """Account one frame; return the endpoint event it causes, if any."""
        if not self.in_speech:
            self._start_window.append(voiced)
            if sum(self._start_window) >= self._start_needed:
                self.in_speech = True
                self.speech_frames = len(self._start_window)
                self._start_window.clear()
                self._stop_window.clear()
                self._eou_fired = False
                return START_OF_SPEECH
            return None
        self.speech_frames += 1
        self._stop_window.append(voiced)
        if voiced:
            self._eou_fired = False
        window = self._stop_window
        if len(window) >= self._stop_frames and len(window) - sum(window) >= self._stop_needed:
            self.reset()
            return END_OF_SPEECH
        if self._eou_frames and not self._eou_fired and len(window) >= self._eou_frames:
            recent = list(window)[-self._eou_frames :]
            if len(recent) - sum(recent) >= self._eou_needed:
                self._eou_fired = True
                return END_OF_UTTERANCE_FIRST_PASS
        return None

    def reset(self) -> None:
        """Forget the current utterance (used after a forced end)."""
        self.in_speech = False
        self.speech_frames = 0
        self._start_window.clear()
        self._stop_window.clear()
        self._eou_fired = False
