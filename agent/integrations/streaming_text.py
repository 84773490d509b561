"""Sans-I/O pieces of a streamed model reply: server-sent events in, sentences out.

:class:`SseParser` turns the bytes of a ``text/event-stream`` body into the ``data`` of each
event (the chat-completions stream sends one JSON chunk per event and ``[DONE]`` last).
:class:`SentenceSplitter` turns the reply's text, as it grows, into complete sentences, so the
first can be spoken while the model still writes the rest. Both are fed and read by the caller;
neither does I/O or reads a clock.
"""
from __future__ import annotations

import re

__all__ = ["SentenceSplitter", "SseParser"]

#: words ending in "." that do not end a sentence
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "no", "jr", "sr", "prof", "inc"})
_END = re.compile(r"[.!?]+[\"')\]]*")


class SseParser:
    """Server-sent events (the W3C ``text/event-stream`` format): ``feed(bytes)`` returns the
    ``data`` of every event completed by those bytes (multi-line data joined with newlines)."""

    def __init__(self, max_event_bytes: int = 1 << 20) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            cut = self._buffer.find(b"\n")
            if cut < 0:
                if len(self._buffer) > self._max:
                    raise ValueError("server-sent event line too long")
                return events
            line = self._buffer[:cut].rstrip(b"\r").decode("utf-8", "replace")
            self._buffer = self._buffer[cut + 1:]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(":"):
                continue  # a comment (keep-alive)
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)

    def close(self) -> list[str]:
        """Events left when the stream ends without a final blank line."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        return events


class SentenceSplitter:
    """Text in as it arrives; complete sentences out as soon as their end is certain.

    A ``.``/``!``/``?`` ends a sentence when followed by white space, or at the end of the text
    so far unless it may still be part of something longer (a number, ``Mr.``, an initial): then
    the next text decides. :meth:`flush` returns what is left when the reply is over.
    """

    def __init__(self, min_chars: int = 2) -> None:
        self._text = ""
        self._min = min_chars

    def feed(self, text: str) -> list[str]:
        self._text += text
        out: list[str] = []
        start = 0
        for m in _END.finditer(self._text):
            end = m.end()
            at_end = end == len(self._text)
            if not at_end and not self._text[end].isspace():
                continue  # "3.5", "e.g.x"
            if not self._ends_sentence(self._text[start:m.start()], self._text[m.start()], at_end):
                continue
            sentence = self._text[start:end].strip()
            if len(sentence) >= self._min:
                out.append(sentence)
                start = end
        self._text = self._text[start:]
        return out

    @staticmethod
    def _ends_sentence(before: str, mark: str, at_end: bool) -> bool:
        if mark != ".":
            return True
        word = before.rsplit(None, 1)[-1] if before.strip() else ""
        if word.lower().rstrip(".") in _ABBREVIATIONS:
            return False
        if len(word) == 1 and word.isupper():
            return False  # an initial: "J. Smith"
        return not (at_end and word[-1:].isdigit())  # "3." may go on as "3.5"

    def flush(self) -> str:
        rest, self._text = self._text.strip(), ""
        return rest
