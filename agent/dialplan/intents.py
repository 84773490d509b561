"""Tolerant intent matching for transcripts from an imperfect speech recogniser.

The caller's words reach the dialogue through automatic speech recognition, which mishears:
pocketsphinx turns "check my balance" into "check my bounce", "balance" into "ballots",
"opening hours" into "opening ours" and "goodbye" into "good by". :class:`IntentMatcher` scores a
transcript against the example phrases of each intent and accepts the best intent only when the
evidence is strong; an unrelated sentence ("what is the weather like") matches nothing, because a
wrong answer costs the caller more than a reprompt.

How a transcript is scored against one example phrase:

* Both are normalised (lower case, punctuation and apostrophes removed, single digits spelt out)
  and split into tokens; stop words ("the", "my", "please", ...) are dropped.
* Each remaining example token is compared with every transcript token and with every pair of
  adjacent transcript tokens written together (so "good by" meets "goodbye"). Token similarity is
  the better of the spelling similarity (difflib ratio) and the similarity of simple phonetic
  keys (:func:`phonetic_key`); short words are penalised because they are easily confused.
* Example tokens are weighted: generic verbs ("check", "tell", "speak") count little, and a token
  shared by the examples of several intents counts less than one that singles out one intent.
  *Recall* is the weighted mean similarity of the example tokens.
* *Precision* is the weighted share of the transcript's tokens that the example accounts for; the
  score is ``recall * (1 - PRECISION_WEIGHT * (1 - precision))``, so extra words cost a little.
* An example only counts when at least one of its strong (keyword) tokens was found
  (similarity >= :data:`KEYWORD_MIN_SIMILARITY`); generic words alone never match.

The intent's score is that of its best example; the best intent wins if its score reaches the
matcher's threshold. Ties go to the intent listed first.

Given a sentence encoder, the matcher also compares meanings (:mod:`agent.dialplan.semantic`):
each intent's closeness to the transcript (the mean cosine of its two nearest phrases: own
examples and the common requests they anchor), the runner-up's, and the closeness of the
background requests that no intent covers. :meth:`IntentMatcher.match` then decides:

* a lexical match of at least :data:`LEXICAL_SURE_SCORE` stands; a weaker one (still above the
  threshold) stands unless another intent is clearly nearer in meaning
  (:data:`LEXICAL_VETO_COSINE`);
* otherwise, when the transcript has a word that is not a stop word, the intent nearest in
  meaning is taken when its cosine reaches
  :data:`SEMANTIC_MIN_COSINE`, leads the runner-up by :data:`SEMANTIC_MIN_MARGIN` and is not
  clearly beaten by a background request (:data:`BACKGROUND_MARGIN_COSINE`); its score is
  mapped into [:data:`SEMANTIC_SCORE_FLOOR`, :data:`SEMANTIC_SCORE_CEILING`], below the 0.9 that
  marks words as a complete request, so only the dialplan's own words can end a turn early;
* a match to a request for a person, short of a sure one, stands only when the words name someone
  to talk to, or do not just say what the call is about ("I'd like to talk about investing", "I'm calling
  about a loan": :data:`PERSON_WORDS`);
* when nothing matches and the words ask to be put through to someone ("send me to whoever handles
  complaints", "just someone from the bank": :func:`_asks_for_someone`), the request for a person
  nearest in meaning, if near enough, whatever the background (what the person is for may be a
  request no intent covers);
* a match to an ending (goodbye, nothing more), short of a sure one, stands only when the words do
  not end on a question about something ("what am I doing", "will anyone be in tomorrow":
  :data:`_QUESTION`; "could I go now" is a request, and "what else? nah, I'm good" ends on the
  answer);
* else, when the transcript is written in parts (commas, a full stop: "can you read me what I've
  got, I'm about to pay a bill") and one part of :data:`PART_MIN_WORDS` words or more matches an
  intent that neither ends the call, nor answers a question, nor asks for a person, while no
  other part, however short, matches another intent ("no, time all set"), that intent: a caller's reason or greeting around the
  request dilutes the whole sentence's meaning;
* else nothing matches: the request is out of scope.

Words said in the negative select no intent they negate (:meth:`IntentMatcher.match`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from typing import TYPE_CHECKING, Mapping, Sequence

from agent.dialplan.intent_concepts import ANSWERS, CLOSINGS, NEGATIVE_ANSWERS, ROUTED, adopted
from agent.dialplan import negation

# SLOT_TYPES and slot_phrases are re-exported for the dialplan loader, which imports them from here.
from agent.dialplan.slots import DIGIT_WORDS, SLOT_TYPES, bye_spelt_by, slot_phrases

if TYPE_CHECKING:
    from agent.dialplan.semantic import SemanticScores, SentenceEncoder

__all__ = [
    "DEFAULT_THRESHOLD",
    "IntentMatch",
    "IntentMatcher",
    "SLOT_TYPES",
    "expand_synonyms",
    "normalize",
    "phonetic_key",
    "slot_phrases",
    "token_similarity",
]

DEFAULT_THRESHOLD = 0.7
"""Minimum score for :meth:`IntentMatcher.match` to accept an intent."""

KEYWORD_MIN_SIMILARITY = 0.68
"""An example matches only if one of its keyword tokens is at least this similar."""

FIRST_SOUND_PENALTY = 0.8
"""Factor applied to the phonetic similarity of words that begin with different sounds."""

PRECISION_WEIGHT = 0.5
"""How much unexplained transcript words lower a score (0 = not at all)."""

WEAK_WORD_WEIGHT = 0.35
"""Weight of generic verbs and fillers relative to a keyword."""

_COVERED_MIN_SIMILARITY = 0.6

LEXICAL_SURE_SCORE = 0.9
"""A lexical score this high is the dialplan's own words: meaning cannot overrule it."""

