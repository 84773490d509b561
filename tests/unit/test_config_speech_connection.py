"""Config of a region's connection: use_ssl, root CA, client certificate and metadata from secrets
(a plain value, an environment variable or a file), checked at load with file:line errors."""
import pytest

from agent.app.config import load_config
from agent.speech.api import SpeechConnection
from agent.yamlmarks import ConfigError
from tests.tls_certs import TestCA


def write(tmp_path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_connection_settings_and_secrets_are_resolved(tmp_path, monkeypatch):
    """Root CA and client certificate paths are resolved against the config file; metadata values
    come from the environment (with a prefix), a file (stripped) or the config itself."""
    ca = TestCA(str(tmp_path))
    client = ca.issue("agent", client=True)
    (tmp_path / "fid").write_text("function-1234\n")
    monkeypatch.setenv("NGC_API_KEY", "nvapi-abc")
    p = write(tmp_path, f"""\
speech:
  regions:
    - name: hosted
      uri: grpc.nvcf.example:443
      use_ssl: true
      root_ca: {ca.pem.rsplit('/', 1)[1]}
      client_cert: {client.cert}
      client_key: {client.key}
      metadata:
        authorization: {{env: NGC_API_KEY, prefix: "Bearer "}}
        function-id: {{file: fid}}
        x-tenant: acme
""")
    (region,) = load_config(str(p)).speech.regions
    assert region.connection == SpeechConnection(
        use_ssl=True, root_ca=ca.pem, client_cert=client.cert, client_key=client.key,
        metadata=(("authorization", "Bearer nvapi-abc"), ("function-id", "function-1234"), ("x-tenant", "acme")))
    assert "nvapi-abc" not in repr(region)


def test_bad_secrets_and_files_are_reported_at_their_lines(tmp_path, monkeypatch):
    """An unset variable, a missing file, an invalid metadata key, a certificate without its key
    and a CA file that holds no certificate are each an error at their position."""
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    (tmp_path / "junk.pem").write_text("nothing\n")
    p = write(tmp_path, """\
speech:
  regions:
    - name: hosted
      uri: a:443
      root_ca: junk.pem
      client_cert: junk.pem
      metadata:
        authorization: {env: NOT_SET_ANYWHERE}
        function-id: {file: missing.txt}
        Bad Key: x
        x-both: {env: A, file: b}
""")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    text = str(e.value)
    assert f"{p}:5:16: config.speech.regions[0].root_ca: expected a readable PEM file: " in text
    assert "holds no CERTIFICATE" in text
    assert "config.speech.regions[0]: expected both client_cert and client_key" in text
    assert f"{p}:8:30: config.speech.regions[0].metadata.authorization.env: environment variable " \
           "NOT_SET_ANYWHERE is not set" in text
    assert f"{p}:9:29: config.speech.regions[0].metadata.function-id.file: cannot read" in text
    assert "'Bad Key' is not a gRPC metadata key" in text
    assert "metadata.x-both: expected exactly one of 'env' or 'file'" in text


def test_one_endpoint_in_two_regions_needs_one_connection(tmp_path):
    """The same address in two regions with different metadata is refused (a client per address)."""
    p = write(tmp_path, """\
speech:
  regions:
    - {name: a, uri: "h:1", metadata: {authorization: x}}
    - {name: b, uri: "h:1", metadata: {authorization: y}}
""")
    with pytest.raises(ConfigError, match=r"endpoint h:1 is also in region 'a' with other TLS or metadata"):
        load_config(str(p))
