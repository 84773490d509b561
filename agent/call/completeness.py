"""Is what the caller has said so far a finished sentence? Rules over the words alone.

A small rule set over the interim transcript, for any sentence (not only the ones a dialplan
expects): it looks at how the words end and whether a clause is there at all.

* :attr:`Completeness.UNFINISHED`: the words end where English cannot stop -- on a function word
  (a determiner, a preposition, "to", a conjunction, an auxiliary or modal, a subject pronoun),
  a filler ("um"), a verb that still needs its object ("I need", "I was wondering", "tell me"),
  an opener that announces the request ("I was wondering if", "could you"), a greeting alone
  ("hi there"), a discourse marker alone ("actually", "oh, by the way") or a question word with
  no verb yet ("what days").
* :attr:`Completeness.COMPLETE`: a clause with a verb that ends on a content word ("can I get
  someone on the line", "my card was stolen yesterday"), a closed short answer ("no",
  "that's all", "goodbye", "yes please"), or words that end on a goodbye ("thanks so much, bye").
* :attr:`Completeness.UNDECIDED`: anything else, typically a noun phrase ("my balance",
  "checking account") that may be a whole answer or the start of one ("my card | was stolen").
"""
from __future__ import annotations

import enum
import re

from agent.dialplan.asks import KEY_LEAD_WORDS
from agent.dialplan.slots import YES_COMPANIONS, bye_spelt_by

__all__ = ["Completeness", "completeness", "turn_words"]


class Completeness(enum.Enum):
    UNFINISHED = "unfinished"
    UNDECIDED = "undecided"
    COMPLETE = "complete"


_WORD = re.compile(r"[a-z']+")

DETERMINERS = frozenset("a an the my your our their his her its this that these those some any every each no "
                        "another which whose what".split())
PREPOSITIONS = frozenset("to of for with in on at from by about into onto like than through across over "
                         "under after before until till during without within between against toward "
                         "towards per via upon around".split())
CONJUNCTIONS = frozenset("and or but so because if then when while whether although though unless since "
                         "as nor".split())
AUXILIARIES = frozenset("am is are was were be been being do does did have has had can could will would "
                        "shall should may might must i'm i'd i'll i've you're you'd you'll we're we'd "
                        "we'll they're it's that's there's what's where's who's how's when's why's here's "
                        "gonna wanna gotta don't doesn't didn't can't "
                        "cannot couldn't won't wouldn't shouldn't isn't aren't wasn't weren't haven't hasn't".split())
SUBJECT_PRONOUNS = frozenset("i we they he she".split())
#: "you" and "it" end a sentence ("thank you", "i lost it") unless an auxiliary is just before
_AFTER_AUXILIARY = frozenset("you it".split())
FILLERS = frozenset("um umm uh uhh er erm ah oh hmm mm".split())
#: what people say to show they are listening ("uh-huh" and "mm-hmm" are matched without hyphens)
ACKNOWLEDGEMENTS = frozenset({"uh huh", "mhm", "mm hmm", "okay", "ok", "yeah", "yep", "right", "sure", "alright",
                              "all right", "i see"})
#: hesitations: alone they take no turn, but they as often begin a question ("um, what time ...")
HESITATIONS = frozenset({"uh", "um", "ah", "oh", "hmm", "mm"})


def alternatives(phrases: frozenset[str]) -> str:
    """*phrases* as regex alternatives, the longest first ("all right" before "all")."""
    return "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))


_ACKNOWLEDGEMENT = re.compile(rf"^(?:(?:{alternatives(HESITATIONS)}) )*(?:{alternatives(ACKNOWLEDGEMENTS)})"
                              rf"(?: (?:{alternatives(ACKNOWLEDGEMENTS | HESITATIONS)}))*$")


def is_acknowledgement(text: str) -> bool:
    """ "uh-huh", "okay", "mm-hmm yeah", "oh okay" -- not a bare "uh", "um" or "oh", nor anything
    with other words."""
    return bool(_ACKNOWLEDGEMENT.match(" ".join(turn_words(text))))
