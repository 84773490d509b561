"""The word rules that say whether what the caller said so far is a finished sentence."""
import pytest

from agent.call.completeness import Completeness, completeness, is_bare_answer

UNFINISHED = [
    "I would like to", "I was wondering if", "I was wondering", "could you", "um", "check my", "my account and",
    "can I", "when can I", "I need", "I think", "I'm going to", "tell me", "what days", "what time does",
    "that was", "I don't", "um, I need to know", "put me through", "hi there", "bye that i'd will", "no um",
    # the rules for a fronted object, an ellipsis or a pronoun "this" must not finish these
    "I wonder if you can", "what I can", "I'd like to speak to", "I'd like to speak with",
    "I want to write a", "I'm being", "I'm going to", "okay um", "uh huh and", "there is no", "I have no",
    # a final "by" waiting for its object
    "can I pay by", "it was sent by",
    # a discourse marker announces what comes next
    "what time does it", "when did it", "do you", "actually", "yeah, actually", "oh, actually", "well", "um, anyway", "also", "oh, by the way", "okay, well",
    # what the caller wants to find out is still to come
    "so I was hoping to find out", "I'm trying to work out", "I need to figure out",
    # "then" and "though" go on from a conjunction or a condition
    "and then", "if it's shut then", "I want my balance and then", "even though", "I'd ask but then",
    "I'll come by when it's open then",
    "one more thing to", "I need something to tell", "where's the", "here's my",
]
COMPLETE = [
    "check my balance", "can I get someone on the line", "my card was stolen yesterday", "no", "yes please",
    "goodbye", "that's it", "thank you", "what are your opening hours", "what time is it", "i need help",
    "i don't know", "no i don't think so", "hi there i'd like to know how much money is in my account",
    "four four seven one", "how much cash i've got", "how much i have", "what i need",
    # a fronted object, a stranded preposition, an answer that stops at its auxiliary
    "there's something more i need", "there's another thing i wanted to ask", "no need i got what i called for",
    "is there a live someone i could chat with", "indeed i do", "yep there is",
    # "this" as a pronoun, nouns that look like verbs, "i'm going", -s verbs, closings
    "i want someone to walk me through this", "just get me a human being", "before i write a check",
    "can i get a cashier's check", "i've heard enough i'm going", "that covers it", "farewell", "yep one more",
    # acknowledgements alone are a whole turn (an answer to a question, or nothing the ask takes)
    "uh huh", "mm hmm", "mm-hmm", "oh okay", "right right", "uh, i see",
    # "no" as an answer word, not a determiner
    "no i'm all right um no", "no no",
    # words that end on a goodbye, also as the recogniser spells it, and "by" as a particle
    "okay great thank you so much bye", "thanks bye", "I'll call back another time by", "thank you by",
    "I'll come by", "I'll find out", "it all worked out", "I need to find out what I have",
    # a yes with the words that come with one
    "okay great", "sounds good", "alright then",
    # an answer after a discourse marker, and a marker after a request
    "actually, yes", "actually no", "no, that should do it", "I'll do it", "well, no thanks", "i want my balance actually", "actually, one more thing",
    # a tag that closes the clause before it, and objects that came first
    "okay, so long then", "right, I'll be off then", "bye then", "yep, something unrelated though",
    "are you open on sundays or no", "I have one more thing to ask", "how much money I still have",
    "when do you open then",
    "okay so long",
    # a question word's contraction is its verb
    "where's the nearest ATM", "how's my balance looking",
]
UNDECIDED = ["my card", "my balance", "checking account", "",
             # a long question whose verb the recogniser lost ("is" heard as "in")
             "how much in available for me to withdraw"]


@pytest.mark.parametrize("text", UNFINISHED)
def test_words_that_cannot_end_a_sentence_are_unfinished(text: str) -> None:
    """A function word, a filler, a verb still wanting its object, an opener, a greeting alone
    or a question word with no verb: the caller has more to say."""
    assert completeness(text) is Completeness.UNFINISHED


@pytest.mark.parametrize("text", COMPLETE)
def test_a_clause_ending_on_a_content_word_or_a_closed_answer_is_complete(text: str) -> None:
    """A verb and a content word at the end, or a whole short answer, is a finished sentence
    whether or not any dialplan expects it."""
    assert completeness(text) is Completeness.COMPLETE


@pytest.mark.parametrize("text", UNDECIDED)
def test_a_noun_phrase_alone_is_undecided(text: str) -> None:
    """"my card" may be a whole answer or the start of "my card was stolen"."""
    assert completeness(text) is Completeness.UNDECIDED


@pytest.mark.parametrize("text, bare", [
    ("yeah", True), ("Nope.", True), ("um no", True), ("oh yeah", True), ("okay", True), ("yes please", False),
    ("no thanks", False), ("yep, one more", False), ("um", False), ("", False), ("goodbye", False),
    ("okay great", True), ("yeah, sounds good", True), ("alright then", True), ("yeah sounds", False),
    ("then", False)])
def test_a_yes_or_a_no_alone_is_a_bare_answer(text: str, bare: bool) -> None:
    """A yes or a no in one word, fillers aside, is all a caller may say, or the first word of more."""
    assert is_bare_answer(text) is bare
