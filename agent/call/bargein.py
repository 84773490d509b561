"""Barge-in: is the caller's voice over a prompt an interruption or an acknowledgement?

A caller talking over the agent does one of two things: takes the turn ("wait",
"what are my opening hours") or acknowledges and lets the agent go on ("uh-huh",
"okay", "mm-hmm"). The first must stop the prompt within about 100 ms; the
second must not stop it at all. The first 100 ms of a voice cannot tell the two
apart, so the media thread pauses the prompt at the voice's onset and a
:class:`BargeIn` then decides, from how long the voice goes on and what the
recogniser hears in it, whether the pause becomes an interruption or the prompt
plays on:

* an interrupting word ("wait", "stop", "hold on", "excuse me") takes the turn
  at once;
* a request the current question understands, or a word that asks for
  something ("agent", "operator", "help", "no"), takes it once the voice has
  lasted longer than an acknowledgement does (``acknowledgement_max_ms``):
  recognisers turn acknowledgements into short random words, and a short
  "mm-hmm" heard as "an agent" must not transfer the call;
* so does a voice that goes on for ``interruption_min_ms``, whatever the words;
* so does a request the current question understands by meaning only ("good night", "is
  there a person I could talk to"), once the voice is over and its final words are heard with
  confidence, from a voice longer than a quick acknowledgement (``meaning_min_ms``);
* and a voice that said something: once it is over, final words of a few words besides
  acknowledgements and hesitations ("I'm out, thanks", "I would like to"), heard with
  confidence, from a voice longer than most acknowledgements (``sentence_min_ms``). Resuming
  the prompt over them would lose the caller's words;
* words that are an acknowledgement ("uh-huh", "okay", "yeah", a held "oh" or "mm"; not
  a bare "um" or "uh", which as often begins a question) let the prompt
  play on at once, ducked, while the caller is still saying them (``TALK_OVER``);
  the voice is still watched and can still turn into an interruption;
* a voice that ends with none of that resumes the prompt where it paused.
  It has ended after ``resume_after_ms`` of quiet when it had an
  acknowledgement's words, after ``word_gap_ms`` when it had others (the stop
  before a consonant), after ``no_words_gap_ms`` when it had none yet, after
  ``pause_ms`` when they were a request (people pause inside a sentence), after
  ``unfinished_gap_ms`` when they were left unfinished or only hesitations ("can i",
  "uh,": the caller keeps the floor, the prompt ducked, through a pause); a
  voice longer than ``wait_final_after_ms`` first waits for
  the recogniser's final words. If the voice comes back within ``rejoin_ms`` of
  the prompt resuming, the session revives the same barge-in
  (:meth:`BargeIn.revive`), so an interruption with a pause in it is judged whole.
  A voice that ended on the start of an acknowledgement ("oh", "mm": the recogniser's
  first word for "okay" and "mm-hmm") and comes back that soon is the rest of it
  ("o | kay", after the stop before the "k"): the prompt plays on over it, watched like
  an acknowledgement being said (:attr:`BargeIn.resumed_on_onset`).

A voice that starts within ``tail_ms`` of the caller's last words, just after
the agent took the turn, is not a reaction to the reply: it is the caller
finishing their own turn ("check my balance | please", after the stop before
the "p"). The reply is not paused for it; the barge-in starts out talking over
it and still stops the reply if its words interrupt or it goes on longer than
an acknowledgement.

The class is pure: it is fed timestamps and words and answers with a
:class:`Decision`; the session owns the timers and the playout.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.call.completeness import Completeness, completeness
from agent.call.endpointer import (BACKCHANNELS, HESITATIONS, LatestText, is_acknowledgement, is_backchannel,
                                   phrase_pattern, words, words_besides)

#: words people use to stop someone talking: they take the turn however short the voice
STOP_WORDS = frozenset("wait stop hold excuse pardon sorry".split())
#: a bare "oh" is how the recogniser first hears "okay" (for ~300 ms of it), a bare "mm" how it
#: first hears "mm-hmm"; each is an acknowledgement in itself (unlike "um" or "uh"): held as long
#: as one must be, it lets the prompt play on like one (an "oh, what time ..." still takes the
#: turn as a request, once longer than an acknowledgement)
ACKNOWLEDGEMENT_ONSETS = frozenset({"oh", "mm"})
#: what else callers say to acknowledge over a prompt: such words besides acknowledgements and
#: hesitations make no sentence (``BargeInConfig.sentence_min_words``)
ACKNOWLEDGING = frozenset({
    "got it", "gotcha", "sounds good", "makes sense", "i understand", "understood", "of course", "great",
    "perfect", "cool", "good", "fine", "nice", "thanks", "thank you", "then", "i know", "exactly", "wow",
    "true", "really", "indeed", "absolutely", "definitely", "sure thing", "no problem", "go on", "go ahead",
    "i get it"})
#: what makes no sentence: acknowledgements, hesitations and acknowledging words
_NO_SENTENCE = phrase_pattern(BACKCHANNELS | ACKNOWLEDGING)
#: words that ask for something: they take the turn like a request does
ASKING_WORDS = frozenset("hello help question repeat again actually no agent operator representative".split())


def _is_hesitation(heard: list[str]) -> bool:
    """Are the words heard only hesitations ("uh", "um"; not "oh" or "mm", the start of an
    acknowledgement)? A caller who says "uh, can I ..." over a prompt pauses after it."""
    return bool(heard) and all(w in HESITATIONS and w not in ACKNOWLEDGEMENT_ONSETS for w in heard)


def _is_onset(heard: list[str]) -> bool:
    """Are the words heard the start of an acknowledgement (a bare "oh" or "mm")?"""
    return " ".join(heard) in ACKNOWLEDGEMENT_ONSETS


@dataclass(frozen=True)
class BargeInConfig:
    #: a voice this long takes the turn whatever its words
    interruption_min_ms: int = 1200
    #: a request heard in a voice no longer than this is taken for a misheard acknowledgement
    acknowledgement_max_ms: int = 700
    #: a voice at least this long waits for the recogniser's final words before the prompt resumes
    wait_final_after_ms: int = 500
    #: how long the final words are waited for after the voice ended: they come ~300 ms after it
    #: (Whisper's run), later on a loaded machine (a test call's "check my balance", heard as
    #: "check my that" until its final came more than 600 ms after the voice, was lost); the
    #: prompt plays on ducked meanwhile
    final_wait_ms: int = 1200
    #: quiet after a voice with an acknowledgement's words before it counts as over
    resume_after_ms: int = 40
    #: an acknowledgement lets the prompt play on once the recogniser has held it this long
    #: (a first guess at "check" can be "yeah" for a moment)
    ack_stable_ms: int = 60
    #: quiet after a voice with other words before it counts as over: a caller pauses inside
    #: a sentence ("what are your ... opening hours") for longer than between the syllables
    #: of an acknowledgement
    pause_ms: int = 300
    #: ... after a voice with words that are neither an acknowledgement nor a request
    word_gap_ms: int = 100
    #: ... after words left unfinished ("can i", "connect me to the", "i would like to"): the
    #: caller is pausing inside a sentence, and keeps the floor (the prompt, ducked, does not
    #: come back over them); longer than the pauses callers make there (up to 700 ms)
    unfinished_gap_ms: int = 800
    #: ... for a voice at least this long: noise bursts and coughs (up to ~200 ms) the recogniser
    #: turns into "uh" or "the" are over when they stop
    unfinished_min_ms: int = 250
    #: ... after a voice with no words yet: it may be the first sound of a word ("w" of "what")
    #: before a silent stretch, and resuming the prompt in between makes it stutter
    no_words_gap_ms: int = 200
    #: a voice that comes back this soon after the prompt resumed continues the same barge-in
    rejoin_ms: int = 400
    #: after a voice of one word or none, or of hesitations only ("okay", "oh", "ah oh", a noise),
    #: that did not interrupt, the prompt plays on ducked this long before it is back at its own
    #: level: as often as not the caller is drawing breath to go on ("um, | could you ..."), and
    #: must not be met by the prompt at its level (0: back at once)
    word_duck_ms: int = 600
    #: a voice still being judged this long after it paused the prompt lets the prompt play on
    #: ducked (``media.playout.DUCK_DB``) until the verdict: a pause longer than this is a hole in
    #: the prompt a caller notices, while the recogniser's first words come ~300 ms into a voice
    duck_after_ms: int = 200
    #: a voice at least this long that is over, whose final words hold ``sentence_min_words``
    #: words besides acknowledgements and hesitations (:data:`ACKNOWLEDGING` included) and were
    #: heard with at least ``sentence_min_confidence``, said something and takes the turn (no
    #: shorter than ``wait_final_after_ms``: final words are waited for only after a voice that
    #: long). Chosen with ops/bench/barge-in on the dev half (docs/latency.md): acknowledgements
    #: the recogniser turns into words last up to ~900 ms and come out as several words at low
    #: confidence ("mm hmm" as "and then make them", 0.24) or as few at high ("got it" as "that
    #: is", 0.87, in 320 ms)
    sentence_min_ms: int = 700
    sentence_min_words: int = field(default=2, metadata={"positive": True})
    sentence_min_confidence: float = 0.4
    #: a voice at least this long that is over, whose final words (heard with at least
    #: ``sentence_min_confidence``) make a request of the current question by meaning, takes the
    #: turn: a short goodbye or answer ("so long", "good night") over a prompt is not lost. Its
    #: final words are waited for (``final_wait_ms``) when it has any words besides an
    #: acknowledgement's
    meaning_min_ms: int = 300
    #: a voice that starts this soon after the caller's last words, once the agent has taken the
    #: turn, is the caller finishing it ("check my balance | please"): too soon to be a reaction
    #: to the reply (whose first sound reaches the caller some 100 ms after those words; people
    #: take 200 ms or more to answer what they hear). The reply plays on over it while its words
    #: are watched like an acknowledgement's, instead of stopping in its first syllable
    tail_ms: int = 250


class Verdict(enum.Enum):
    WAIT = "wait"              # undecided: the prompt stays as it is; check again after check_in_s
    PAUSE = "pause"            # played on over what seemed an acknowledgement, which has become more: pause again
    INTERRUPT = "interrupt"    # the caller takes the turn: flush the prompt and listen
    TALK_OVER = "talk_over"    # an acknowledgement still being said: play the prompt on, keep watching
    RESUME = "resume"          # the voice is over and did not interrupt: play the prompt on; done


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    why: str = ""
    #: for WAIT and TALK_OVER: when to decide again at the latest (seconds from now)
    check_in_s: float | None = None


class BargeIn:
    """One caller voice over an interruptible prompt, from its onset (the prompt paused) to a verdict.

    *is_request* says whether words make a request of the current question.
    Times are seconds on the call's one clock (the reactor's ``seconds()``).
    """

    def __init__(self, started_at: float, is_request: Callable[[str], bool],
                 config: BargeInConfig | None = None, tail: bool = False,
                 is_meant: Callable[[str], bool] | None = None) -> None:
        """*tail*: the voice is the caller finishing the turn the agent has just answered (see
        ``BargeInConfig.tail_ms``); the reply was not paused for it and plays on over it unless
        its words interrupt or it goes on longer than an acknowledgement. *is_meant* says
        whether words make a request of the current question by meaning (None: not asked)."""
        self.started_at = started_at
        self.config = config or BargeInConfig()
        self._is_request = is_request
        #: asked once per text: a match by meaning costs a sentence encoding (~10 ms)
        self._meant = LatestText(lambda text: bool(is_meant(text)), False) if is_meant is not None else None
        self.text = ""
        self._text_since = started_at
        self.final = False
        #: the recogniser's confidence in the final words (None: not final, or not given)
        self.confidence: float | None = None
        self.tail = tail
        #: the prompt plays (again) over an acknowledgement that is still being said
        self.talking_over = tail
        self.done = False
        #: when the verdict let the prompt resume (RESUME)
        self.resumed_at: float | None = None
        #: the voice ended on the start of an acknowledgement ("oh", "mm"): if it comes back within
        #: rejoin_ms, that is the rest of the acknowledgement, and the prompt plays on over it
        self.resumed_on_onset = False

    def rejoins(self, onset_at: float) -> bool:
        """Does a voice starting at *onset_at* continue this barge-in (back within rejoin_ms
        of the prompt resuming)?"""
        return self.resumed_at is not None and onset_at - self.resumed_at <= self.config.rejoin_ms / 1000.0

    def revive(self) -> None:
        """The voice came back soon after this barge-in let the prompt resume: decide again,
        counting from the first onset, on the words given from now on (the session gives the
        whole voice's words again; an acknowledgement among them must hold anew: "sure" before
        the stop may have been the start of "check my balance"). After the start of an
        acknowledgement (:attr:`resumed_on_onset`) the prompt plays on over the rest of it."""
        self.done = False
        self.resumed_at = None
        self.tail = False
        self.talking_over = self.resumed_on_onset
        self.resumed_on_onset = False
        self.text = ""
        self.final = False
        self.confidence = None

    def on_voice_again(self) -> None:
        """The voice went on after the prompt was let play over it (the prompt is paused again):
        the acknowledgement is turning into something longer."""
        self.talking_over = False

    def on_words(self, text: str, final: bool = False, at: float | None = None,
                 confidence: float | None = None) -> None:
        """The recogniser's words for this voice so far (interim or final), heard at *at*; for
        final words, the recogniser's *confidence* in them if it gives one."""
        if text != self.text:
            self.text = text
            self._text_since = at if at is not None else self.started_at
        self.final = self.final or final
        if final:
            self.confidence = confidence

    def spoke_ms(self, last_voiced_at: float) -> float:
        return max(0.0, last_voiced_at - self.started_at) * 1000.0

    def decide(self, now: float, last_voiced_at: float, speaking: bool) -> Decision:
        """The verdict at *now*, given the time of the caller's last voiced frame and
        whether the VAD has the caller speaking."""
        if self.done:
            raise RuntimeError("this barge-in has already been decided")
        c = self.config
        spoke_ms = self.spoke_ms(last_voiced_at)
        quiet_ms = max(0.0, now - last_voiced_at) * 1000.0
        heard = words(self.text)
        acknowledging = not heard or is_backchannel(self.text)
        if any(w in STOP_WORDS for w in heard):
            return self._final(Verdict.INTERRUPT, "interrupting word")
        asking = not acknowledging and (
            self._is_request(self.text) or any(w in ASKING_WORDS for w in heard))
        over_after_ms = self._over_after_ms(heard, acknowledging, asking, spoke_ms)
        still = speaking or quiet_ms < over_after_ms
        if asking and spoke_ms > c.acknowledgement_max_ms:
            return self._final(Verdict.INTERRUPT, "request")
        if not speaking and self._said_something(spoke_ms):
            return self._final(Verdict.INTERRUPT, "words")
        if not speaking and not acknowledging and self._meant_request(spoke_ms):
            return self._final(Verdict.INTERRUPT, "request by meaning")
        if still:
            if spoke_ms >= c.interruption_min_ms:
                return self._final(Verdict.INTERRUPT, "long enough")
            acknowledgement = is_acknowledgement(self.text) or _is_onset(heard)
            if self.talking_over and not acknowledgement and spoke_ms > c.acknowledgement_max_ms:
                # Longer than an acknowledgement, and other words: maybe an interruption after all.
                self.talking_over = False
                return Decision(Verdict.PAUSE, "longer than an acknowledgement",
                                check_in_s=max(0.02, (c.interruption_min_ms - spoke_ms) / 1000.0))
            if acknowledgement and not self.talking_over:
                held_ms = (now - self._text_since) * 1000.0
                if held_ms < c.ack_stable_ms:
                    return self._wait((c.ack_stable_ms - held_ms) / 1000.0 + 0.001)
                self.talking_over = True
                return Decision(Verdict.TALK_OVER, "acknowledgement",
                                check_in_s=max(0.02, (c.interruption_min_ms - spoke_ms) / 1000.0))
            if not speaking:  # a pause: decide when it has lasted long enough to be the end
                return self._wait(max(0.02, (over_after_ms - quiet_ms) / 1000.0))
            if asking:
                # A request, unless the voice stops before an acknowledgement would.
                return self._wait((c.acknowledgement_max_ms - spoke_ms) / 1000.0 + 0.01)
            return self._wait(max(0.02, (c.interruption_min_ms - spoke_ms) / 1000.0))
        waits_final = spoke_ms >= c.wait_final_after_ms or (
            self._meant is not None and not acknowledging and spoke_ms >= c.meaning_min_ms)
        if waits_final and not self.final and not asking and quiet_ms < c.final_wait_ms:
            # Longer than most acknowledgements, or words that may be a short request: let the
            # recogniser's final words say what it was.
            return self._wait(0.05)
        self.resumed_at = now
        self.resumed_on_onset = _is_onset(heard)
        return self._final(Verdict.RESUME, "acknowledgement" if heard else "no words")

    def _over_after_ms(self, heard: list[str], acknowledging: bool, asking: bool, spoke_ms: float) -> float:
        """How much quiet ends the voice, by what its words are so far."""
        c = self.config
        if asking:
            return c.pause_ms
        if not heard:
            return c.no_words_gap_ms
        # Only a voice as long as a word can be the start of a sentence: a noise burst or a
        # cough the recogniser turns into "uh" or "the" is over when it stops.
        if spoke_ms >= c.unfinished_min_ms and (
                _is_hesitation(heard)
                or not acknowledging and completeness(self.text) is Completeness.UNFINISHED):
            return c.unfinished_gap_ms
        return c.resume_after_ms if acknowledging else c.word_gap_ms

    def _said_something(self, spoke_ms: float) -> bool:
        """Final words of a sentence (or of its start), heard with confidence, from a voice longer
        than most acknowledgements."""
        c = self.config
        return (self.final and spoke_ms >= c.sentence_min_ms and self.confidence is not None
                and self.confidence >= c.sentence_min_confidence
                and len(words_besides(self.text, _NO_SENTENCE)) >= c.sentence_min_words)

    def _meant_request(self, spoke_ms: float) -> bool:
        """Final words heard with confidence that make a request by meaning, from a voice longer
        than a quick acknowledgement."""
        c = self.config
        if not (self._meant is not None and self.final and spoke_ms >= c.meaning_min_ms
                and self.confidence is not None and self.confidence >= c.sentence_min_confidence):
            return False
        # Acknowledging words alone ("okay great") may be a goodbye by meaning, but over a prompt
        # they acknowledge it; words left unfinished ("all right and") are not yet a request.
        if not words_besides(self.text, _NO_SENTENCE) or completeness(self.text) is Completeness.UNFINISHED:
            return False
        return self._meant(self.text)

    def _wait(self, check_in_s: float) -> Decision:
        return Decision(Verdict.TALK_OVER if self.talking_over else Verdict.WAIT, check_in_s=check_in_s)

    def _final(self, verdict: Verdict, why: str) -> Decision:
        self.done = True
        return Decision(verdict, why)