QUESTION_WORDS = frozenset("what when where who why how which".split())
#: verbs that are rarely the last word of a request: their object or clause is still to come
NEEDS_OBJECT = frozenset("need needed want wanted wanna like love tell give show let get make know wonder "
                         "wondering wondered think thinking guess hope hoping try trying going mean check "
                         "find ask asking put bring take speak talk say told".split())
_OBJECT_PRONOUNS = frozenset("me us him her them".split())
#: verbs that end a clause whose object came first ("how much i have")
_OBJECT_FRONTED_VERBS = frozenset("have has had do does did got need want".split())
_FRONTED = frozenset("what much many all which whatever".split())
#: a verb of this list followed by an object pronoun still wants more ("tell me", "give me")
_TWO_OBJECT_VERBS = frozenset("tell give show let get send bring ask".split())
#: between a subject and its verb ("how much i still have")
_ADVERBS_BEFORE_A_VERB = frozenset("still actually currently really already just even now".split())
#: "find out", "figure out", "work out": after "to" ("hoping to find out") their clause is to come
_OUT_VERBS = frozenset("find figure work sort".split())
#: said first, a request follows ("i was wondering if", "could you", "is it possible to")
_OPENERS = (("i", "was", "wondering"), ("i", "wonder"), ("could", "you"), ("can", "you"), ("would", "you"),
            ("will", "you"), ("is", "it", "possible"), ("do", "you", "know"))
GREETINGS = frozenset("hi hello hey hiya there good morning afternoon evening yes yeah oh okay ok so".split())
_GREETING_HEADS = frozenset("hi hello hey hiya morning afternoon evening".split())
#: whole answers that need no verb
CLOSED_ANSWERS = frozenset({
    "yes", "no", "yeah", "yep", "yup", "nope", "nah", "sure", "okay", "ok", "right", "correct", "exactly",
    "thanks", "thank you", "bye", "goodbye", "good bye", "bye bye", "please", "yes please", "no thanks",
    "no thank you", "that's all", "that is all", "that's it", "nothing", "nothing else", "not really",
    "all set", "i'm all set", "i'm done", "i'm good", "of course", "absolutely", "definitely", "never mind",
    "one more", "one more thing", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "representative", "operator", "agent", "a person", "a human", "someone", "somebody", "anyone", "anybody",
    "farewell", "good night", "so long", "see you", "take care", "cheers", "not now", "not right now",
    "not at the moment", "another question", "one more question",
})
#: said before an answer without being it ("yep, one more", "uh, no thanks", "actually, yes")
_ANSWER_OPENERS = frozenset("yes yeah yep yup no nope nah okay ok well so um uh actually".split())
#: words that announce what the caller says next ("actually, | there's one more thing", "oh, by
#: the way, | ..."): alone, or after a yes or a filler, they are no turn yet
DISCOURSE_MARKERS = frozenset("actually well anyway anyways also besides plus".split())
_DIGIT_WORDS = frozenset("zero oh one two three four five six seven eight nine".split())

#: words after which a clause has its verb ("my card was stolen"): auxiliaries, and common
#: verbs in any form ("-ed", "-ing" and "-s" forms are also taken as verbs after a subject)
COMMON_VERBS = frozenset("""
need needs want wants like likes would check see know find get gets got put transfer
help speak talk call close closes closed open opens opened start starts stop stops come comes
go goes going work works pay paid lost stolen change send sent make done finish finished
have has had do does did is are was were am be been tell give show let connect
forgot forget lose took take left leave bought buy gave owe cover covers apply waive cancel report
""".split()) | AUXILIARIES
#: a word of these after the object came first ends the clause ("something more i need",
#: "another thing i wanted to ask", "what i called for")
_FRONTED_OBJECTS = _FRONTED | frozenset("something anything everything nothing thing more someone somebody anyone "
                                        "anybody one question".split())
