"""Secrets in config and dialplans (``!env``/``!file``) and their redaction from logs and records."""
from __future__ import annotations

import os
import textwrap

import pytest

from agent.app.config import load_config
from agent.dialplan.loader import load_dialplans
from agent.secrets import MASK, redact, redact_headers, redact_log_event, redact_url, redact_value
from agent.yamlmarks import ConfigError


def _write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))
    return path


def test_env_and_file_secrets_fill_config_values(tmp_path, monkeypatch) -> None:
    """A trunk password from the environment and a dialplan variable from a file reach the config."""
    monkeypatch.setenv("OC_TEST_TRUNK_PW", "s3cret-trunk-pw")
    _write(str(tmp_path / "token"), "tok-from-file-123\n")
    path = _write(str(tmp_path / "c.yaml"), """\
        sip:
          registration:
            registrar: sip:registrar.example
            aor: sip:agent@registrar.example
            username: agent
            password: !env OC_TEST_TRUNK_PW
        variables:
          crm_token: !file token
        """)
    config = load_config(path)
    assert config.sip.registration is not None
    assert config.sip.registration.password == "s3cret-trunk-pw"
    assert dict(config.variables)["crm_token"] == "tok-from-file-123"


def test_missing_variable_is_an_error_at_its_line_without_any_value(tmp_path, monkeypatch) -> None:
    """The error names file:line and the variable; it cannot print a value it does not have."""
    monkeypatch.delenv("OC_TEST_ABSENT", raising=False)
    path = _write(str(tmp_path / "c.yaml"), "variables:\n  a: plain\n  key: !env OC_TEST_ABSENT\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert f"{path}:3:8: environment variable OC_TEST_ABSENT is not set" in str(e.value)


def test_missing_file_is_an_error_naming_the_file(tmp_path) -> None:
    missing = str(tmp_path / "nope.key")
    path = _write(str(tmp_path / "c.yaml"), f"variables:\n  key: !file {missing}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert f"{path}:2:8: cannot read secret file {missing}" in str(e.value)


def test_dialplan_header_from_the_environment(tmp_path, monkeypatch) -> None:
    """A webhook header of a dialplan can be a secret too; a missing one is a dialplan error at its line."""
    monkeypatch.setenv("OC_TEST_CRM", "Bearer crm-token-xyz")
    text = """\
        version: 1
        routes:
          - flow: main
        flows:
          main:
            steps:
              - id: lookup
                webhook:
                  url: https://crm.example/lookup?key=abc
                  headers:
                    Authorization: !env OC_TEST_CRM
                  save_as: crm
                  on_failure: bye
              - id: bye
                hangup:
        """
    path = _write(str(tmp_path / "d.yaml"), text)
    plan = load_dialplans([path])
    step = plan.flows["main"].steps[0]
    assert dict(step.headers)["Authorization"].source == "Bearer crm-token-xyz"
    monkeypatch.delenv("OC_TEST_CRM")
    with pytest.raises(Exception) as e:
        load_dialplans([path])
    assert "d.yaml:11:28" in str(e.value) and "OC_TEST_CRM is not set" in str(e.value)


def test_redact_url_drops_query_user_info_and_fragment() -> None:
    assert redact_url("https://u:pw@crm.example:8443/a/b?key=zz&x=1#frag") == \
        f"https://{MASK}@crm.example:8443/a/b?{MASK}#{MASK}"
    assert redact_url("http://host/path") == "http://host/path"


def test_redact_masks_urls_in_text_and_remembered_secrets(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OC_TEST_PLANTED", "planted-secret-0451")
    path = _write(str(tmp_path / "c.yaml"), "variables:\n  key: !env OC_TEST_PLANTED\n")
    load_config(path)
    text = "failed: GET https://api.example/v1?token=abc (auth planted-secret-0451)"
    out = redact(text)
    assert "token=abc" not in out and "planted-secret-0451" not in out
    assert out == f"failed: GET https://api.example/v1?{MASK} (auth {MASK})"


def test_redact_headers_masks_credentials() -> None:
    assert redact_headers([("Authorization", "Bearer x"), ("X-Trace", "t1"), ("Cookie", "a=b")]) == \
        [("Authorization", MASK), ("X-Trace", "t1"), ("Cookie", MASK)]


def test_redact_value_and_log_events_walk_nested_values() -> None:
    record = {"dialogue": [{"text": "POST https://h/p?secret=1"}], "n": 3}
    assert redact_value(record) == {"dialogue": [{"text": f"POST https://h/p?{MASK}"}], "n": 3}
    event = {"log_format": "webhook {url}", "url": "https://h/x?q=1", "log_namespace": "x", "n": 1}
    assert redact_log_event(event)["url"] == f"https://h/x?{MASK}"
    assert event["url"] == "https://h/x?q=1", "the original event is left as it was"


def test_a_secret_in_the_wrong_place_is_not_quoted_in_the_error(tmp_path, monkeypatch) -> None:
    """A config error about a value read from !env names the place, not the value."""
    monkeypatch.setenv("OC_TEST_MISPLACED", "misplaced-secret-77")
    path = _write(str(tmp_path / "c.yaml"), "sip:\n  codecs: [!env OC_TEST_MISPLACED]\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "unknown codec" in str(e.value) and "misplaced-secret-77" not in str(e.value)


def test_plain_trunk_password_and_admin_token_are_masked_too(tmp_path) -> None:
    """Secrets written in the YAML itself (not through !env/!file) are still secrets."""
    path = _write(str(tmp_path / "c.yaml"), """\
        sip:
          registration: {registrar: "sip:r.example", aor: "sip:a@r.example", password: plain-trunk-pw-99}
        admin: {token: plain-admin-token-42}
        """)
    load_config(path)
    assert redact("pw plain-trunk-pw-99 tok plain-admin-token-42") == f"pw {MASK} tok {MASK}"
