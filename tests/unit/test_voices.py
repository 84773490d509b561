"""Voice names: Riva's names map to the embedded engine's flite voices; flite names keep working."""
import pytest

from agent.speech.server.rpc import ConfigError
from agent.speech.server.tts import resolve_voice
from agent.speech.voices import DEFAULT_VOICE, flite_voice


@pytest.mark.parametrize(("name", "flite"), [
    ("English-US.Male-1", "kal16"), ("English-US.Male-2", "rms"), ("English-US.Male-3", "awb"),
    ("English-US.Female-1", "slt"), ("English-US-Female-1", "slt"), ("English-US.Female-Calm", "slt"),
    ("English-US.Male-Happy", "kal16"), ("kal16", "kal16"), ("awb", "awb"), ("", "kal16"),
])
def test_riva_and_flite_names_map_to_flite_voices(name: str, flite: str) -> None:
    """Each Riva voice name gets its flite voice (variants by gender); old flite names stay."""
    assert flite_voice(name) == flite
    assert resolve_voice(name) == flite


def test_unknown_voice_is_refused_with_the_names_to_use() -> None:
    """A voice of another language is no voice of the embedded engine: the error lists the Riva names."""
    assert flite_voice("German-DE.Male-1") is None
    with pytest.raises(ConfigError, match=r"'German-DE.Male-1' is not available; use one of English-US.Male-1"):
        resolve_voice("German-DE.Male-1")


def test_default_voice_is_a_riva_name() -> None:
    """Prompts are spoken by a Riva voice name unless the dialplan or config says otherwise."""
    assert DEFAULT_VOICE == "English-US.Male-1"
