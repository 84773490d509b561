"""Calls of the evaluation corpus on the wire: the caller's schedule and its scoring by condition.

``ops/bench/turn-latency --corpus eval`` plays utterances of ``ops/bench/eval-corpus/<half>/``
(docs/evaluation.md) against the demo line. Everything here is pure:

* :func:`plan_eval_call` drafts one call's schedule. It walks the dialplan with the dialogue
  engine itself (fed each turn's intent as an exact example, an out-of-scope turn as an empty
  transcript), so every turn is chosen among the intents valid at the ask the call is at, the
  timing follows the prompts the line will say, and an out-of-scope turn is only placed where
  it gets a reprompt (not an offer of a person). Ending answers come last and are followed by
  a "yes" for the confirmation the line may ask.
* :func:`heard_turns` reads a call record's dialogue: each transcript and what the line
  decided about it; :func:`pair_heard` pairs them with the scheduled items by their words.
* :func:`summarise_conditions` gives every figure per condition: engine, phrasing kind,
  pause length.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from agent.dialplan.engine import Action, DialogueSession, Hangup, Listen, Say, Transfer
from agent.dialplan.model import AskStep, Dialplan
from agent.dialplan.slots import parse_yes_no
from media.latency import INTERRUPTION, OVER_SPEECH_KINDS, ItemOutcome, percentile

#: items over the greeting and menu prompt (ms after the answer), then the interruption
OVER_PROMPT_AT_MS = (3000, 6500, 8500, 13000)
INTERRUPTION_AT_MS = 15000
#: with the prompts' audio known (``prompt_audio``), the interruption's voice starts in the middle
#: of a run of voiced 20 ms frames of the opening prompts at least this long, with no quiet frame
#: in it: a voice that starts in the prompt's pause between two words or phrases meets a line that
#: is silent already, and the items over the prompt before it hold the prompt back by ~100 ms ...
INTERRUPT_MIN_STRETCH_MS = 250
INTERRUPT_INTO_STRETCH = 0.5
#: ... that ends this long before the prompts do (a stop that comes late is then still seen) ...
INTERRUPT_MIN_TALK_AFTER_MS = 500
#: ... and starts at least this long after the last item over the prompt
INTERRUPT_AFTER_ITEM_MS = 1500
#: the line's first audio comes this long after the ACK (wire, demo line)
LINE_AUDIO_AT_MS = 200
#: silence the line leaves between two prompts of one reply (flite kal16)
PROMPT_GAP_MS = 460
#: the scheduled gaps assume a reply starts within this long after the caller's turn
LATENCY_ALLOWANCE_MS = 1000
#: after the agent's reply should have ended, the caller waits this long before its next turn
QUIET_BEFORE_TURN_MS = 1200
#: an item over the reply is played this long after the caller's turn ended ...
OVER_REPLY_AFTER_MS = 2300
#: ... when the reply's first prompt lasts at least this long
OVER_REPLY_MIN_PROMPT_MS = 3500
#: phrasing kinds of the turns after the interruption, in turn
TURN_CYCLE = ("out-of-scope", "paused", "in-scope", "paused", "in-scope")
#: answers that end the call: played last
ENDING_INTENTS = ("goodbye", "nothing_else")
#: answers left out: a transfer ends the bench's call
LEFT_OUT_INTENTS = ("agent",)
#: pause length buckets of paused turns, ms (lower bound inclusive)
PAUSE_BUCKETS_MS = ((300, 400), (400, 550), (550, 701))
#: answers that lead to the same step at the demo line's anything_else
SAME_OUTCOME = frozenset({"goodbye", "nothing_else"})
#: a transcript pairs with an item whose words are at least this similar (difflib ratio)
MIN_SIMILARITY = 0.4


@dataclass(frozen=True)
class EvalFile:
    """One utterance of the evaluation corpus, as the bench plays and scores it.

    ``kind`` is the scoring kind (:func:`media.latency.score_items`): ``turn`` (in-scope and
    out-of-scope turns), ``paused_turn``, ``backchannel``, ``noise`` or, for the turn played
    over a prompt, ``interruption``. ``phrasing`` is the corpus's: ``in-scope``,
    ``out-of-scope``, ``paused``, ``backchannel``, ``noise``. ``pauses``: silent gaps on the
    20 ms packet grid, ``(silent_start_ms, silent_end_ms)``.
    """

    name: str
    path: str
    path_16k: str
    kind: str
    phrasing: str
    text: str
    intent: str | None
    engine: str
    voice: str
    rate: float
    duration_ms: int
    voiced_start_ms: int
    voiced_end_ms: int
    pauses: tuple[tuple[int, int], ...] = ()
    pause_ms: int = 0


@dataclass(frozen=True)
class EvalStep:
    """A scheduled item: when (ms after the ACK), what, and what the line should decide
    (``expect``: an intent, ``no_match``, ``yes``; None for items over a prompt)."""

    at_ms: int
    file: EvalFile
    expect: str | None = None
    ask: str | None = None


def load_eval_corpus(directory: str) -> list[EvalFile]:
    """The files of one half (``manifest.json`` of ``make-eval-corpus``); slot answers are left out."""
    path = os.path.join(directory, "manifest.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no evaluation corpus; run ops/bench/make-eval-corpus")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    out = []
    for e in manifest["files"]:
        kind = e["kind"]
        if kind == "slot":
            continue
        phrasing = {"turn": "in-scope", "paused_turn": "paused", "out_of_scope": "out-of-scope"}.get(kind, kind)
        voiced = e["voiced_ms"] or [[0, e["duration_ms"]]]
        pauses = tuple((int(math.ceil(p["start_ms"] / 20.0) * 20), int(p["end_ms"] // 20 * 20)) for p in e["pauses"])
        out.append(EvalFile(
            name=os.path.basename(e["file"]).rsplit(".", 1)[0], path=os.path.join(directory, e["file"]),
            path_16k=os.path.join(directory, e.get("file_16k", e["file"])),
            kind="turn" if kind == "out_of_scope" else kind, phrasing=phrasing, text=e["text"],
            intent=e.get("intent"), engine=e["engine"], voice=e["voice"], rate=float(e.get("rate", 1.0)),
            duration_ms=int(e["duration_ms"]), voiced_start_ms=int(voiced[0][0]), voiced_end_ms=int(voiced[-1][1]),
            pauses=pauses, pause_ms=int(max((p["ms"] for p in e["pauses"]), default=0))))
    return out


def intent_examples(dialplan: Dialplan, flow: str) -> dict[str, str]:
    """Each intent offered by an ask of *flow*: its first example (an answer the line is sure of)."""
    out: dict[str, str] = {}
    for step in dialplan.flow(flow).steps:
        if isinstance(step, AskStep):
            for intent in step.intents:
                if intent.examples:
                    out.setdefault(intent.name, intent.examples[0])
    return out


# --------------------------------------------------------------------------- schedule


class _Deck:
    """Draws files in a shuffled order, reshuffling when used up."""

    def __init__(self, files: Sequence[EvalFile], rng: random.Random) -> None:
        self.files, self.rng = list(files), rng
        self.left: list[EvalFile] = []

    def __bool__(self) -> bool:
        return bool(self.files)

    def draw(self, accept: Callable[[EvalFile], bool] = lambda f: True) -> EvalFile | None:
        for _ in range(2 * len(self.files)):
            if not self.left:
                self.left = self.files[:]
                self.rng.shuffle(self.left)
            f = self.left.pop()
            if accept(f):
                return f
        return None


def _reply_ms(actions: Sequence[Action], prompt_ms: Callable[[str, str], int]) -> tuple[int, int]:
    """How long the line talks for *actions*, and how long its first prompt lasts."""
    says = [prompt_ms(a.text, a.voice) for a in actions if isinstance(a, Say)]
    if not says:
        return 0, 0
    return sum(says) + PROMPT_GAP_MS * (len(says) - 1), says[0]


#: how the line says a prompt: its length as played (ms) and its voiced stretches in it
PromptAudio = Callable[[str, str], tuple[int, Sequence[tuple[int, int]]]]


def interruption_onset_ms(actions: Sequence[Action], prompt_audio: PromptAudio, not_before_ms: int) -> int | None:
    """Where an interruption's voice starts over the line's opening prompts (ms after the ACK):
    INTERRUPT_INTO_STRETCH into the last voiced stretch of at least INTERRUPT_MIN_STRETCH_MS that
    starts after *not_before_ms* and ends INTERRUPT_MIN_TALK_AFTER_MS or more before the prompts
    do; None if there is none. The prompts are laid back to back from LINE_AUDIO_AT_MS, as the
    line plays them (trimmed, one after the other)."""
    at, spans = LINE_AUDIO_AT_MS, []
    for a in actions:
        if not isinstance(a, Say):
            continue
        length, stretches = prompt_audio(a.text, a.voice)
        spans += [(at + s0, at + s1) for s0, s1 in stretches]
        at += length
    fits = [(s0, s1) for s0, s1 in spans if s1 - s0 >= INTERRUPT_MIN_STRETCH_MS and s0 >= not_before_ms
            and s1 <= at - INTERRUPT_MIN_TALK_AFTER_MS]
    if not fits:
        return None
    s0, s1 = fits[-1]
    return s0 + int(INTERRUPT_INTO_STRETCH * (s1 - s0))


def _listen(actions: Sequence[Action]) -> Listen | None:
    listens = [a for a in actions if isinstance(a, Listen)]
    return listens[-1] if listens else None


def _ends(actions: Sequence[Action]) -> bool:
    return any(isinstance(a, (Hangup, Transfer)) for a in actions)


def _decides(session: DialogueSession, text: str) -> str:
    """What the line would decide on *text* now (without moving the call on)."""
    fork = session.fork()
    before = len(fork.history)
    fork.on_transcript(text)
    return decision_of([_event_dict(e) for e in fork.history[before:]])


def _event_dict(event: Any) -> dict[str, Any]:
    return {"kind": event.kind, "step": event.step, "text": event.text, "intent": event.intent}


def plan_eval_call(files: Sequence[EvalFile], rng: random.Random, turns: int, session: DialogueSession,
                   examples: Mapping[str, str], prompt_ms: Callable[[str, str], int], *,
                   over_prompt: bool = True, interruption_at_ms: int = INTERRUPTION_AT_MS,
                   end_call: bool = True, cycle: Sequence[str] = TURN_CYCLE,
                   prompt_audio: PromptAudio | None = None) -> list[EvalStep]:
    """One call's schedule against the dialplan *session* runs (a fresh session, started here).

    Over the greeting and menu: backchannels and noise, then an in-scope turn interrupting
    the menu. Then *turns* turns of phrasing kinds *cycle* (in turn), each waiting for the
    reply to the previous one, each followed by a noise or backchannel over the reply's first
    prompt when it is long enough. With *end_call*: an ending answer last, then "yes" for its
    confirmation. *prompt_ms(text, voice)* is how long the line says a prompt.

    With *prompt_audio* the interruption's voice starts inside a voiced stretch of the menu
    prompt (:func:`interruption_onset_ms`), after the items over it, instead of at
    *interruption_at_ms*: a voice starting in the prompt's own pause between two phrases
    meets a line already silent, and its stop cannot be timed.
    """
    by_phrase: dict[tuple[str, str | None], list[EvalFile]] = {}
    for f in files:
        by_phrase.setdefault((f.phrasing, f.intent if f.phrasing in ("in-scope", "paused") else None), []).append(f)
    decks = {k: _Deck(v, rng) for k, v in by_phrase.items()}
    empty = _Deck([], rng)
    backchannels, noises = decks.get(("backchannel", None), empty), decks.get(("noise", None), empty)
    steps: list[EvalStep] = []
    actions = session.start()
    listen = _listen(actions)
    if listen is None:
        raise ValueError("the flow does not start with an ask")
    talk_ms, _ = _reply_ms(actions, prompt_ms)

    def over_speech(at_ms: int, k: int) -> None:
        """A noise or a backchannel the line does not take for an answer, at *at_ms*."""
        deck = noises if k % 2 else backchannels
        f = deck.draw(lambda f: f.kind == "noise" or _decides(session, f.text) in ("no_match", "none"))
        if f is not None:
            steps.append(EvalStep(at_ms, f))

    onset = None
    if prompt_audio is not None:
        items_end = max(OVER_PROMPT_AT_MS) if over_prompt else 0
        onset = interruption_onset_ms(actions, prompt_audio, items_end + INTERRUPT_AFTER_ITEM_MS)
    if over_prompt:
        for k, at in enumerate(OVER_PROMPT_AT_MS):
            if at + INTERRUPT_AFTER_ITEM_MS < (onset if onset is not None else min(talk_ms, interruption_at_ms)):
                over_speech(at, k)
    at = min(interruption_at_ms, max(0, talk_ms - 2500))
    used: dict[str, int] = {}

    def in_scope(listen: Listen, phrasing: str) -> tuple[str, EvalFile] | None:
        valid = [i for i in listen.intents if i not in ENDING_INTENTS and i not in LEFT_OUT_INTENTS
                 and i in examples]
        rng.shuffle(valid)
        valid.sort(key=lambda i: used.get(i, 0))
        for intent in valid:
            deck = decks.get((phrasing, intent)) or decks.get(("in-scope", intent))
            f = deck.draw() if deck else None
            if f is not None:
                used[intent] = used.get(intent, 0) + 1
                return intent, f
        return None

    def turn(at_ms: int, f: EvalFile, expect: str, text: str, k: int) -> tuple[int, list[Action]]:
        ask = session.state if hasattr(session, "state") else None
        steps.append(EvalStep(at_ms, f, expect, str(ask) if ask is not None else None))
        acts = session.on_transcript(text)
        reply_ms, first_ms = _reply_ms(acts, prompt_ms)
        end = at_ms + f.voiced_end_ms
        if first_ms >= OVER_REPLY_MIN_PROMPT_MS and not _ends(acts):
            over_speech(end + OVER_REPLY_AFTER_MS, k)
        return end + LATENCY_ALLOWANCE_MS + reply_ms + QUIET_BEFORE_TURN_MS, acts

    first = in_scope(listen, "in-scope")
    if first is None:
        raise ValueError("no in-scope utterance for the first ask")
    intent, f = first
    if onset is not None:
        at = max(0, onset - f.voiced_start_ms)
    at, actions = turn(at, replace(f, kind=INTERRUPTION), intent, examples[intent], 0)
    for k in range(turns):
        listen = _listen(actions)
        if listen is None or _ends(actions):
            break
        phrasing = cycle[k % len(cycle)]
        oos = decks.get(("out-of-scope", None))
        if phrasing == "out-of-scope" and oos and _decides(session, "") == "no_match":
            f = oos.draw()
            assert f is not None
            at, actions = turn(at, f, "no_match", "", k + 1)
            continue
        chosen = in_scope(listen, "paused" if phrasing == "paused" else "in-scope")
        if chosen is None:
            break
        intent, f = chosen
        at, actions = turn(at, f, intent, examples[intent], k + 1)
    listen = _listen(actions)
    if not end_call or listen is None or _ends(actions):
        return steps
    endings = [i for i in listen.intents if i in ENDING_INTENTS and i in examples]
    if not endings:
        return steps
    intent = rng.choice(endings)
    paused = cycle[turns % len(cycle)] == "paused"
    deck = (decks.get(("paused", intent)) if paused else None) or decks.get(("in-scope", intent))
    f = deck.draw() if deck else None
    if f is None:
        return steps
    confirm = session.fork()
    confirm_ms, _ = _reply_ms(confirm.on_transcript(examples[intent], 0.0), prompt_ms)
    end = at + f.voiced_end_ms
    turn(at, f, intent, examples[intent], turns + 1)
    yes = backchannels.draw(lambda f: parse_yes_no(f.text) == "yes")
    if yes is not None:
        steps.append(EvalStep(end + LATENCY_ALLOWANCE_MS + confirm_ms + QUIET_BEFORE_TURN_MS,
                              replace(yes, kind="turn", phrasing="confirmation"), "yes"))
    return steps


# --------------------------------------------------------------------------- what the line heard


@dataclass(frozen=True)
class Heard:
    """A transcript of the call record and what the line decided about it: an intent,
    ``no_match``, the answer to a question (``yes``, ``no``, ``neither``) or ``ignored``."""

    text: str
    step: str
    decision: str


def decision_of(events: Sequence[Mapping[str, Any]]) -> str:
    """The decision among the dialogue events that followed one transcript."""
    for e in events:
        kind = e.get("kind")
        if kind == "ignored":
            return "ignored"
        if kind == "intent" and e.get("intent"):
            return str(e["intent"])
        if kind == "question" and e.get("intent"):
            return str(e["intent"])   # an ending answer the line asks to confirm
        if kind == "no_match":
            return "no_match"
        if kind == "answer" and e.get("text") in ("yes", "no", "neither"):
            return str(e["text"])
    return "none"


def heard_turns(record: Mapping[str, Any]) -> list[Heard]:
    """Every transcript of a call record's dialogue, with the line's decision on it."""
    events = list(record.get("dialogue") or [])
    out = []
    for k, e in enumerate(events):
        if e.get("kind") not in ("transcript", "ignored"):
            continue
        rest = [e] if e.get("kind") == "ignored" else []
        for later in events[k + 1:]:
            if later.get("kind") in ("transcript", "ignored"):
                break
            rest.append(later)
        out.append(Heard(str(e.get("text") or ""), str(e.get("step") or ""), decision_of(rest)))
    return out


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def similarity(a: str, b: str) -> float:
    """How much transcript *b* says of item text *a*, 0..1: the difflib ratio of their lowercase
    words, or for a fragment of the turn (the line took part of it for a whole turn) the share of
    its words found in order in *a*, discounted below three words."""
    wa, wb = _words(a).split(), _words(b).split()
    if not wa or not wb:
        return 0.0
    ratio = difflib.SequenceMatcher(None, " ".join(wa), " ".join(wb)).ratio()
    found = sum(m.size for m in difflib.SequenceMatcher(None, wb, wa).get_matching_blocks())
    return max(ratio, found / len(wb) * min(1.0, len(wb) / 3.0) * 0.9)


def pair_heard(steps: Sequence[EvalStep], heard: Sequence[Heard],
               min_similarity: float = MIN_SIMILARITY) -> dict[int, list[Heard]]:
    """Scheduled items (by index) with the transcripts heard of each, in order, by their words:
    one item may be heard as several transcripts (the line ended the turn early and heard the
    rest as another). The assignment with the greatest total similarity; noise never pairs."""
    n, m = len(steps), len(heard)
    sim = [[similarity(s.file.text, h.text) if s.file.phrasing != "noise" else 0.0 for h in heard] for s in steps]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            take = sim[i][j] + best[i][j + 1] if sim[i][j] >= min_similarity else -1.0
            best[i][j] = max(best[i + 1][j], best[i][j + 1], take)
    out: dict[int, list[Heard]] = {}
    i = j = 0
    while i < n and j < m:
        if sim[i][j] >= min_similarity and best[i][j] == sim[i][j] + best[i][j + 1]:
            out.setdefault(i, []).append(heard[j])
            j += 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return out


def understood(expect: str | None, heard: Sequence[Heard] | Heard | None) -> str:
    """``yes`` (the line decided what the turn asked, on its last transcript, and acted on no
    other intent on an earlier part of it), ``same_outcome`` (goodbye for nothing_else or
    back), ``no``, or ``not_heard`` (no transcript paired with it)."""
    parts = [heard] if isinstance(heard, Heard) else list(heard or [])
    if not parts:
        return "not_heard"
    allowed = {expect, "no_match", "none", "ignored"}
    if any(h.decision not in allowed for h in parts[:-1]):
        return "no"
    last = parts[-1].decision
    if last == expect:
        return "yes"
    if expect in SAME_OUTCOME and last in SAME_OUTCOME:
        return "same_outcome"
    return "no"


# --------------------------------------------------------------------------- figures by condition


@dataclass(frozen=True)
class ItemRow:
    """One scored item with everything its conditions are read from."""

    step: EvalStep
    outcome: ItemOutcome | None      # None: not found on the wire (the call had ended)
    heard: tuple[Heard, ...]         # its transcripts (several: the line split the turn)
    understood: str | None           # None for items over a prompt
    tail_overlap: bool = False       # a cut-in after the request was made and understood
    calls: int = 1                   # concurrent calls of its round
    codec: str = "PCMU"              # the caller's codec (PCMU: 8 kHz; G722: 16 kHz)
    #: for items over a prompt: the longest pause the server's record shows the prompt made for
    #: it, in ms (0: the server did not pause; None: the record has no pauses to tell)
    hole_ms: float | None = None


#: a prompt paused this long for a noise or an acknowledgement is a false stop: a hole in it
HOLE_MS = 300.0


def prompt_holes(outcomes: Sequence[ItemOutcome], record: Mapping[str, Any]) -> dict[int, float]:
    """Item index -> the longest hole the server made in its prompt for that item, in ms, for
    each noise or backchannel; 0 when it made none. The server's ``prompt_pauses`` (when the
    playout paused for a voice's onset, and the hole that left between the prompt's words:
    ``hole_ms``, or ``ms`` in records from before it) are matched to an item when the pause
    began between 50 ms before the item's first voiced packet and 300 ms after its last (the
    caller's audio reaches the server a few ms after the capture sees it). Empty when the record
    keeps no pauses (a server from before they were recorded)."""
    pauses = record.get("prompt_pauses")
    if pauses is None:
        return {}
    out: dict[int, float] = {}
    for o in outcomes:
        if o.item.kind not in OVER_SPEECH_KINDS:
            continue
        lo, hi = o.item.onset_s - 0.05, o.item.voiced_end_s + 0.3
        out[o.item.index] = max((float(p.get("hole_ms", p["ms"])) for p in pauses if lo <= float(p["at_s"]) <= hi),
                                default=0.0)
    return out


def false_stop(o: ItemOutcome, hole_ms: float | None) -> bool | None:
    """For a noise or backchannel: was it a false stop (True), not one (False), or not over a
    prompt at all (None)? With the server's pauses (*hole_ms* not None) it was over a prompt when
    the wire says so or the server paused a prompt for it (an onset in a gap between sentences),
    and a false stop when that pause lasted HOLE_MS or more; without them, the wire decides."""
    on_wire = o.outcome in ("false_barge_in", "kept_talking")
    if hole_ms is None:
        return o.outcome == "false_barge_in" if on_wire else None
    if not (on_wire or hole_ms):
        return None
    return hole_ms >= HOLE_MS


def pause_bucket(pause_ms: int) -> str:
    for lo, hi in PAUSE_BUCKETS_MS:
        if lo <= pause_ms < hi:
            return f"paused {lo}-{min(hi, 700) - (0 if hi > 700 else 1)} ms"
    return f"paused {pause_ms} ms"


def voice_condition(engine: str, voice: str) -> str:
    """The condition name of one voice's items."""
    return f"voice {engine}/{voice}"


