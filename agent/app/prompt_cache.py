"""The prompt cache: synthesised audio of a dialplan's static prompts."""
from __future__ import annotations

from media.trim import trim_silence


class PromptAudioCache:
    """Synthesised audio of a dialplan's static prompts, keyed by (text, voice)."""

    def __init__(self) -> None:
        self._audio: dict[tuple[str, str], bytes] = {}

    def get(self, text: str, voice: str) -> bytes | None:
        return self._audio.get((text, voice))

    def put(self, text: str, voice: str, pcm: bytes) -> None:
        """Keep *pcm* without the synthesiser's leading silence (it would add to every turn)."""
        self._audio[(text, voice)] = trim_silence(pcm)

    def __len__(self) -> int:
        return len(self._audio)
