"""``speech.routing`` sections (probe, health, selection, failover) as docs/regions.md shows them."""
import pytest

from agent.app.config import load_config
from agent.yamlmarks import ConfigError


def test_sections_set_the_policies_and_shorthands_still_work(tmp_path):
    """Section keys reach the prober, health, selection and failover settings; the flat
    shorthands apply where a section does not say otherwise."""
    p = tmp_path / "c.yaml"
    p.write_text("""\
speech:
  routing:
    stall_timeout_ms: 300
    hysteresis_ms: 25
    probe: {interval_ms: 100, watch: false, discovery_interval_s: 5}
    health: {eject_after_failures: 5, rtt_alpha: 0.5}
    selection: {home_bonus_ms: 40, retry_after_full_s: 1}
    failover: {max_failovers: 1}
""")
    r = load_config(str(p)).speech.routing
    assert (r.probe.interval_ms, r.probe.watch, r.probe.discovery_interval_s) == (100, False, 5.0)
    assert r.probe_interval_ms == 100 and r.failover.probe_interval_ms == 100
    assert (r.health.eject_after_failures, r.health.rtt_alpha) == (5, 0.5)
    assert (r.selection.home_bonus_ms, r.selection.retry_after_full_s, r.selection.hysteresis_ms) == (40.0, 1, 25.0)
    assert (r.failover.max_failovers, r.failover.stall_timeout_ms) == (1, 300)


def test_section_errors_name_the_key_and_what_was_expected(tmp_path):
    """Unknown keys and wrong types in a section are errors at their position."""
    p = tmp_path / "c.yaml"
    p.write_text("speech:\n  routing:\n    health: {eject_after: 3, rtt_alpha: fast}\n    probe: 5\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    text = str(e.value)
    assert f"{p}:3:14: unknown key 'eject_after' in config.speech.routing.health; expected one of: rtt_alpha" in text
    assert f"{p}:3:41: config.speech.routing.health.rtt_alpha: expected float, got a string" in text
    assert f"{p}:4:12: config.speech.routing.probe: expected a mapping, got an integer" in text
