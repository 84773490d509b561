"""Config of TLS for HTTP requests (``http:``): paths relative to the config file, checked at load,
errors at file:line."""
import pytest

from agent.app.config import load_config
from agent.integrations.tls import TlsSettings
from agent.yamlmarks import ConfigError
from tests.tls_certs import TestCA


def test_http_tls_paths_are_resolved_and_checked(tmp_path):
    """A CA bundle and a client certificate named relative to the config file are loaded."""
    ca = TestCA(str(tmp_path / "pki"))
    client = ca.issue("agent", client=True)
    p = tmp_path / "c.yaml"
    p.write_text(f"http:\n  ca_bundle: pki/{ca.pem.rsplit('/', 1)[1]}\n  client_cert: {client.cert}\n"
                 f"  client_key: {client.key}\n")
    c = load_config(str(p))
    assert c.http == TlsSettings(ca_bundle=ca.pem, client_cert=client.cert, client_key=client.key)


def test_default_is_the_system_trust_store():
    """No ``http:`` section: no bundle, no client certificate (the system's trust store verifies)."""
    assert load_config(None).http == TlsSettings()


def test_bad_tls_files_are_config_errors_with_positions(tmp_path):
    """A missing CA file, a file that is no certificate, a key without a certificate and an
    unknown key are each reported at their line."""
    (tmp_path / "junk.pem").write_text("hello\n")
    p = tmp_path / "c.yaml"
    p.write_text("http:\n  ca_bundle: missing.pem\n  client_key: junk.pem\n  verify: false\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"{p}:2:14: config.http.ca_bundle: expected a readable PEM file: ")
    assert "No such file" in lines[0]
    assert any(line.startswith(f"{p}:3:15: config.http.client_key: expected a readable PEM file: ")
               and "holds no PRIVATE KEY" in line for line in lines), lines
    assert any(line.startswith(f"{p}:4:3: unknown key 'verify' in config.http") for line in lines), lines