LEXICAL_VETO_COSINE = 0.1
"""A weaker lexical match yields to an intent this much nearer in meaning (and to a background
request nearer by more than :data:`BACKGROUND_MARGIN_COSINE`: "do you do business accounts" shares
sounds with "account balance" but means a request no intent covers)."""

SEMANTIC_MIN_COSINE = 0.33
"""Least cosine between a transcript and an intent's phrases for a match by meaning, unless the
encoder says its own (``min_cosine``: each encoder's cosines run on their own scale)."""

SEMANTIC_MIN_MARGIN = 0.02
"""Least lead in cosine of the nearest intent over the runner-up."""

ROUTED_MIN_COSINE_LEAD = 0.02
"""A request for a person taken by meaning alone (its words name no one: :func:`_asks_for_someone`)
needs a cosine this much above the floor: on the dev half's recognised words (the texts not among
the phrasings), 18 of the 26 such matches within 0.02 of the floor were wrong ("we can wrap this up
by" near "a person who can sort this out"), against 11 of 248 above it (docs/evaluation.md)."""

BACKGROUND_MARGIN_COSINE = 0.06
"""A background request nearer than the best intent by more than this refuses the transcript, also
one the examples' words alone would match less than surely."""

#: "talk about investing", "I'm calling about a loan": a topic, not a person asked for
_TOPIC = re.compile(r"\b(?:talk|talking|speak|speaking|chat|chatting|call|calling|ask|asking|discuss|enquire|"
                    r"enquiring|inquire|inquiring)\b(?:\s+\w+){0,2}?\s+about\b")
#: words that name the person a caller asks for ("talk to someone about my loan")
PERSON_WORDS = frozenset("""
    someone somebody anyone anybody person people human humans agent agents representative rep operator
    staff employee colleague advisor adviser banker manager supervisor team member teller clerk officer
    specialist desk reception service support live real
    """.split())

#: a question about something ("what am I doing", "are you still there at five", "I'll stop by, will
#: anyone be in"), as the last part of the words: a caller who ends on one is not saying goodbye,
#: however near the words come to "I'm leaving now" or "that's all" ("what else? nah, I'm good"
#: ends on the answer). Requests put as a question ("can you end the call", "could I go now") are
#: not among these.
_AUXILIARY = r"(?:am|are|is|was|were|do|does|did|will|would|have|has)"
_ASKED_ABOUT = r"(?:i|you|we|they|there|anyone|anybody|someone|somebody)"
_QUESTION = re.compile(r"^(?:(?:um|uh|so|and|oh|well|but|okay|ok)\s+)?"
                       r"(?:(?:what|whats|when|where|who|whos|why|which)|"
                       r"how\s+(?:late|long|early|soon|much|many|far|often|come|about|do|does|did|can|could|"
                       r"will|would|is|are|am|was|were|have|has|hows)|"
                       rf"{_AUXILIARY}\s+(?:{_ASKED_ABOUT}|it|my|your|the)|"
                       r"can\s+(?:anyone|anybody|someone|somebody)\s+be)\s+\w")