def conditions_of(row: ItemRow) -> list[str]:
    f = row.step.file
    out = ["all", f"engine {f.engine}", voice_condition(f.engine, f.voice), f"codec {row.codec}"]
    if f.phrasing == "paused":
        out += ["paused", pause_bucket(f.pause_ms)]
    elif f.kind == INTERRUPTION:
        out.append("interruption")
    else:
        out.append(f.phrasing)
    out.append(f"{row.calls} call{'s' if row.calls > 1 else ''}")
    return out


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values)}


def figures(rows: Iterable[ItemRow]) -> dict[str, Any]:
    """Every figure of a set of items: turn latency, understood, premature cut-ins (of paused
    turns), false stops (of backchannels and noise over the line's speech), barge-in stops."""
    rows = list(rows)
    latency, barge = [], []
    paused = cut_ins = premature = in_pause = turns = turn_cut_ins = split = 0
    over = false_stops = over_wire = false_stops_wire = 0
    asked = got = same = on_ask = got_on_ask = 0
    for r in rows:
        o = r.outcome
        if r.understood is not None:
            split += len(r.heard) > 1
            asked += 1
            got += r.understood == "yes"
            same += r.understood in ("yes", "same_outcome")
            # said at the ask the schedule planned it for (after a misunderstanding, a call's
            # later turns come at other asks, where their intent may not be on offer)
            if r.heard and r.step.ask is not None and all(h.step == r.step.ask for h in r.heard):
                on_ask += 1
                got_on_ask += r.understood == "yes"
        if o is None:
            continue
        if o.outcome == "turn" and o.latency_ms is not None:
            latency.append(o.latency_ms)
        if o.item.kind == INTERRUPTION:
            if o.reply_ms is not None:
                latency.append(o.reply_ms)
            if o.outcome in ("barge_in", "missed") and o.latency_ms is not None:
                barge.append(o.latency_ms)
        if o.item.kind in ("turn", "paused_turn") and o.outcome in ("turn", "cut_in", "no_reply"):
            turns += 1
            turn_cut_ins += o.outcome == "cut_in" and not r.tail_overlap
        if o.item.kind == "paused_turn" and o.outcome in ("turn", "cut_in", "no_reply"):
            paused += 1
            if o.outcome == "cut_in":
                cut_ins += 1
                started = o.item.voiced_end_s + (o.latency_ms or 0.0) / 1000.0
                in_pause += o.item.in_pause(started)
                premature += not r.tail_overlap
        if o.item.kind in OVER_SPEECH_KINDS:
            over_wire += o.outcome in ("false_barge_in", "kept_talking")
            false_stops_wire += o.outcome == "false_barge_in"
            stopped = false_stop(o, r.hole_ms)
            if stopped is not None:
                over += 1
                false_stops += stopped
    return {"items": len(rows), "turn_latency_ms": _stats(latency), "barge_in_stop_ms": _stats(barge),
            "understood": [got, asked], "understood_same_outcome": [same, asked],
            "understood_at_planned_ask": [got_on_ask, on_ask],
            "split_turns": split, "cut_ins_all_turns": [turn_cut_ins, turns], "paused_turns": paused, "cut_ins": cut_ins, "premature_cut_ins": premature, "cut_ins_in_pause": in_pause,
            "false_stops": [false_stops, over], "false_stops_wire": [false_stops_wire, over_wire]}


