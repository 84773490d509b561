"""A pocketsphinx decoder whose words give way to Whisper's when they are not the hints.

:class:`OpenSpeechDecoder` offers what ``UtteranceRecognizer`` uses of a decoder. It feeds the
audio to a pocketsphinx decoder (the phrase-hint decoder, or the general model's for a stream
without hints) and keeps the utterance's audio. Whenever a hypothesis is asked for, the
pocketsphinx words are kept if the :class:`~agent.speech.server.biasing.PhraseJudge` says they
read as the hints (the dialplan's own phrases: fast and right), unless Whisper has already heard
the utterance, with confidence, as words that do not (:meth:`OpenSpeechDecoder._whisper_heard_otherwise`),
or, at the utterance's end, they leave a stretch of the caller's voice unheard or the decoder
was unsure of one of them (:meth:`OpenSpeechDecoder._misfit_at_end`);
otherwise the caller said something else, and the words are Whisper's, made at the last *checkpoint* (the recogniser
calls :meth:`checkpoint` when the voice has just dropped away, and before the utterance's end
when voice came after the last one). Between checkpoints the last Whisper words stand. A stream
without hints has no judge: every checkpoint and end is Whisper's. Figures: docs/speech.md.

Whisper gives no word times here, so a Whisper final's words are laid out over the span the
pocketsphinx decoder heard speech in, in proportion to their letters (the last word ends where
the speech did, which is what failover's replay buffer needs).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agent.speech.server.biasing import PhraseJudge
from agent.speech.server.recognizer import clean_word
from agent.speech.server.whisper import Transcript

#: 10 ms of 16 kHz pcm16
_STEP_BYTES = 320
#: the hint decoder's final words do not stand when it spent at least this much of the caller's
#: voice (the recogniser's, :meth:`OpenSpeechDecoder.voicing`) in one stretch with no word: silence, a filler, the
#: utterance's start or end. It fits what it cannot match into a few words of the hints and
#: leaves the rest unheard ("what are you" for "my card got swallowed by the ATM", "that" for
#: "connect me to the help desk"). On the dev half the dialplan's phrases left at most 170 ms so;
#: chosen there (docs/speech.md, "Voice the hint words leave unheard")
MAX_VOICE_WITHOUT_WORDS_MS = 200
#: nor when one of its words has a posterior probability (pocketsphinx's, over the final's
#: lattice) under this: the hints had several ways to spell that stretch and none fitted
#: ("how much i and okay" for "how are my finances looking", "talk to on" for "ta ta"). On the
#: dev half the dialplan's phrases heard right had at least 0.236 at 8 kHz and 0.293 at 16 kHz;
#: 0.12-0.2 did the same for open speech, 0.25 changed an in-domain utterance; chosen there
#: (docs/speech.md, "Hint words the decoder was unsure of")
MIN_WORD_POSTERIOR = 0.2
#: Whisper's words, once made for an utterance, outweigh hint-decoder words that read as the
#: hints when Whisper's confidence is at least this. Chosen on the dev half
#: (ops/bench/asr-wer, docs/speech.md "Whisper's words over the hints'"): 0.3-0.5 keep the gain
#: on open speech; 0.5 also keeps the hint decoder's in-domain words and backchannels as before.
WHISPER_OVER_HINTS_MIN_CONFIDENCE = 0.5
#: with punctuation asked for, Whisper's words end with a full stop (or the question mark it
#: wrote) when its probability of a sentence mark right after the last word is at least this;
#: no mark otherwise (at the voice's drops on the dev half: a median of about 0.6 at
#: sentences' ends, 0.3 at gaps inside them). Chosen on the evaluation corpus's dev half with
#: the endpointer's rule (docs/latency.md, "Written as a whole sentence")
SENTENCE_END_MIN_PROBABILITY = 0.5
#: ... and Whisper's confidence in the words is at least this: a mark on words it barely heard
#: ("that way." for "how late", 0.13) is no sign the caller finished (docs/latency.md)
SENTENCE_END_MIN_CONFIDENCE = 0.3


#: an utterance that ended at most this long (ms) before the next one began is the first piece
#: of the same sentence as far as the sentence end goes: Whisper judges the next one's end over
#: both (a caller's pause inside a turn: docs/latency.md, "A second piece is judged with the first")
BEFORE_MAX_GAP_MS = 1000
#: at most this much of the first piece's audio (and the silence after it) is read with it
BEFORE_MAX_AUDIO_BYTES = 2 * 16000 * 8


class Transcriber(Protocol):
    def transcribe(self, pcm16k: bytes, alternatives: int = 1, sentence_end: bool = False,
                   before: tuple[bytes, str] | None = None) -> Transcript: ...


@dataclass(frozen=True)
class _Hyp:
    hypstr: str
    prob: float


@dataclass(frozen=True)
class _Seg:
    word: str
    start_frame: int
    end_frame: int
    prob: float


class OpenSpeechDecoder:
    """*decoder*'s words when *judge* accepts them, else *transcriber*'s (see the module)."""

    def __init__(self, decoder: Any, transcriber: Transcriber, judge: PhraseJudge | None = None,
                 alternatives: int = 1, punctuate: bool = False) -> None:
        self.decoder = decoder
        #: end Whisper's words with a sentence mark when it is sure of it (Riva
        #: ``enable_automatic_punctuation``; the phrase-hint decoder's words have none)
        self._punctuate = punctuate
        self._transcriber = transcriber
        self._judge = judge
        #: readings Whisper is asked for (Riva ``max_alternatives``): 1, or a beam search's best
        self._n_alternatives = alternatives
        self._audio = bytearray()
        self._frames = 0
        #: the utterance's voicing, one flag per 10 ms fed (:meth:`voicing`)
        self._voiced: list[bool] = []
        self._final = False
        #: Whisper's words at the last checkpoint
        self._whisper: Transcript | None = None
        #: voice came after them: their sentence mark no longer holds
        self._voice_since = False
        #: Whisper's words at the last checkpoint do not read as the hints, within an utterance
        #: and at its end (the judge counts the end of sentence there); judged once per run
        self._whisper_off_hints = (False, False)
        self._accepted: bool | None = None
        #: when punctuating: the last utterance's final words and audio, and the silence between
        #: it and this one when that was short enough for this one to go on from it (ms; None)
        self._last_words = ""
        self._last_audio = b""
        self._gap_ms: int | None = None
        #: utterances whose final words were Whisper's / pocketsphinx's; Whisper runs
        self.whisper_finals = 0
        self.decoder_finals = 0
        self.whisper_runs = 0

    def start_utt(self) -> None:
        self.decoder.start_utt()
        self._audio.clear()
        self._frames = 0
        self._voiced = []
        self._final = False
        self._whisper = None
        self._voice_since = False
        self._whisper_off_hints = (False, False)
        self._accepted = None
        self._gap_ms = None

    def after_gap(self, gap_ms: float | None) -> None:
        """The utterance just begun started *gap_ms* after the previous one ended (None: it is
        the stream's first)."""
        if gap_ms is None or gap_ms > BEFORE_MAX_GAP_MS or not self._last_words:
            self._gap_ms = None
        else:
            self._gap_ms = max(0, int(gap_ms))

    def voicing(self, voiced: list[bool]) -> None:
        """Before the utterance's end: which of the 10 ms fed were the caller's voice (the
        recogniser's energy rule, media.vad)."""
        self._voiced = voiced

    def on_voice(self) -> None:
        """The caller's voice goes on (after the last checkpoint's words, if any)."""
        self._voice_since = True

    def process_raw(self, audio: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        self.decoder.process_raw(audio, no_search, full_utt)
        self._audio += audio
        self._frames += len(audio) // _STEP_BYTES
        self._accepted = None

    def checkpoint(self) -> None:
        """The voice has just dropped away: make Whisper's words now if they will be needed."""
        if not self._uses_decoder():
            self._run_whisper()

    def end_utt(self) -> None:
        self.decoder.end_utt()
        self._final = True
        self._accepted = None
        if self._uses_decoder():
            self.decoder_finals += 1
        else:
            if self._whisper is None or self._voice_since:
                # The judge turned the words down only now (left hanging, or voice left unheard),
                # and Whisper's last words, if any, are of a dip the voice went on from.
                dip = self._whisper if self._voice_since else None
                self._run_whisper()
                if dip is not None and dip.text and set(self._whisper.text.split()) <= set(dip.text.split()):
                    # The whole says nothing the dip did not ("agent agent agent" for the dip's
                    # "agent": Whisper repeating itself over a short utterance): the dip's words
                    # stand, with the whole's sentence end.
                    self._whisper = replace(dip, sentence_end=self._whisper.sentence_end,
                                            question=self._whisper.question)
            self.whisper_finals += 1
        if self._punctuate:
            self._last_words = self._words()
            self._last_audio = bytes(self._audio[-BEFORE_MAX_AUDIO_BYTES:])

    def _words(self) -> str:
        """The words :meth:`hyp` gives, without a sentence mark."""
        if self._uses_decoder() or self._whisper is None:
            hyp = self.decoder.hyp()
            return " ".join(hyp.hypstr.split()) if hyp is not None else ""
        return self._whisper.text

    def hyp(self) -> Any:
        if self._uses_decoder() or self._whisper is None:
            return self.decoder.hyp()
        w = self._whisper
        if not w.text:
            return None
        return _Hyp((w.written() if self._punctuate else w.text) + self._mark(w), w.confidence)

    def _mark(self, w: Transcript) -> str:
        """The sentence mark that ends *w*'s words, if any."""
        if (not self._punctuate or self._voice_since or w.sentence_end is None
                or w.sentence_end < SENTENCE_END_MIN_PROBABILITY or w.confidence < SENTENCE_END_MIN_CONFIDENCE):
            return ""  # (voice since: the words go on, Whisper will hear them at the next checkpoint)
        return "?" if w.question else "."

    @property
    def alternatives(self) -> tuple[str, ...]:
        """Whisper's other readings of the words :meth:`hyp` gives (none when they are the
        phrase-hint decoder's)."""
        if self._uses_decoder() or self._whisper is None or not self._whisper.text:
            return ()
        return self._whisper.alternatives

    def seg(self) -> Any:
        if self._uses_decoder() or self._whisper is None:
            return self.decoder.seg()
        return self._layout(self._whisper.text.split(), self._whisper.confidence)

    def _uses_decoder(self) -> bool:
        if self._judge is None:
            return False
        if self._accepted is None:
            hyp = self.decoder.hyp()
            words = hyp.hypstr.split() if hyp is not None else []
            self._accepted = not words or (self._judge.accepts(words, self._final)
                                           and not (self._whisper_heard_otherwise()
                                                    and not self._goes_on_from_whisper(words)
                                                    and not self._whisper_says_the_same_words(words))
                                           and not (self._final and self._misfit_at_end()))
        return self._accepted

    def _misfit_at_end(self) -> bool:
        """Did the decoder spend MAX_VOICE_WITHOUT_WORDS_MS of voice or more in one stretch with
        no word, or has one of its words a posterior under MIN_WORD_POSTERIOR? (At the end only:
        before it, the last word may still be coming, and the dialplan's phrases would wait for
        Whisper; and pocketsphinx works the posteriors out over the final's lattice.)"""
        need = MAX_VOICE_WITHOUT_WORDS_MS // 10
        for s in self.decoder.seg() or ():
            if clean_word(s.word) is None:
                if sum(self._voiced[s.start_frame:s.end_frame + 1]) >= need:
                    return True
            elif s.prob < MIN_WORD_POSTERIOR:
                return True
        return False

    def _whisper_heard_otherwise(self) -> bool:
        """Whisper has already heard this audio (at a checkpoint the decoder's words then did not
        read as the hints), with confidence, as words that do not read as the hints either: the
        decoder's later words that do ("how late are you there on fridays" as "i would like to",
        where Whisper heard "how late are you they're on friday") are the hints' pull, not the
        caller's. Below WHISPER_OVER_HINTS_MIN_CONFIDENCE Whisper's short-utterance slips
        ("hours hours", "some body") would replace the hint decoder's right words."""
        return self._whisper_off_hints[self._final]

    def _whisper_says_the_same_words(self, words: Sequence[str]) -> bool:
        """Are Whisper's words the decoder's *words*, some said more than once? ("agent agent
        agent" for the decoder's "agent": Whisper repeating itself over a short utterance is no
        sign the caller said something else.)"""
        w = self._whisper
        return w is not None and set(w.text.split()) == set(words)

    def _goes_on_from_whisper(self, words: Sequence[str]) -> bool:
        """Do the decoder's *words* go on from what Whisper heard at an earlier checkpoint, the
        caller's voice having gone on since ("when do you" at a dip inside "when do you close")?
        Whisper then read part of the sentence, its last word maybe cut: the decoder agrees with
        all its words but that last one (at least one), and has more, not starting over."""
        w = self._whisper
        if w is None or not self._voice_since:
            return False
        heard = w.text.split()
        agreed = max(1, len(heard) - 1)
        # (not when the decoder starts over: "no thanks no thanks" is it repeating itself)
        return len(words) > agreed and list(words[:agreed]) == heard[:agreed] and heard[0] not in words[agreed:]

    def _run_whisper(self) -> None:
        context: dict[str, tuple[bytes, str]] = {}
        if self._gap_ms is not None:  # (only when punctuating: the last words are kept only then)
            before = self._last_audio + bytes(2 * 16 * self._gap_ms)
            context["before"] = (before[-BEFORE_MAX_AUDIO_BYTES:], self._last_words)
        w = self._whisper = self._transcriber.transcribe(bytes(self._audio), self._n_alternatives,
                                                         sentence_end=self._punctuate, **context)
        self._voice_since = False
        self.whisper_runs += 1
        heard = w.text.split() if w.confidence >= WHISPER_OVER_HINTS_MIN_CONFIDENCE else []
        judge = self._judge

        def off_hints(final: bool) -> bool:
            # (Whisper's words at a dip may stop on any word: only whether they read as the hints counts)
            return bool(heard) and judge is not None and not judge.reads_as_hints(heard, final)

        self._whisper_off_hints = (off_hints(False), off_hints(True))

    def _layout(self, words: Sequence[str], confidence: float) -> list[_Seg]:
        """*words* spread over the frames the decoder heard words in (all of them if none)."""
        # (pocketsphinx gives no segments, None, when it has no hypothesis: Whisper may still
        # have heard words, in a stream without hints)
        spoken = [s for s in self.decoder.seg() or () if clean_word(s.word) is not None]
        start = spoken[0].start_frame if spoken else 0
        end = spoken[-1].end_frame if spoken else max(0, self._frames - 1)
        letters = sum(len(w) for w in words) or 1
        segs: list[_Seg] = []
        at = float(start)
        for word in words:
            length = (end - start + 1) * len(word) / letters
            segs.append(_Seg(word, int(at), max(int(at), int(at + length) - 1), confidence))
            at += length
        return segs
