"""Server config: defaults, overrides and precise errors."""
import os

import pytest

from agent.app.config import DEFAULT_DIALPLAN, load_config
from agent.yamlmarks import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_no_file_means_defaults():
    """Without a config: SIP on 0.0.0.0:5060, capacity 4, the demo dialplan, embedded speech."""
    c = load_config(None)
    assert (c.sip.host, c.sip.port, c.sip.capacity) == ("0.0.0.0", 5060, 4)
    assert c.dialplans == (DEFAULT_DIALPLAN,)
    assert c.speech.regions == ()
    assert c.metrics.port == 9464


def test_example_config_loads_and_resolves_dialplans_relative_to_itself():
    """The shipped example is valid and its dialplan path points at the demo line."""
    c = load_config(os.path.join(ROOT, "ops", "config.example.yaml"))
    assert os.path.realpath(c.dialplans[0]) == os.path.realpath(DEFAULT_DIALPLAN)


def test_every_error_is_reported_with_file_line_column(tmp_path):
    """Unknown keys, wrong types and bad values are all listed, in file order, with positions."""
    p = tmp_path / "c.yaml"
    p.write_text("sip:\n  port: \"x\"\n  capasity: 3\nmedia:\n  frame_ms: 15\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    lines = str(e.value).splitlines()
    assert lines[0] == f"{p}:2:9: config.sip.port: expected int, got a string"
    assert lines[1].startswith(f"{p}:3:3: unknown key 'capasity' in config.sip; expected one of: host, port")
    assert lines[2] == f"{p}:5:13: config.media.frame_ms: expected 10 or 20"


def test_registration_needs_registrar_and_aor(tmp_path):
    """A registration block without an AOR names what is missing."""
    p = tmp_path / "c.yaml"
    p.write_text("sip:\n  registration:\n    registrar: sip:trunk.example.net\n")
    with pytest.raises(ConfigError, match=r":3:5: config.sip.registration: expected both 'registrar' and 'aor'"):
        load_config(str(p))


def test_yaml_syntax_error_has_a_position(tmp_path):
    """Broken YAML reports where the parser stopped."""
    p = tmp_path / "c.yaml"
    p.write_text("sip:\n  port: [5060\n")
    with pytest.raises(ConfigError, match=rf"^{p}:3:1: YAML syntax error"):
        load_config(str(p))


def test_phrase_hints_are_on_unless_turned_off(tmp_path):
    """speech.phrase_hints defaults to true; a non-boolean is an error with its position."""
    assert load_config(None).speech.phrase_hints is True
    p = tmp_path / "c.yaml"
    p.write_text("speech:\n  phrase_hints: false\n")
    assert load_config(str(p)).speech.phrase_hints is False
    p.write_text("speech:\n  phrase_hints: 3\n")
    with pytest.raises(ConfigError, match=r":2:17: config.speech.phrase_hints: expected bool"):
        load_config(str(p))


@pytest.mark.parametrize("key, default, allowed, refused, expected", [
    ("first_prompt_delay_ms", 200, 0, -5, "expected 0 or more"),
    ("clock_thread_priority", 10, 0, 150, r"expected 0 \(off\) to 99"),
])
def test_media_integers_have_their_defaults_and_ranges(tmp_path, key, default, allowed, refused, expected):
    """The first prompt's delay (200 ms, not negative) and the clock thread's SCHED_FIFO priority
    (10; 0 is off, at most 99)."""
    assert getattr(load_config(None).media, key) == default
    p = tmp_path / "c.yaml"
    p.write_text(f"media:\n  {key}: {allowed}\n")
    assert getattr(load_config(str(p)).media, key) == allowed
    p.write_text(f"media:\n  {key}: {refused}\n")
    with pytest.raises(ConfigError, match=rf":2:{len(key) + 5}: config.media.{key}: {expected}"):
        load_config(str(p))


def test_jitter_buffer_is_capped_at_40_ms_unless_configured(tmp_path):
    """The cap holds by default and when other jitter buffer keys are set; -1 gives pjmedia's own."""
    assert load_config(None).media.jb_max_ms == 40
    p = tmp_path / "c.yaml"
    p.write_text("media:\n  jitter_buffer:\n    init_ms: 0\n")
    m = load_config(str(p)).media
    assert (m.jb_init_ms, m.jb_max_ms) == (0, 40)
    p.write_text("media:\n  jitter_buffer:\n    max_ms: -1\n")
    assert load_config(str(p)).media.jb_max_ms == -1


@pytest.mark.parametrize("key, default, bad", [("finished_silence_ms", 600, 0),
                                               ("sentence_end_silence_ms", 250, -5)])
def test_a_turns_silence_is_configurable_and_checked_at_its_line(tmp_path, key, default, bad):
    """endpointing.finished_silence_ms (600) and sentence_end_silence_ms (250; the endpointer's
    defaults too) are read from the config; a value under 1 is refused at its line."""
    from agent.call.endpointer import EndpointerConfig
    assert getattr(load_config(None).endpointing, key) == getattr(EndpointerConfig, key) == default
    p = tmp_path / "c.yaml"
    p.write_text(f"endpointing:\n  {key}: 450\n")
    assert getattr(load_config(str(p)).endpointing, key) == 450
    p.write_text(f"endpointing:\n  {key}: {bad}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert str(e.value).startswith(f"{p}:2:{len(key) + 5}: config.endpointing.{key}")


def test_confident_silence_is_configurable_and_its_confidence_is_a_fraction(tmp_path):
    """endpointing.confident_silence_ms (400) and confident_min_confidence (0.6) are read from the
    config and reach the endpointer's; a confidence above 1 is refused at its line."""
    from agent.call.endpointer import EndpointerConfig
    default = load_config(None).endpointing
    assert (default.confident_silence_ms, default.confident_min_confidence) == (400, 0.6)
    assert (EndpointerConfig.confident_silence_ms, EndpointerConfig.confident_min_confidence) == (400, 0.6)
    p = tmp_path / "c.yaml"
    p.write_text("endpointing:\n  confident_silence_ms: 450\n  confident_min_confidence: 0.75\n")
    loaded = load_config(str(p)).endpointing
    assert (loaded.confident_silence_ms, loaded.confident_min_confidence) == (450, 0.75)
    p.write_text("endpointing:\n  answer_silence_ms: 300\n")
    assert load_config(str(p)).endpointing.answer_silence_ms == 300
    assert load_config(None).endpointing.answer_silence_ms == EndpointerConfig.answer_silence_ms == 500
    assert load_config(None).endpointing.yes_no_answer_silence_ms == EndpointerConfig.yes_no_answer_silence_ms == 250
    p.write_text("endpointing:\n  confident_min_confidence: 1.5\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert str(e.value).startswith(f"{p}:2:29: config.endpointing.confident_min_confidence")
    assert "expected a number from 0 to 1" in str(e.value)


def test_punctuation_is_asked_of_the_embedded_server_unless_configured(tmp_path):
    """speech.punctuation: auto (the default) asks the embedded speech server to punctuate and
    hosted regions not; on and off say so; anything else is refused at its line."""
    assert load_config(None).speech.asks_punctuation
    p = tmp_path / "c.yaml"
    hosted = "speech:\n  regions:\n    - {name: east, uri: 'riva.example:50051'}\n"
    p.write_text(hosted)
    assert not load_config(str(p)).speech.asks_punctuation
    p.write_text(hosted + "  punctuation: on\n")
    assert load_config(str(p)).speech.asks_punctuation
    p.write_text("speech:\n  punctuation: off\n")
    assert not load_config(str(p)).speech.asks_punctuation
    p.write_text("speech:\n  punctuation: yes please\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert str(e.value).startswith(f"{p}:2:16: config.speech.punctuation") and "expected auto, on or off" in str(e.value)


def test_barge_in_rules_are_configurable_and_checked_at_their_line(tmp_path):
    """barge_in takes every BargeInConfig field; a wrong type, a confidence above 1, an unknown key
    and two settings that contradict each other are refused with file:line and what was expected."""
    from agent.call.bargein import BargeInConfig
    assert load_config(None).barge_in == BargeInConfig()
    p = tmp_path / "c.yaml"
    p.write_text("barge_in:\n  interruption_min_ms: 1500\n  sentence_min_confidence: 0.5\n  duck_after_ms: 0\n"
                 "  word_duck_ms: 0\n")
    b = load_config(str(p)).barge_in
    assert (b.interruption_min_ms, b.sentence_min_confidence, b.duck_after_ms, b.word_duck_ms) == (1500, 0.5, 0, 0)
    assert b.sentence_min_ms == BargeInConfig().sentence_min_ms
    for text, where, expected in (
            ("barge_in:\n  sentence_min_confidence: 1.5\n", "2:28", "expected a number from 0 to 1"),
            ("barge_in:\n  tail_ms: soon\n", "2:12", "expected int, got a string"),
            ("barge_in:\n  sentence_min_words: 0\n", "2:23", "expected a positive integer"),
            ("barge_in:\n  duck_ms: 10\n", "2:3", "unknown key 'duck_ms'"),
            ("barge_in:\n  interruption_min_ms: 500\n", "2:24",
             "acknowledgement_max_ms (700) must not exceed config.barge_in.interruption_min_ms (500)")):
        p.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_config(str(p))
        assert str(e.value).startswith(f"{p}:{where}: "), str(e.value)
        assert "config.barge_in" in str(e.value) and expected in str(e.value)


def test_general_model_alongside_hints_is_off_unless_configured(tmp_path):
    """speech.embedded_general_alongside_hints is false by default and read as a boolean."""
    assert load_config(None).speech.embedded_general_alongside_hints is False
    p = tmp_path / "c.yaml"
    p.write_text("speech:\n  embedded_general_alongside_hints: true\n")
    assert load_config(str(p)).speech.embedded_general_alongside_hints is True


def test_reconcile_interval_defaults_to_5_s_and_is_bounded(tmp_path):
    """sip.reconcile_interval_ms: 5000 unless set; below 100 ms or above 5 minutes is an error with its position."""
    assert load_config(None).sip.reconcile_interval_ms == 5000
    p = tmp_path / "c.yaml"
    p.write_text("sip:\n  reconcile_interval_ms: 1000\n")
    assert load_config(str(p)).sip.reconcile_interval_ms == 1000
    p.write_text("sip:\n  reconcile_interval_ms: 10\n")
    with pytest.raises(ConfigError, match=r":2:26: config.sip.reconcile_interval_ms: expected 100 to 300000 ms"):
        load_config(str(p))



def test_embedded_open_speech_defaults_to_whisper_and_is_checked(tmp_path) -> None:
    """speech.embedded_open_speech: whisper by default; general when the older
    embedded_general_alongside_hints is true; anything else is an error at its line."""
    assert load_config(None).speech.embedded_open_speech == "whisper"
    p = tmp_path / "c.yaml"
    p.write_text("speech:\n  embedded_general_alongside_hints: true\n")
    assert load_config(str(p)).speech.embedded_open_speech == "general"
    p.write_text("speech:\n  embedded_open_speech: hints\n")
    assert load_config(str(p)).speech.embedded_open_speech == "hints"
    p.write_text("speech:\n  embedded_open_speech: vosk\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(p))
    assert "c.yaml:2" in str(err.value) and "expected whisper, general or hints" in str(err.value)
    p.write_text("speech:\n  embedded_general_alongside_hints: true\n  embedded_open_speech: whisper\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(p))
    assert "expected general with embedded_general_alongside_hints: true" in str(err.value)


def test_speech_alternatives_default_to_four_and_are_bounded(tmp_path) -> None:
    """speech.alternatives: 4 readings unless set; 1 to 5, else an error at its line."""
    assert load_config(None).speech.alternatives == 4
    p = tmp_path / "c.yaml"
    p.write_text("speech:\n  alternatives: 1\n")
    assert load_config(str(p)).speech.alternatives == 1
    for bad in ("0", "6"):
        p.write_text(f"speech:\n  alternatives: {bad}\n")
        with pytest.raises(ConfigError) as err:
            load_config(str(p))
        assert "c.yaml:2" in str(err.value) and "config.speech.alternatives: expected 1 to 5" in str(err.value)