#: subjects of a clause that follows a fronted object
_CLAUSE_SUBJECTS = frozenset("i we you they i'd i'm i'll i've we'd we're you'd".split())
#: an answer that stops after its auxiliary ("indeed i do", "yep there is")
_ELLIPSIS_AUXILIARIES = frozenset("do did does am is are was were have has can will could would should".split())
_ELLIPSIS_SUBJECTS = frozenset("i we you they it there that he she".split())
#: after these, a word ending in "s" is a verb ("that takes care of it", "it covers")
_THIRD_PERSON = frozenset("that it this he she which who".split())
#: after these, "this" and "that" are pronouns ("walk me through this", "do that")
_BEFORE_A_PRONOUN = PREPOSITIONS | (COMMON_VERBS - AUXILIARIES)


def turn_words(text: str) -> list[str]:
    """The lower-case words of *text* (apostrophes kept: "i'd", "that's")."""
    return _WORD.findall(text.lower().replace("’", "'"))


_WORD_OR_MARK = re.compile(r"[a-z']+|[,;:.?!]+")


def punctuated_words(text: str) -> list[str]:
    """:func:`turn_words`, a word the recogniser wrote a comma or a sentence mark after, with more
    words following, ending in "," ("hi, what's my balance. thanks" -> ["hi,", "what's", "my",
    "balance,", "thanks"]): where the caller's words fall into parts."""
    out: list[str] = []
    for token in _WORD_OR_MARK.findall(text.lower().replace("’", "'")):
        if token[0] not in ",;:.?!":
            out.append(token)
        elif out and not out[-1].endswith(","):
            out[-1] += ","
    if out and out[-1].endswith(","):
        out[-1] = out[-1][:-1]
    return out


def ends_in_digits(text: str) -> bool:
    """Do the words end with a spoken digit ("it's two six four one")? Callers read numbers out
    in groups, with a pause between them that the voice cannot tell from an end."""
    ws = turn_words(text)
    return bool(ws) and ws[-1] in _DIGIT_WORDS


#: after these a final "by" is a particle ("come by", "stand by"), not a preposition wanting its object
_BEFORE_A_PARTICLE_BY = frozenset("come came coming stop drop swing pass stand get go".split())


def ends_with_bye(ws: list[str]) -> bool:
    """Do the words end on a goodbye ("thanks, bye", "okay great, goodbye"), also as the recogniser
    may spell it ("i'll call back another time by")?"""
    return bool(ws) and (ws[-1] in ("bye", "goodbye") or bye_spelt_by(ws))


#: a yes or a no in one word: a whole answer, and as often the start of a longer one ("yeah,
#: actually, another question", "nope, I'm all set")
BARE_ANSWERS = frozenset("yes yeah yep yup no nope nah sure okay ok right alright".split())


def is_bare_answer(text: str) -> bool:
    """Is *text* a yes or a no alone, fillers aside ("yeah", "um no", "okay great", "alright then",
    "sounds good"; not "yes please", nor a dangling "yeah sounds")?"""
    ws = [w for w in turn_words(text) if w not in FILLERS]
    return bool(ws) and all(w in BARE_ANSWERS or w in YES_COMPANIONS for w in ws) and ws[-1] != "sounds" \
        and not all(w == "then" for w in ws)


#: words around a request's one word that add nothing to it ("an agent, please", "option one",
#: "balance, thanks"): with only these besides it, the word is the whole request
_ONE_WORD_COMPANIONS = FILLERS | KEY_LEAD_WORDS | frozenset("a an the my your our please".split())


def one_word_among_others(example: str, text: str) -> bool:
    """Does a request rest on one word of the ask's (*example*: a one-word example, or a spoken
    key) found among other words ("i want them one", "and yeah", "yep here")? Such words are
    as often a recogniser's nearest reading of open speech, or the first of a longer request,
    as the request itself; "an agent, please" and "option two" are not: what surrounds the
    word adds nothing to it."""
    said = turn_words(example)
    if len(said) != 1:
        return False
    ws = turn_words(text)
    others = [w for i, w in enumerate(ws)
              if w != said[0] and w not in _ONE_WORD_COMPANIONS and not (w == "you" and i and ws[i - 1] == "thank")]
    return bool(others)


