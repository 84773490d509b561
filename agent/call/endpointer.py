"""Deciding when the caller has finished a turn, from the words, the voice and the silence.

The silence that ends a turn depends on what the caller has said so far and how they said it:

* a request of the current ask (an intent match by the examples' words) in words not left
  unfinished: a short silence (``complete_silence_ms``), or ``answer_silence_ms`` when it is a
  yes or a no alone ("yeah", "nope", often the start of more); a request matched by meaning only
  ("is there a live person I could chat with"): ``meaning_silence_ms``;
* a finished sentence (:mod:`agent.call.completeness`: a clause ending on a content word, a
  closed answer) that is no request of the ask ("my card was stolen yesterday"):
  ``finished_silence_ms`` (``falling_finished_silence_ms`` when the voice fell at its end,
  :mod:`agent.call.prosody`); the reply, a reprompt, is prepared during it. Once such words
  (or a request by meaning) are all the recogniser's final results, heard with confidence
  (``confident_min_confidence``): ``confident_silence_ms``, if shorter; and once the
  recogniser has written them as a whole sentence (its latest result ends with a full stop or
  a question mark: with the embedded engine, Whisper's own sure sentence end, heard in the voice
  as well as the words): ``sentence_end_silence_ms``, if shorter;
* words ending where a sentence cannot ("I would like to", "I was wondering if", "my account
  and", "hi there"): ``continuation_silence_ms``, even if an intent matches ("bye that i'd");
* anything else ("my card", "checking account"): ``incomplete_silence_ms``
  (``falling_silence_ms`` after a falling voice).

:class:`TurnEndpointer` is pure: it is fed time stamps (seconds on the call's clock) and
transcripts, and returns decisions; it never reads a clock.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from agent.call.completeness import (ACKNOWLEDGEMENTS, HESITATIONS, Completeness, alternatives, completeness,
                                     ends_in_digits, ends_with_closing_tag, is_acknowledgement, is_bare_answer,
                                     punctuated_words)
from agent.call.completeness import turn_words as words
from agent.call.prosody import FALL, ProsodyReading

T = TypeVar("T")

#: short replies that acknowledge without taking the turn
BACKCHANNELS = ACKNOWLEDGEMENTS | HESITATIONS

def _plain(text: str) -> str:
    return " ".join(words(text.replace("-", " ")))


def is_backchannel(text: str) -> bool:
    """True for an acknowledgement such as "uh-huh", "okay", "yeah", a hesitation, or nothing."""
    w = _plain(text)
    return w == "" or w in BACKCHANNELS or all(x in BACKCHANNELS for x in w.split())


def acknowledges_only(text: str, offers_intents: bool, slot_type: str | None,
                      peek_intent: Callable[[str], object | None]) -> bool:
    """Are *text*'s words only an acknowledgement or a hesitation ("all right", "oh"), at an ask
    that offers intents (*offers_intents*, no slot) and takes none of them from these words
    (*peek_intent*, by the examples' words)? They answer nothing: the agent goes on listening."""
    return offers_intents and slot_type is None and is_backchannel(text) and peek_intent(text) is None


#: a full stop, question or exclamation mark at the end, closing quotes and brackets aside; not
#: the last dot of an ellipsis
_SENTENCE_END = re.compile(r"(?<!\.)[.?!][\"')\]]*\s*$")


def ends_sentence(text: str) -> bool:
    """Does a recogniser's transcript end with a sentence's full stop, question or exclamation
    mark ("Can I speak to someone, please?"), not a comma or an ellipsis ("I was wondering...")?
    Recognisers punctuate only when asked (Riva ``enable_automatic_punctuation``)."""
    return _SENTENCE_END.search(text) is not None


def is_thinking_aloud(text: str) -> bool:
    """Only hesitations, or "I see" ("um", "oh I see"): no answer to a yes/no question yet, unlike
    "okay", "uh-huh" or "alright", which a caller says to mean yes."""
    return " ".join(w for w in _plain(text).split() if w not in HESITATIONS) in ("", "i see")


def phrase_pattern(phrases: frozenset[str]) -> re.Pattern[str]:
    """Any of *phrases* as whole words (the longest first: "all right" before "all")."""
    return re.compile(rf"\b(?:{alternatives(phrases)})\b")


def words_besides(text: str, phrases: re.Pattern[str]) -> list[str]:
    """The words of *text* outside the *phrases* (:func:`phrase_pattern`): "all right i'm ah"
    besides the backchannels is ["i'm"]."""
    return phrases.sub(" ", _plain(text)).split()


@dataclass(frozen=True)
class EndpointerConfig:
    #: a request of the current ask (an intent match) in words not left unfinished
    complete_silence_ms: int = 30
    #: a request of the ask matched by meaning only, not by the examples' words. 300 answers such
    #: requests twice as fast, but also answers callers who pause after a first half that is a
    #: request in itself ("what's the amount | in my savings"): by default no shorter than a
    #: finished sentence's (docs/latency.md, "With Whisper's words")
    meaning_silence_ms: int = 600
    #: finished words that are no request of the ask ("my card was stolen yesterday"): longer,
    #: because a misrecognised half-sentence reads as finished as often as a real one does
    #: (values chosen on the evaluation corpus: docs/latency.md); after a voice that fell at
    #: its end, falling_finished_silence_ms
    finished_silence_ms: int = 600
    falling_finished_silence_ms: int = 600
    #: words neither finished nor unfinished ("my card"), or nothing recognised
    incomplete_silence_ms: int = 800
    #: unfinished words ("I would like to"): longer than a pause inside a sentence
    continuation_silence_ms: int = 800
    #: words neither finished nor unfinished, said with a voice that fell at the end
    falling_silence_ms: int = 800
    #: a turn needs this much speech before it can end on its words alone
    min_speech_ms: int = 150
    #: finished words in less speech than this ("no", "yes", or the first word of "what
    #: time do you open" heard as "no" in the stop before "time") end after
    #: short_turn_silence_ms instead: a recogniser's guess at one short word is the least sure,
    #: and people stop inside words for longer than complete_silence_ms
    short_turn_ms: int = 300
    short_turn_silence_ms: int = 250
    #: a request that is a yes or a no alone ("yeah", "nope": :func:`is_bare_answer`), or that
    #: rests on one word of the ask's among other words ("i want them one", "and yeah":
    #: ``TurnEndpointer``'s *rests_on_one_word*), ends after
    #: this, not complete_silence_ms: callers go on after it past a comma's pause ("yeah,
    #: actually, another question"), and the recogniser's first guess at it is the least sure
    #: ("nah" heard as "yeah"); chosen on the evaluation corpus's dev half (docs/latency.md)
    answer_silence_ms: int = 500
    #: ... the same at a yes/no question ("Do you want to end the call?", a yes_no slot), where
    #: a yes or a no alone is most often the whole answer
    yes_no_answer_silence_ms: int = 250
    #: a prosody reading counts for the turn's end only if its voice ended this close to it
    prosody_match_ms: int = 40
    #: finished words (or a request by meaning) that are all the recogniser's final results,
    #: heard with confidence confident_min_confidence or more: confident_silence_ms. A final
    #: comes when the recogniser has heard its stop_history of silence (300 ms) and worked, so
    #: less than ~350 gains nothing; 400 stays past the corpus's 400 ms pauses (values chosen on
    #: the evaluation corpus's dev half: docs/latency.md, "Heard with confidence")
    confident_silence_ms: int = 400
    confident_min_confidence: float = 0.6
    #: finished words (or a request by meaning) that the recogniser wrote as a whole sentence
    #: (ending with "." or "?": :func:`ends_sentence`): sentence_end_silence_ms. Longer than the
    #: gaps inside a sentence (up to ~240 ms); chosen on the evaluation corpus's dev half
    #: (docs/latency.md, "Written as a whole sentence")
    sentence_end_silence_ms: int = 250

    @property
    def uses_sentence_marks(self) -> bool:
        """Does a sentence mark shorten any silence (else the recogniser need not punctuate)?"""
        return self.sentence_end_silence_ms < max(self.finished_silence_ms, self.meaning_silence_ms)

    @property
    def uses_prosody(self) -> bool:
        """Does a falling voice shorten any silence (else the voice's pitch need not be measured)?"""
        return (self.falling_finished_silence_ms < self.finished_silence_ms
                or self.falling_silence_ms < self.incomplete_silence_ms)


@dataclass(frozen=True)
class EndOfTurn:
    text: str
    #: when the caller's last voiced audio ended (seconds)
    speech_end_at: float
    #: when the decision was made (``speech_end_at`` + the silence waited)
    decided_at: float
    reason: str  # "complete", "answer", "one_word", "meaning", "confident", "sentence", "finished", "short", "falling", "incomplete", "continuation"
    #: from the turn's first voice to its last (seconds)
    speech_s: float = 0.0
    #: the recogniser's confidence in the words, when they are all its final results (else None)
    confidence: float | None = None
    #: the recogniser's other readings of the words, likeliest first (often none)
    alternatives: tuple[str, ...] = ()

    @property
    def silence_s(self) -> float:
        return self.decided_at - self.speech_end_at

    def as_record(self) -> dict[str, object]:
        """Why and when the turn was taken to be over, for the call record (ms)."""
        return {"reason": self.reason, "silence_ms": round(self.silence_s * 1000.0, 1),
                "speech_ms": round(self.speech_s * 1000.0, 1)}

    @property
    def speech_started_at(self) -> float:
        """When the turn's first voice began."""
        return self.speech_end_at - self.speech_s


@dataclass(frozen=True)
class TurnEndSignals:
    """What the end of the turn is decided on, for the words so far."""

    words: Completeness
    #: the current ask has a sure intent for the words
    request: bool
    #: how the voice ended (:data:`agent.call.prosody.FALL`, ...; "none" when unknown)
    prosody: str


def _elapsed_ms(since: float, now: float) -> float:
    """Milliseconds from *since* to *now* (seconds): time stamps meet the configured ``*_ms`` here.

    Rounded to the microsecond so that the float noise of second stamps (1.91 - 1.85) never
    puts a silence a hair under the threshold it has reached."""
    return round((now - since) * 1000.0, 6)


class LatestText(Generic[T]):
    """*answer* for the latest text only: the words so far are asked about on every poll, and
    change with each interim (and *answer* may cost a sentence encoding). *empty* for no words."""

    def __init__(self, answer: Callable[[str], T], empty: T) -> None:
        self._answer = answer
        self._empty = empty
        self.clear()

    def clear(self) -> None:
        self._text = ""
        self._value = self._empty

    def __call__(self, text: str) -> T:
        if text and text != self._text:
            self._text, self._value = text, self._answer(text)
        return self._value if text else self._empty


class TurnEndpointer:
    """One caller turn at a time: speech start/end, transcripts in; :class:`EndOfTurn` out.

    Time stamps are seconds on the caller's clock; the silences it waits are the configured ``*_ms``."""

    def __init__(self, is_complete: Callable[[str], bool], config: EndpointerConfig | None = None,
                 last_voiced_at: Callable[[], float] | None = None,
                 prosody: Callable[[], ProsodyReading | None] | None = None,
                 is_meant: Callable[[str], bool] | None = None,
                 rests_on_one_word: Callable[[str], bool] | None = None,
                 at_yes_no: Callable[[], bool] | None = None) -> None:
        """*is_complete*: do the words make a request of the current ask (a speed-up only).
        *at_yes_no*: is the dialogue listening for the answer to a yes/no question (a bare yes
        or no then waits ``yes_no_answer_silence_ms`` instead of ``answer_silence_ms``).
        *rests_on_one_word*: does that request rest on one word of the ask's among others (it
        then waits ``answer_silence_ms``, as a bare yes or no does).
        *is_meant*: do they make one by meaning (asked only while the caller is quiet: it costs
        a sentence encoding).
        *last_voiced_at*, when given, says when the caller's latest voiced frame ended: silence
        is counted from it, so a voice that comes back after the VAD reported the end (the last
        sound of "balance" after a dip) is not talked over before the VAD reports it again.
        *prosody*, when given, reads how the latest voiced run ended."""
        self.config = config or EndpointerConfig()
        self._words_of = LatestText(completeness, Completeness.UNDECIDED)
        self._complete = LatestText(lambda text: bool(is_complete(text)), False)
        self._bare_answer = LatestText(is_bare_answer, False)
        self._one_word = LatestText(lambda text: bool(rests_on_one_word is not None and rests_on_one_word(text)), False)
        self._meant = LatestText(lambda text: bool(is_meant is not None and is_meant(text)), False)
        self._closed_by_tag = LatestText(ends_with_closing_tag, False)
        self._last_voiced_at = last_voiced_at
        self._prosody = prosody
        self._at_yes_no = at_yes_no
        self.reset()

    def reset(self) -> None:
        """Forget the current turn (after a decision, or when the agent stops listening)."""
        self.text = ""
        self.confidence: float | None = None
        #: the recogniser wrote the latest words as a whole sentence (:func:`ends_sentence`)
        self.sentence_end = False
        self._speech_start: float | None = None
        self._speech_end: float | None = None  # None while the caller is speaking
        self._speaking = False
        for answer in (self._words_of, self._complete, self._bare_answer, self._one_word, self._meant,
                       self._closed_by_tag):
            answer.clear()  # the next turn may be at another ask

    @property
    def in_turn(self) -> bool:
        return self._speech_start is not None

    @property
    def speaking(self) -> bool:
        return self._speaking

    def on_speech_start(self, at: float) -> None:
        if self._speech_start is None:
            self._speech_start = at
        self._speaking = True
        self._speech_end = None

    def on_speech_end(self, last_voiced_at: float, now: float) -> EndOfTurn | None:
        """The caller went quiet after *last_voiced_at*; *now* is when that was noticed."""
        if self._speech_start is None:
            return None
        self._speaking = False
        self._speech_end = last_voiced_at
        return self.poll(now)

    def on_transcript(self, text: str, now: float, confidence: float | None = None,
                      sentence_end: bool = False) -> EndOfTurn | None:
        """An interim or final transcript of the turn so far; *confidence*: the recogniser's,
        when *text* is made of final results only; *sentence_end*: the recogniser wrote its
        latest result as a whole sentence."""
        text = text.strip()
        if text:
            self.text = text
            self.confidence = confidence
            self.sentence_end = sentence_end
            if self._speech_start is None:
                # The recogniser heard speech the VAD missed: treat it as a turn.
                self._speech_start = now
                self._speech_end = now
        return self.poll(now)

    def signals(self, text: str | None = None) -> TurnEndSignals:
        """The words' completeness, the ask's intent, and the voice's end, for *text* (default:
        the text so far)."""
        text = self.text if text is None else text
        words = self.words(text)
        request = (bool(text) and words is not Completeness.UNFINISHED and not self._closed_by_tag(text)
                   and self._complete(text))
        return TurnEndSignals(words, request, self._prosody_cue())

    def likely_end(self, text: str | None = None) -> bool:
        """Would *text* (default: the words so far) end the turn after the short silence?"""
        text = self.text if text is None else text
        signals = self.signals(text)
        return bool(text) and (signals.request or signals.words is Completeness.COMPLETE)

    def required_silence_ms(self) -> int:
        """Silence that would end the turn given what has been said so far."""
        return self._required()[0]

    def _required(self) -> tuple[int, str]:
        c = self.config
        if not self.text:
            return c.incomplete_silence_ms, "incomplete"
        signals = self.signals()
        if signals.words is Completeness.UNFINISHED:
            return c.continuation_silence_ms, "continuation"
        # Asked only when it can shorten the wait: the caller is quiet, no sure request, and the
        # words are not already finished or the meaning's silence is the shorter.
        meant = (not signals.request and not self._speaking
                 and (signals.words is not Completeness.COMPLETE or c.meaning_silence_ms < c.finished_silence_ms)
                 and self._meant(self.text))
        if signals.request or meant or signals.words is Completeness.COMPLETE:
            speech_ms = self._speech_ms()
            if speech_ms < c.min_speech_ms:
                return c.incomplete_silence_ms, "incomplete"
            if speech_ms < c.short_turn_ms:
                return c.short_turn_silence_ms, "short"
            if signals.request:
                answer_ms = (c.yes_no_answer_silence_ms if self._at_yes_no is not None and self._at_yes_no()
                             else c.answer_silence_ms)
                if self._bare_answer(self.text):
                    return max(c.complete_silence_ms, answer_ms), "answer"
                if self._one_word(self.text):
                    return max(c.complete_silence_ms, answer_ms), "one_word"
                return c.complete_silence_ms, "complete"
            # The shortest of the silences that apply; the finished sentence's on a tie.
            silences = [(c.falling_finished_silence_ms if signals.prosody == FALL else c.finished_silence_ms,
                         "finished")]
            if meant:
                silences.append((c.meaning_silence_ms, "meaning"))
            digits = ends_in_digits(self.text)  # a number said in groups: a group's end is not the turn's
            if self.confidence is not None and self.confidence >= c.confident_min_confidence and not digits:
                silences.append((c.confident_silence_ms, "confident"))
            if self.sentence_end and not digits:
                silences.append((c.sentence_end_silence_ms, "sentence"))
            return min(silences, key=lambda s: s[0])
        if signals.prosody == FALL:
            return c.falling_silence_ms, "falling"
        return c.incomplete_silence_ms, "incomplete"

    def poll(self, now: float) -> EndOfTurn | None:
        """Check the silence so far; call whenever time has passed."""
        if self._speech_start is None or self._speaking or self._speech_end is None:
            return None
        if self._last_voiced_at is not None:
            self._speech_end = max(self._speech_end, self._last_voiced_at())
        silence_ms = _elapsed_ms(self._speech_end, now)
        need, reason = self._required()
        if silence_ms < need:
            return None
        decision = EndOfTurn(self.text, self._speech_end, now, reason, self._speech_ms() / 1000.0,
                             self.confidence)
        self.reset()
        return decision

    def next_deadline(self) -> float | None:
        """When :meth:`poll` could next decide, if nothing else happens (seconds)."""
        if self._speech_start is None or self._speaking or self._speech_end is None:
            return None
        return self._speech_end + self.required_silence_ms() / 1000.0

    def _speech_ms(self) -> float:
        if self._speech_start is None:
            return 0.0
        end = self._speech_end if self._speech_end is not None else self._speech_start
        return max(0.0, _elapsed_ms(self._speech_start, end))

    def _prosody_cue(self) -> str:
        reading = self._prosody() if self._prosody is not None else None
        if reading is None or self._speech_end is None:
            return "none"
        if abs(_elapsed_ms(reading.ended_at, self._speech_end)) > self.config.prosody_match_ms:
            return "none"  # a reading of an earlier run, or the voice came back since
        return reading.cue

    def words(self, text: str) -> Completeness:
        """How finished *text* is (cached for the latest text)."""
        return self._words_of(text)


#: what :meth:`TranscriptAssembler.snapshot` returns: finals, interim, consumed words, whether a
#: turn took them, when a barge-in set them aside
TranscriptState = tuple[tuple[str, ...], str, tuple[str, ...], bool, "float | None"]


class TranscriptAssembler:
    """The text of the caller's current turn, from a recogniser's streaming results.

    A streaming recogniser splits speech into utterances at its own silence
    threshold; its interim results repeat the utterance so far and its final
    closes it. A turn may span several utterances (the caller paused), and the
    agent may end a turn in the middle of one (a complete request followed by a
    short silence). This keeps the finals of the turn, the current interim,
    and the words already consumed mid-utterance -- by a turn decision
    (:meth:`consume`) or by a barge-in the prompt went on over (:meth:`set_aside`)
    -- so they are not counted again when the utterance's later results repeat them.
    """

    def __init__(self) -> None:
        self._finals: list[str] = []
        self._interim = ""
        self._consumed: list[str] = []
        #: a turn decision took the consumed words (words the final adds are the caller going on)
        self._taken = False
        #: when a barge-in set the open utterance's words aside (None: it did not)
        self._aside_at: float | None = None
        #: the recogniser's confidence in each of the turn's finals (None: not given)
        self._confidences: list[float | None] = []
        #: the recogniser's other readings of the next result to come (:meth:`on_alternatives`)
        self._next_readings: tuple[str, ...] = ()
        #: ... of the open utterance's interim, and of the turn's last final
        self._interim_readings: tuple[str, ...] = ()
        self._final_readings: tuple[str, ...] = ()
        #: the recogniser wrote the open utterance's interim / the turn's last final as a whole
        #: sentence (:func:`ends_sentence`)
        self._interim_ends_sentence = self._final_ends_sentence = False

    @property
    def text(self) -> str:
        """The turn's words; a comma where the recogniser wrote one, or wrote a sentence's end
        before more words (a final written as a whole sentence, then another)."""
        return " ".join(x for x in [*self._finals, self._interim] if x).rstrip(",")

    @property
    def confidence(self) -> float | None:
        """The recogniser's confidence in the turn's words: the least of its finals', when the
        text is made of finals only (None while an interim is part of it, or if not given)."""
        if self._interim or not self._finals or any(c is None for c in self._confidences):
            return None
        return min(c for c in self._confidences if c is not None)

    @property
    def alternatives(self) -> tuple[str, ...]:
        """Other readings of the turn's words (:attr:`text`): the recogniser's other readings of
        its latest result (the interim, else the last final), each after the turn's earlier
        finals and without the words a turn decision already took."""
        if self._interim:
            before, readings = self._finals, self._interim_readings
        elif self._finals:
            before, readings = self._finals[:-1], self._final_readings
        else:
            return ()
        out = []
        for reading in readings:
            rest = self._strip(words(reading))
            text = " ".join(x for x in [*before, " ".join(rest)] if x)
            if rest and text != self.text and text not in out:
                out.append(text)
        return tuple(out)

    @property
    def sentence_end(self) -> bool:
        """Did the recogniser write its latest result of the turn's words (the interim, else the
        last final) as a whole sentence?"""
        if self._interim:
            return self._interim_ends_sentence
        return bool(self._finals) and self._final_ends_sentence

    def on_alternatives(self, readings: tuple[str, ...]) -> None:
        """The recogniser's other readings of the result that comes next (interim or final)."""
        self._next_readings = tuple(readings)

    @property
    def awaiting_final(self) -> bool:
        """Are some of the words still the open utterance's interim (also when a turn has taken
        them), with no final for them yet?"""
        return bool(self._interim or self._consumed)

    def on_interim(self, text: str) -> str:
        self._interim = " ".join(self._strip(punctuated_words(text)))
        self._interim_readings, self._next_readings = self._next_readings, ()
        self._interim_ends_sentence = ends_sentence(text)
        return self.text

    def on_final(self, text: str, last_voice_at: float | None = None,
                 confidence: float | None = None) -> tuple[str, list[str]]:
        """Close the recogniser's utterance; returns (turn text, words beyond those a turn
        decision took: the caller went on talking after the turn was taken).

        The final of an utterance set aside by a barge-in, with no voice since (*last_voice_at*,
        on the clock :meth:`set_aside` was given), only revises the set-aside words ("you" of
        "yeah" ending as "you have"): it is dropped with the turn's words, which would otherwise
        start the next voice's."""
        rest = self._strip(punctuated_words(text))
        readings, self._next_readings = self._next_readings, ()
        extra = rest if self._taken else []
        revision = self._aside_at is not None and last_voice_at is not None and last_voice_at <= self._aside_at
        self._interim, self._consumed, self._taken, self._aside_at = "", [], False, None
        self._interim_readings = ()
        if revision:
            self._finals, self._confidences = [], []
        elif rest:
            self._final_ends_sentence = ends_sentence(text)
            self._finals.append(" ".join(rest) + ("," if self._final_ends_sentence else ""))
            self._confidences.append(confidence)
            self._final_readings = readings
        return self.text, extra

    def consume(self) -> str:
        """A decision used the text so far: start a new turn, remembering the open utterance's words."""
        text = self.text
        self._move_interim()
        self._taken, self._aside_at = bool(self._consumed), None
        return text

    def set_aside(self, at: float) -> None:
        """A barge-in let the prompt go on over the voice that said the text so far (at *at*):
        its words are no turn's, and neither is the rest of the open utterance unless a voice
        comes back (see :meth:`on_final`)."""
        self._move_interim()
        self._taken, self._aside_at = False, at

    def snapshot(self) -> TranscriptState:
        """The state, to :meth:`restore` (undoing a :meth:`consume` or :meth:`set_aside` that
        proved premature)."""
        return tuple(self._finals), self._interim, tuple(self._consumed), self._taken, self._aside_at

    def restore(self, state: TranscriptState) -> None:
        finals, self._interim, consumed, self._taken, self._aside_at = state
        self._finals, self._consumed = list(finals), list(consumed)
        self._interim_readings = self._final_readings = ()  # not kept in a snapshot either
        self._confidences = [None] * len(self._finals)  # not kept in a snapshot: unknown again
        self._interim_ends_sentence = self._final_ends_sentence = False  # unknown: no sooner end

    def reset(self) -> None:
        """Forget the turn's words (not that the recogniser's open utterance was set aside: its
        final may still come)."""
        self._finals, self._interim, self._consumed, self._taken = [], "", [], False
        self._confidences = []
        self._interim_readings = self._final_readings = ()
        self._interim_ends_sentence = self._final_ends_sentence = False

    def _move_interim(self) -> None:
        self._consumed = self._consumed + words(self._interim)
        self._finals, self._confidences = [], []
        self._interim = ""
        self._interim_readings = self._final_readings = ()

    def _strip(self, ws: list[str]) -> list[str]:
        n = len(self._consumed)
        if n and [w.rstrip(",") for w in ws[:n]] == self._consumed:
            return ws[n:]
        if n:
            # The recogniser revised the consumed words; drop as many leading words.
            return ws[n:]
        return ws