def summarise_conditions(rows: Sequence[ItemRow]) -> dict[str, dict[str, Any]]:
    """:func:`figures` for all items and per condition (engine, voice, codec, phrasing, pause
    length, calls)."""
    groups: dict[str, list[ItemRow]] = {}
    for r in rows:
        for c in conditions_of(r):
            groups.setdefault(c, []).append(r)
    # a voice row where its engine has several voices (flite's); else it is the engine's row again
    voices: dict[str, set[str]] = {}
    for r in rows:
        voices.setdefault(r.step.file.engine, set()).add(r.step.file.voice)
    several = [voice_condition(engine, voice) for engine, names in voices.items() if len(names) > 1 for voice in names]
    order = ["all"] + sorted(c for c in groups if c.startswith("engine ")) + sorted(several) + sorted(
        c for c in groups if c.startswith("codec ")) + [
        c for c in ("interruption", "in-scope", "out-of-scope", "paused") if c in groups] + sorted(
        c for c in groups if c.startswith("paused ")) + [
        c for c in ("confirmation", "backchannel", "noise") if c in groups] + sorted(
        c for c in groups if c.endswith(("call", "calls")))
    return {c: figures(groups[c]) for c in order}


def fraction_text(pair: Sequence[int]) -> str:
    """"3/4  75.0%" for [3, 4]; "-" for none of none."""
    n, d = pair
    return f"{n}/{d} {100.0 * n / d:5.1f}%" if d else "-"