def _has_verb(ws: list[str]) -> bool:
    for i, w in enumerate(ws):
        if w in COMMON_VERBS:
            return True
        if i > 0 and (w.endswith("ed") or w.endswith("ing")) and len(w) > 4:
            return True
        if i > 0 and ws[i - 1] in _THIRD_PERSON and w.endswith("s") and not w.endswith("ss") and len(w) > 3:
            return True
    return False


def _object_came_first(ws: list[str]) -> bool:
    """A fronted object, then a clause's subject after it: "something more i need",
    "the thing i wanted to ask", "what i called for", "someone i could chat with"."""
    for k in range(len(ws) - 2, -1, -1):
        if ws[k] in _FRONTED_OBJECTS:
            return any(w in _CLAUSE_SUBJECTS for w in ws[k + 1:-1])
    return False


def _ends_unfinished(ws: list[str]) -> bool:
    last = ws[-1]
    before = ws[-2] if len(ws) > 1 else ""
    earlier = ws[-3] if len(ws) > 2 else ""
    if last in FILLERS:
        return True
    if last in _ELLIPSIS_AUXILIARIES and before in _ELLIPSIS_SUBJECTS and len(ws) > 2 \
            and earlier not in CONJUNCTIONS | QUESTION_WORDS | {"that"}:
        return False  # "indeed i do", "yep there is"; not "if you can", "what i can"
    if last in ("this", "that") and before in _BEFORE_A_PRONOUN:
        return False  # "walk me through this", "do that": a pronoun
    if last == "being" and before not in AUXILIARIES | SUBJECT_PRONOUNS | _AFTER_AUXILIARY:
        return False  # "a human being"
    if last == "going" and before in ("i'm", "we're", "am", "are"):
        return False  # "i'm going": leaving
    if last == "by" and before in _BEFORE_A_PARTICLE_BY:
        return False  # "i'll come by" (a goodbye spelt "by" is finished before these rules)
    if (last in PREPOSITIONS or last in NEEDS_OBJECT) and (before not in DETERMINERS or before in ("this", "that")) \
            and _object_came_first(ws):
        return False  # a stranded preposition or a verb whose object came first
    if last in _AFTER_AUXILIARY and (before in AUXILIARIES or before in CONJUNCTIONS):
        # "that's it"; "that should do it": "do" is the verb there, no subject comes after it as
        # in "does it", "did it", "do you"
        return not (before in ("that's", "is", "was", "do") and last == "it")
    if last == "so" and before in ("think", "guess", "hope", "suppose"):
        return False
    if last == "out" and before in _OUT_VERBS and earlier == "to":
        return True  # "i was hoping to find out", "trying to work out": what, when or if is to come
    subject = earlier if before in _ADVERBS_BEFORE_A_VERB else before
    if last in _OBJECT_FRONTED_VERBS and subject in SUBJECT_PRONOUNS | {"you"} and _FRONTED & set(ws[:-2]):
        return False  # "how much i have", "how much money i still have": the object came first
    if last in NEEDS_OBJECT - _TWO_OBJECT_VERBS | {"ask"} and before == "to" and earlier in _FRONTED_OBJECTS:
        return False  # "one more thing to ask", "something to check": the object came first
    if last == "no" and (before in FILLERS or before in BARE_ANSWERS):
        return False  # "... i'm alright, um, no", "no no": an answer word, not the determiner of "i have no"
    if last in DETERMINERS | PREPOSITIONS | CONJUNCTIONS | AUXILIARIES | SUBJECT_PRONOUNS | QUESTION_WORDS:
        # "that's it", "i think so", a tag like "is it" end a sentence on a function word
        return not (before in ("that's", "is", "was", "do", "did", "have") and last in ("it", "that", "this"))
    if last in NEEDS_OBJECT:
        if before in DETERMINERS or (before.endswith("'s") and before not in AUXILIARIES):
            return False  # "write a check", "a cashier's check": a noun
        return not (last == "know" and before in ("don't", "not", "didn't"))  # "i don't know"
    if last in _OBJECT_PRONOUNS and before in _TWO_OBJECT_VERBS:
        return True
    for opener in _OPENERS:
        if tuple(ws[-len(opener):]) == opener:
            return True
    return False


