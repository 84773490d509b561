"""Start-up work that keeps intent matching off the call's path."""
from pathlib import Path

from agent.app.server import prepare_intent_matchers
from agent.dialplan import semantic
from agent.dialplan.asks import _matcher
from agent.dialplan.model import AskStep, load_dialplans

DIALPLANS = Path(__file__).resolve().parents[2] / "dialplans"


def test_every_ask_of_the_loaded_dialplans_has_its_matcher_built_before_calls():
    """prepare_intent_matchers loads the sentence encoder and builds the matcher of every ask
    with intents, so a call's first transcript finds them cached instead of paying for them."""
    dialplan = load_dialplans([str(DIALPLANS / "default.yaml"), str(DIALPLANS / "bank.yaml")])
    asks = [s for f in dialplan.flows.values() for s in f.steps if isinstance(s, AskStep)]
    assert prepare_intent_matchers(dialplan) == len(asks) > 0
    assert semantic.shared_encoder() is not None
    before = _matcher.cache_info()
    for ask in asks:
        if ask.intents:
            _matcher(ask)
    after = _matcher.cache_info()
    assert after.misses == before.misses and after.hits > before.hits