def format_conditions(table: Mapping[str, Mapping[str, Any]]) -> str:
    """The per-condition table, one line per condition (ms)."""
    head = (f"{'condition':<22} {'turns':>5} {'p50':>5} {'p95':>5} {'p99':>5}  {'understood':>13}  "
            f"{'premature cut-ins':>17}  {'cut-ins, all':>13}  {'false stops':>13}  {'barge-in p95':>12}")
    lines = [head]
    for c, s in table.items():
        t, b = s["turn_latency_ms"], s["barge_in_stop_ms"]
        lat = f"{t['n']:>5} {t['p50']:>5.0f} {t['p95']:>5.0f} {t['p99']:>5.0f}" if t else f"{0:>5} {'-':>5} {'-':>5} {'-':>5}"
        cut = fraction_text([s["premature_cut_ins"], s["paused_turns"]])
        stop = f"{b['p95']:.0f} (n {b['n']})" if b else "-"
        lines.append(f"{c:<22} {lat}  {fraction_text(s['understood']):>13}  {cut:>17}  {fraction_text(s['cut_ins_all_turns']):>13}  "
                     f"{fraction_text(s['false_stops']):>13}  "
                     f"{stop:>12}")
    return "\n".join(lines)


def transfer_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """A transferred call's id, the words the transfer was decided on, and whether the caller
    (the schedule's scripted yes) confirmed it: the dialogue asked "put you through?" on those
    words and heard yes."""
    last, heard, confirmed = "", "", False
    for entry in record.get("dialogue") or []:
        kind, text = entry.get("kind"), entry.get("text") or ""
        if kind == "transcript":
            last = text
        elif kind == "question" and text == "transfer":
            heard, confirmed = last, False
        elif kind == "answer":
            confirmed = text == "yes"
        elif kind == "transfer":
            return {"call_id": record.get("call_id"), "heard": heard if confirmed else last, "confirmed": confirmed}
    return {"call_id": record.get("call_id"), "heard": last, "confirmed": False}