def _announces_more(core: list[str]) -> bool:
    """Are the words (fillers aside) a discourse marker, alone or after a yes or a filler
    ("actually", "yeah, well", "oh, by the way")?"""
    before = core[:-3] if core[-3:] == ["by", "the", "way"] else core[:-1] if core[-1] in DISCOURSE_MARKERS else None
    return before is not None and all(w in DISCOURSE_MARKERS or w in _ANSWER_OPENERS for w in before)


#: said after a finished clause, these close it ("right, i'll be off then", "something else
#: though", "are you open on sundays or no"); after a conjunction or in a condition they do not
_CLOSING_TAGS = frozenset("then though".split())


def _without_closing_tag(ws: list[str]) -> list[str]:
    """*ws* without a last "then", "though" or "or no" that only closes the clause before it
    ("so long then", "something unrelated though", "staffed on sundays or no"); not "and then",
    "if it's shut then", "even though"."""
    if len(ws) > 2 and ws[-2:] == ["or", "no"]:
        return ws[:-2]
    if len(ws) > 1 and ws[-1] in _CLOSING_TAGS and ws[-2] not in CONJUNCTIONS | {"even", "as"} \
            and not {"if", "unless"} & set(ws[:-1]) and "when" not in ws[1:-1]:
        return ws[:-1]  # (a "when" that opens the sentence asks: "when do you open then")
    return ws


def ends_with_closing_tag(text: str) -> bool:
    """Do *text*'s words end with a tag that closes the clause before it (:func:`_without_closing_tag`)?
    A recogniser also writes "then" for a word inside a sentence ("i want to open then" for "...
    open | an account"), so the endpointer takes no such words for a request at once."""
    ws = turn_words(text)
    return _without_closing_tag(ws) != ws


def completeness(text: str) -> Completeness:
    """How finished the words so far are (see the module's docstring)."""
    ws = _without_closing_tag(turn_words(text))
    said = " ".join(ws)
    if _ACKNOWLEDGEMENT.match(said) and any(said == a or said.endswith(" " + a) for a in ACKNOWLEDGEMENTS):
        return Completeness.COMPLETE  # "uh huh", "mm hmm", "oh okay", "right right": a whole turn, not "okay um"
    core = [w for w in ws if w not in FILLERS]
    if not ws or not core:
        return Completeness.UNFINISHED if ws else Completeness.UNDECIDED
    if _announces_more(core):
        return Completeness.UNFINISHED  # "actually", "yeah, well", "oh, by the way": more is coming
    answers = [core]
    while len(answers[-1]) > 1 and answers[-1][0] in _ANSWER_OPENERS:
        answers.append(answers[-1][1:])  # "yep, one more"; "okay, so long" (not "long")
    if any(" ".join(a) in CLOSED_ANSWERS for a in answers) or all(w in _DIGIT_WORDS for w in ws):
        return Completeness.COMPLETE if ws[-1] not in FILLERS else Completeness.UNFINISHED
    if ends_with_bye(ws):
        return Completeness.COMPLETE  # "okay great, thank you so much, bye"
    if is_bare_answer(text):
        return Completeness.COMPLETE  # "okay great", "sounds good", "alright then"
    if _ends_unfinished(ws):
        return Completeness.UNFINISHED
    if all(w in GREETINGS for w in core) and any(w in _GREETING_HEADS for w in core):
        return Completeness.UNFINISHED  # "hi there": the request is still to come
    if core[0] in QUESTION_WORDS and not _has_verb(core[1:]) and len(core) <= 4:
        # "what days", "what time": the verb is still to come. In a longer question the recogniser
        # more likely lost it ("how much in available for me to withdraw"): undecided, not unfinished.
        return Completeness.UNFINISHED
    if _has_verb(core):
        return Completeness.COMPLETE
    return Completeness.UNDECIDED