#: the same asking form after a word or two the recogniser made of the question's start ("that way
#: are you there tonight" for "how late | are you there tonight"): an auxiliary, then whom it asks
#: about; not "was the" or "do it" ("that was the one", "that should do it"), which are no questions
#: from their third word
_ASKED_AFTER_A_MISHEARD_START = re.compile(rf"^(?:\S+\s+){{1,2}}{_AUXILIARY}\s+{_ASKED_ABOUT}\s+\w")

#: a word for the person a caller asks to be put through to, and the verbs of asking for one
_SOMEONE = PERSON_WORDS - {"people", "live", "real", "service", "support", "team", "desk", "member"} | {"whoever"}
_ASK_FOR = frozenset("""
    put send connect transfer transferred get give need want speak talk chat reach pass hand patch forward
    route just
    """.split())

PART_MIN_WORDS = 3
"""Least words of a part of the transcript ("what do I have") matched on its own when the whole
matches nothing; shorter parts ("hang on", "yes please") are what callers add around any request."""

_PARTS = re.compile(r"[,;.?!]+")

SEMANTIC_SCORE_FLOOR = 0.7
SEMANTIC_SCORE_CEILING = 0.85
"""Scores of matches by meaning: from the floor at SEMANTIC_MIN_COSINE to the ceiling at 1."""

STOP_WORDS = frozenset("""
    a an the and or but so of to for in on at by with from about into as
    i im ive id ill me my mine myself we us our you your youre yours it its itd
    he she they them their this that these those there here
    is are was were be been being am do does did doing done have has had having
    can could would should will shall may might must
    please want wanna wants wanted wanting need needs needed needing like
    whats whom whose
    um uh er ah oh hmm mm hm well just then also too very really
    """.split())
"""Words that carry no intent; removed from transcripts and examples alike."""

WEAK_WORDS = frozenset("""
    check tell know get give hear see find look speak talk say let go make help
    thanks thank okay ok sure right now today some any more much
    what which who how when where why
    """.split())
"""Generic words kept for context but weighted low (see :data:`WEAK_WORD_WEIGHT`)."""

_NON_WORD = re.compile(r"[^a-z0-9']+")


@dataclass(frozen=True)
class IntentMatch:
    """The intent a transcript was matched to, with its score (0..1) and best example."""

    name: str
    score: float
    example: str


COLLOQUIAL = {"nope": "no", "nah": "no", "naw": "no", "yep": "yes", "yup": "yes", "yeah": "yes", "yea": "yes",
              "ya": "yes", "gonna": "going to", "wanna": "want to", "gotta": "have to", "thx": "thanks"}
"""Everyday short forms, written out before matching by words and by meaning: "nope" is the word
"no" (and a sentence encoder does not relate it to "no thanks")."""

#: "ya" after these words is "you" ("okay, see ya", "thank ya", "catch ya later"); elsewhere "yes"
YA_AS_YOU_AFTER = frozenset({"see", "catch", "thank", "love", "bless", "to", "with", "for", "got", "get", "tell",
                             "let", "hear", "help", "call"})


def written_out(words: Sequence[str]) -> list[str]:
    """*words* with the short forms of :data:`COLLOQUIAL` written out, "ya" as "you" after a verb
    or preposition that takes it (:data:`YA_AS_YOU_AFTER`): "see ya" is a goodbye, not a yes."""
    out: list[str] = []
    for word in words:
        if word == "ya" and out and out[-1] in YA_AS_YOU_AFTER:
            out.append("you")
        else:
            out.extend(COLLOQUIAL.get(word, word).split())
    return out


def read_as_meant(words: list[str]) -> list[str]:
    """*words* with a final "by" that the recogniser wrote for "bye" (:func:`bye_spelt_by`) as
    "bye", and "hang on" as the "wait" it means (by its words and by meaning it came near
    "hang up")."""
    if bye_spelt_by(words):
        words = words[:-1] + ["bye"]
    out: list[str] = []
    for w in words:
        if w == "on" and out and out[-1] == "hang":
            out[-1] = "wait"
        else:
            out.append(w)
    return out