def rows_of_call(steps: Sequence[EvalStep], outcomes: Sequence[ItemOutcome], record: Mapping[str, Any],
                 cut_in_in_gap: Mapping[int, bool], calls: int, codec: str = "PCMU") -> list[ItemRow]:
    """One call's items: each step with its outcome on the wire (by item index), the transcript
    paired with it, whether the line understood it and, for an item over a prompt, the hole the
    server made in the prompt for it. A cut-in is a tail overlap (not premature) when the agent
    started in a gap of the caller's sound, outside the designed pause, and had understood the
    turn."""
    by_index = {o.item.index: o for o in outcomes}
    holes = prompt_holes(outcomes, record)
    told = "prompt_pauses" in record
    pairs = pair_heard(steps, heard_turns(record))
    rows = []
    for k, s in enumerate(steps):
        o, h = by_index.get(k), tuple(pairs.get(k, ()))
        got = understood(s.expect, h) if s.expect is not None else None
        tail = bool(o is not None and o.outcome == "cut_in" and o.latency_ms is not None
                    and not o.item.in_pause(o.item.voiced_end_s + o.latency_ms / 1000.0)
                    and cut_in_in_gap.get(k, False) and got == "yes")
        rows.append(ItemRow(s, o, h, got, tail, calls, codec, holes.get(k, 0.0) if told else None))
    return rows


def row_json(row: ItemRow) -> dict[str, Any]:
    f, o = row.step.file, row.outcome
    return {"at_ms": row.step.at_ms, "name": f.name, "kind": f.kind, "phrasing": f.phrasing, "engine": f.engine,
            "voice": f.voice, "rate": f.rate, "pause_ms": f.pause_ms, "text": f.text, "ask": row.step.ask,
            "expect": row.step.expect, "heard": [h.text for h in row.heard],
            "heard_at": [h.step for h in row.heard], "decisions": [h.decision for h in row.heard],
            "understood": row.understood, "outcome": o.outcome if o else "not_played",
            "latency_ms": o.latency_ms if o else None, "reply_ms": o.reply_ms if o else None,
            "tail_overlap": row.tail_overlap, "calls": row.calls, "codec": row.codec, "hole_ms": row.hole_ms}