def normalize(text: str) -> list[str]:
    """Split *text* into lower-case word tokens without punctuation or apostrophes.

    Single digits are spelt out ("1" becomes "one") so spoken and written digits compare equal;
    colloquial short forms are written out (:data:`COLLOQUIAL`), and so are a goodbye spelt "by"
    and "hang on" (:func:`read_as_meant`).
    """
    tokens: list[str] = []
    for raw in _NON_WORD.split(text.lower()):
        token = raw.replace("'", "")
        if not token:
            continue
        if len(token) == 1 and token.isdigit():
            token = DIGIT_WORDS[int(token)]
        tokens.append(token)
    return read_as_meant(written_out(tokens))


_INITIAL_CLUSTERS = (("kn", "n"), ("gn", "n"), ("pn", "n"), ("wr", "r"), ("ps", "s"), ("wh", "w"))
_DIGRAPHS = (
    ("x", "ks"),
    ("tch", "x"),
    ("sch", "sk"),
    ("tio", "xo"),
    ("tia", "xa"),
    ("ph", "f"),
    ("sh", "x"),
    ("ch", "x"),
    ("th", "0"),
    ("ck", "k"),
    ("gh", ""),
    ("qu", "kw"),
    ("dg", "j"),
)
_VOWELS = frozenset("aeiou")
_SOFTENERS = frozenset("eiy")
_DEVOICE = {"b": "p", "d": "t", "v": "f", "z": "s", "q": "k"}


@lru_cache(maxsize=4096)
def phonetic_key(word: str) -> str:
    """Return a coarse sound-alike key for *word* (a simplified Metaphone).

    Letters are mapped to consonant classes (voiced and unvoiced pairs merged, soft c/g
    recognised, common digraphs folded), "h" is dropped because recognisers often drop it,
    a vowel is kept only as the first letter, and repeated classes collapse: "balance" -> "PLNS",
    "ballots" -> "PLTS", "hours" and "ours" -> "ORS".
    """
    w = "".join(ch for ch in word.lower() if "a" <= ch <= "z")
    if not w:
        return ""
    for cluster, replacement in _INITIAL_CLUSTERS:
        if w.startswith(cluster):
            w = replacement + w[len(cluster) :]
            break
    if w.startswith("x"):
        w = "s" + w[1:]
    for digraph, replacement in _DIGRAPHS:
        w = w.replace(digraph, replacement)
    w = w.replace("h", "")
    if not w:
        return ""
    key: list[str] = []
    for i, ch in enumerate(w):
        following = w[i + 1] if i + 1 < len(w) else ""
        if ch in _VOWELS:
            code = ch.upper() if i == 0 else ""
        elif ch == "c":
            code = "S" if following in _SOFTENERS else "K"
        elif ch == "g":
            code = "J" if following in _SOFTENERS else "K"
        elif ch in "wy":
            code = ch.upper() if following in _VOWELS else ""
        else:
            code = _DEVOICE.get(ch, ch).upper()
        if code and (not key or key[-1] != code):
            key.append(code)
    return "".join(key)


@lru_cache(maxsize=65536)
def token_similarity(a: str, b: str) -> float:
    """Similarity of two normalised tokens in 0..1, tolerant to spelling and sound-alikes."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    spelling = SequenceMatcher(None, a, b, autojunk=False).ratio()
    key_a, key_b = phonetic_key(a), phonetic_key(b)
    sound = 0.0
    if key_a and key_b:
        sound = SequenceMatcher(None, key_a, key_b, autojunk=False).ratio()
        if key_a[0] != key_b[0]:
            sound *= FIRST_SOUND_PENALTY
    similarity = max(spelling, sound)
    if min(len(a), len(b)) <= 3:
        similarity *= 0.8
    return similarity


@dataclass(frozen=True)
class _Example:
    """One example phrase, tokenised, with per-token weights."""

    intent: str
    text: str
    tokens: tuple[str, ...]
    weights: tuple[float, ...]
    keywords: tuple[bool, ...]


def _content_tokens(tokens: Sequence[str]) -> list[str]:
    content = [t for t in tokens if t not in STOP_WORDS]
    return content if content else list(tokens)


def _asks_for_someone(text: str) -> bool:
    """Do the words ask to be put through to someone: a word for a person (:data:`PERSON_WORDS`,
    "whoever") at most three words after a verb of asking for one ("put me through
    to someone", "send me to whoever", "just someone from the bank", "I need a real person")?"""
    words = normalize(text)
    for i, word in enumerate(words):
        if word in _SOMEONE and any(w in _ASK_FOR for w in words[max(0, i - 3):i]):
            return True
    return False


def _ends_on_a_question(text: str) -> bool:
    """Is the last part of *text* (after its last comma or sentence mark) a question about
    something (:data:`_QUESTION`, :data:`_ASKED_AFTER_A_MISHEARD_START`)?"""
    parts = [p.strip() for p in _PARTS.split(re.sub(r"['\u2019]", "", text.lower())) if p.strip()]
    return bool(parts) and (_QUESTION.match(parts[-1]) is not None
                            or _ASKED_AFTER_A_MISHEARD_START.match(parts[-1]) is not None)


def _has_content_word(text: str) -> bool:
    """True when *text* has a word that is not a stop word."""
    return any(t not in STOP_WORDS for t in normalize(text))


def _word_weight(token: str) -> float:
    return WEAK_WORD_WEIGHT if token in WEAK_WORDS else 1.0


class IntentMatcher:
    """Match transcripts to named intents, each described by example phrases.

    ``IntentMatcher({"balance": ["check my balance", "account balance"], ...})``; intents keep
    their order, which breaks ties. *threshold* is the minimum score to accept (0..1).
    """

    def __init__(
        self,
        intents: Mapping[str, Sequence[str]],
        threshold: float = DEFAULT_THRESHOLD,
        encoder: SentenceEncoder | None = None,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self._semantic = None
        self._min_cosine = getattr(encoder, "min_cosine", SEMANTIC_MIN_COSINE)
        if encoder is not None and intents:
            from agent.dialplan.semantic import SemanticIndex

            self._semantic = SemanticIndex(intents, encoder)
        self.threshold = threshold
        self.intent_names: tuple[str, ...] = tuple(intents)
        concepts = {name: adopted(list(examples)) for name, examples in intents.items()}
        #: intents that close the call or the conversation, and those said in the negative
        self._closings = frozenset(n for n, c in concepts.items() if c & CLOSINGS)
        self._negative_answers = frozenset(n for n, c in concepts.items() if c & NEGATIVE_ANSWERS)
        #: intents that ask for a person
        self._routed = frozenset(n for n, c in concepts.items() if c & ROUTED)
        #: the intent that takes "something else" ("I'm not done" alone asks for it), if any
        self._more_help = next((n for n, c in concepts.items() if "more_help" in c), None)
        #: intents a part of a sentence may select: none that ends the call, answers a question or
        #: asks for a person (acting on those needs the whole turn)
        self._partial = frozenset(n for n, c in concepts.items() if not c & (CLOSINGS | ANSWERS | ROUTED))
        #: the dialplan's own examples that say what the caller does not want ("I don't want it
        #: any more"): a match on one of them stands
        self._unwanted_examples = frozenset(
            (n, e) for n, examples in intents.items() for e in examples
            if negation.read(e).without_unwanted is not None)
        tokenised: list[tuple[str, str, list[str]]] = []
        document_frequency: dict[str, set[str]] = {}
        for name, examples in intents.items():
            for example in examples:
                tokens = _content_tokens(normalize(example))
                if not tokens:
                    continue
                tokenised.append((name, example, tokens))
                for token in tokens:
                    document_frequency.setdefault(token, set()).add(name)
        self._examples: list[_Example] = []
        for name, example, tokens in tokenised:
            weights = tuple(_word_weight(t) / len(document_frequency[t]) for t in tokens)
            keywords = tuple(t not in WEAK_WORDS for t in tokens)
            if not any(keywords):
                keywords = tuple(True for _ in tokens)
            self._examples.append(_Example(name, example, tuple(tokens), weights, keywords))

    def prepare(self, transcripts: Sequence[str]) -> None:
        """Several transcripts are about to be matched by meaning: encode them in one go."""
        if self._semantic is not None and len(transcripts) > 1:
            self._semantic.prepare(transcripts)

    def match(self, transcript: str, by_meaning: bool = True) -> IntentMatch | None:
        """Return the best intent for *transcript*, or None when no intent is convincing.

        *by_meaning* False: by the examples' words alone (what a sure match needs: a match by
        meaning never scores :data:`LEXICAL_SURE_SCORE`), without embedding the transcript.
        Words said in the negative (:mod:`agent.dialplan.negation`) select no intent they
        negate: "I don't want to talk to a person" none, "I'm not done" no closing ("I'm not
        done, one more thing" what follows), "I don't want to hang up, I want my balance" the
        balance."""
        said = negation.read(transcript)

        def allowed(m: IntentMatch | None) -> bool:
            return m is not None and not (m.name in self._closings and said.refuses_to_close)

        match = self._match(transcript, by_meaning)
        if said.not_done and not allowed(match):
            # "I'm not finished, there's another thing": the request is what follows; "wait, I'm
            # not done yet" alone is "something else" where the ask takes that
            if said.after_not_done:
                match = self._match(said.after_not_done, by_meaning)
            elif self._more_help is not None and by_meaning:
                match = IntentMatch(self._more_help, SEMANTIC_SCORE_CEILING, "i'm not done")
            else:
                match = None
        if match is None or not allowed(match):
            return None
        if (said.without_unwanted is None or match.name in self._negative_answers
                or (match.name, match.example) in self._unwanted_examples):
            return match
        again = self._match(said.without_unwanted, by_meaning) if said.without_unwanted else None
        return again if allowed(again) else None

    def _match(self, transcript: str, by_meaning: bool) -> IntentMatch | None:
        match = self._match_whole(transcript, by_meaning)
        if match is not None or self._semantic is None or not by_meaning:
            return match
        parts = [p.strip() for p in _PARTS.split(transcript) if p.strip()]
        if len(parts) < 2:
            return None
        found = [(m, len(p.split()) >= PART_MIN_WORDS) for p in parts
                 if (m := self._match_whole(p, by_meaning)) is not None]
        long_enough = [m for m, long in found if long]
        if not long_enough or len({m.name for m, _ in found}) != 1 or long_enough[0].name not in self._partial:
            return None  # (a short part that selects another intent, "no, ...", speaks against it)
        return max(long_enough, key=lambda m: m.score)

    def _match_whole(self, transcript: str, by_meaning: bool) -> IntentMatch | None:
        ranked = self.scores(transcript)
        lexical = ranked[0] if ranked and ranked[0].score >= self.threshold else None
        if self._semantic is None or not by_meaning or not transcript.strip():
            return lexical
        if lexical is not None and lexical.score >= LEXICAL_SURE_SCORE:
            return lexical
        if lexical is None and not _has_content_word(transcript):
            return None  # "i would like to", "can i": no request yet, whatever it resembles
        meaning = self._semantic.compare(transcript)
        match = None
        if lexical is not None:
            own = meaning.by_intent[lexical.name]
            if own >= max(meaning.by_intent.values()) - LEXICAL_VETO_COSINE and (
                meaning.background - own <= BACKGROUND_MARGIN_COSINE
            ):
                match = lexical
        match = match or self._match_by_meaning(meaning)
        if match is None and self._routed and _asks_for_someone(transcript):
            # "send me to whoever handles complaints": what the person is for may be a request no
            # intent covers (the background), but the caller asks to be put through.
            match = self._nearest_person(meaning)
        if match is not None and match.name in self._routed and self._names_a_topic_only(transcript):
            return None
        if match is not None and match.name in self._closings and _ends_on_a_question(transcript):
            return None
        return match

    def _names_a_topic_only(self, transcript: str) -> bool:
        """Do the words say what the call is about ("I'd like to talk about investing") without
        naming anyone to say it to? Such words ask for no person, however near they come to
        "talk to someone" in meaning."""
        words = normalize(transcript)
        return _TOPIC.search(" ".join(words)) is not None and not PERSON_WORDS.intersection(words)

    def _match_by_meaning(self, meaning: SemanticScores) -> IntentMatch | None:
        """The intent nearest in meaning, if near enough, ahead of the runner-up and not beaten by a
        background request."""
        order = {name: i for i, name in enumerate(self.intent_names)}
        ranked = sorted(meaning.by_intent.items(), key=lambda item: (-item[1], order[item[0]]))
        name, cosine = ranked[0]
        runner_up = ranked[1][1] if len(ranked) > 1 else -1.0
        if cosine - runner_up < SEMANTIC_MIN_MARGIN or meaning.background - cosine > BACKGROUND_MARGIN_COSINE:
            return None
        if name in self._routed and cosine < self._min_cosine + ROUTED_MIN_COSINE_LEAD:
            return None
        return self._by_meaning(name, cosine, meaning)

    def _nearest_person(self, meaning: SemanticScores) -> IntentMatch | None:
        """The request for a person nearest in meaning, if near enough, whatever the other intents
        and the background (the words asked for someone)."""
        name = max(self._routed, key=lambda n: (meaning.by_intent[n], -self.intent_names.index(n)))
        return self._by_meaning(name, meaning.by_intent[name], meaning)

    def _by_meaning(self, name: str, cosine: float, meaning: SemanticScores) -> IntentMatch | None:
        """*name* matched by meaning at *cosine*: a score between the floor and the ceiling, None
        under the least cosine or the matcher's threshold."""
        floor = self._min_cosine
        if cosine < floor:
            return None
        strength = min(1.0, (cosine - floor) / (1.0 - floor))
        score = SEMANTIC_SCORE_FLOOR + (SEMANTIC_SCORE_CEILING - SEMANTIC_SCORE_FLOOR) * strength
        if score < self.threshold:
            return None
        return IntentMatch(name, round(score, 4), meaning.nearest[name])

    def scores(self, transcript: str) -> list[IntentMatch]:
        """Lexical score of every intent that has any keyword evidence, best first."""
        raw = normalize(transcript)
        content = [t for t in raw if t not in STOP_WORDS]
        if not content:
            return []
        # Candidates: each content token alone, and adjacent raw tokens written together.
        candidates: list[tuple[str, tuple[int, ...]]] = []
        content_index: list[int] = []
        for i, token in enumerate(raw):
            if token not in STOP_WORDS:
                content_index.append(i)
                candidates.append((token, (i,)))
        for i in range(len(raw) - 1):
            candidates.append((raw[i] + raw[i + 1], (i, i + 1)))
        transcript_weight = {i: _word_weight(raw[i]) for i in content_index}
        total_transcript_weight = sum(transcript_weight.values())

        best: dict[str, IntentMatch] = {}
        for example in self._examples:
            score = self._score(example, candidates, transcript_weight, total_transcript_weight)
            if score is None:
                continue
            current = best.get(example.intent)
            if current is None or score > current.score:
                best[example.intent] = IntentMatch(example.intent, round(score, 4), example.text)
        order = {name: i for i, name in enumerate(self.intent_names)}
        return sorted(best.values(), key=lambda m: (-m.score, order[m.name]))

    @staticmethod
    def _score(
        example: _Example,
        candidates: Sequence[tuple[str, tuple[int, ...]]],
        transcript_weight: Mapping[int, float],
        total_transcript_weight: float,
    ) -> float | None:
        found_keyword = False
        weighted = 0.0
        covered: set[int] = set()
        for token, weight, keyword in zip(example.tokens, example.weights, example.keywords):
            similarity, positions = max(
                ((token_similarity(token, text), pos) for text, pos in candidates),
                key=lambda pair: pair[0],
            )
            weighted += weight * similarity
            if keyword and similarity >= KEYWORD_MIN_SIMILARITY:
                found_keyword = True
            if similarity >= _COVERED_MIN_SIMILARITY:
                covered.update(positions)
        if not found_keyword:
            return None
        recall = weighted / sum(example.weights)
        covered_weight = sum(w for i, w in transcript_weight.items() if i in covered)
        precision = covered_weight / total_transcript_weight if total_transcript_weight else 0.0
        return recall * (1.0 - PRECISION_WEIGHT * (1.0 - precision))


# --------------------------------------------------------------------------- synonyms


def expand_synonyms(
    examples: Sequence[str], synonyms: Mapping[str, Sequence[str]], limit: int = 200
) -> list[str]:
    """Add to *examples* a copy of each with one synonym substituted for its word or phrase.

    ``expand_synonyms(["check my balance"], {"balance": ["funds"]})`` gives
    ``["check my balance", "check my funds"]``. Matching is by whole words, case-insensitive.
    At most *limit* phrases are returned (originals first).
    """
    out: list[str] = list(dict.fromkeys(examples))
    seen = set(out)
    for example in examples:
        for word, alternatives in synonyms.items():
            pattern = re.compile(r"(?<![\w'])" + re.escape(word) + r"(?![\w'])", re.IGNORECASE)
            if not pattern.search(example):
                continue
            for alternative in alternatives:
                variant = pattern.sub(alternative, example)
                if variant not in seen:
                    seen.add(variant)
                    out.append(variant)
    return out[:limit]
