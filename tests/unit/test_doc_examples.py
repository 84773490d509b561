"""Every YAML example in README.md and docs/ goes through the real loader of what it shows, so a
documented shape can never be refused: server configs through ``load_config``, dialplans (whole,
or a flow, a route list or a few steps, completed into the smallest dialplan around them) through
the dialplan loader, simulation scripts and webhook mocks through theirs. A block that elides
part of itself with a ``...`` line is an excerpt and is only counted."""
from __future__ import annotations

import glob
import os
import re
import textwrap
from typing import Any

import pytest
import yaml

from agent.app.config import load_config
from agent.dialplan.model import parse_dialplan
from agent.integrations.webhook import MockWebhooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_KEYS = {"sip", "media", "speech", "metrics", "endpointing", "barge_in", "dialplans", "transfer_uri", "call_records",
               "recordings_dir", "variables", "http", "dialogue", "status", "admin", "recordings_retention"}
BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.M | re.S)
UNKNOWN_STEP = re.compile(r"refers to unknown step '([^']+)' in flow '([^']+)'")
UNKNOWN_VARIABLE = re.compile(r"unknown variable '([^']+)'; no step sets it")
UNKNOWN_FLOW = re.compile(r"refers to unknown flow '([^']+)'")
UNKNOWN_INTENT = re.compile(r"refers to unknown intent '([^']+)'")
COMPLETABLE = (UNKNOWN_STEP, UNKNOWN_VARIABLE, UNKNOWN_FLOW, UNKNOWN_INTENT)
ELISION = re.compile(r"^\s*\.\.\.\s*$|\[\.\.\.\]", re.M)


def examples() -> list[tuple[str, str]]:
    out = []
    for path in ["README.md", *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        full = os.path.join(ROOT, path)
        text = open(full, encoding="utf-8").read()
        for m in BLOCK.finditer(text):
            line = text[: m.start()].count("\n") + 2
            out.append((f"{os.path.relpath(full, ROOT)}:{line}", m.group(1)))
    return out


EXAMPLES = examples()


class _TaggedLoader(yaml.SafeLoader):
    """Reads ``!env NAME`` and ``!file PATH`` (agent/secrets.py) as ``{env: NAME}`` and ``{file:
    PATH}``, so the example's variables are set and its files made before the real loader runs."""


for _tag in ("env", "file"):
    _TaggedLoader.add_constructor(f"!{_tag}", lambda loader, node, key=_tag: {key: loader.construct_scalar(node)})


def is_excerpt(text: str) -> bool:
    return ELISION.search(text) is not None


PEM_KEYS = {"root_ca": "ca", "ca_bundle": "ca", "client_cert": "cert", "client_key": "key",
            "certificate": "cert", "private_key": "key", "ca_file": "ca"}


def provide_files_and_secrets(document: Any, directory: Any, monkeypatch: Any) -> dict[str, str]:
    """Create the certificate files and secrets a config example names, and set its variables.
    Returns the absolute paths it names (/etc/openclaw/...) with where their files were made
    instead (under *directory*), for the example's text to be pointed there."""
    from tests.tls_certs import TestCA

    issued: dict[str, str] = {}

    def pem(kind: str) -> bytes:
        if not issued:
            ca = TestCA(str(directory / "_pki"))
            leaf = ca.issue("agent", client=True)
            issued.update(ca=ca.pem, cert=leaf.cert, key=leaf.key)
        return open(issued[kind], "rb").read()

    moved: dict[str, str] = {}

    def write(named: str, data: bytes) -> None:
        target = directory / named.lstrip("/")
        if os.path.isabs(named):
            moved[named] = str(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in PEM_KEYS and isinstance(item, str):
                    write(item, pem(PEM_KEYS[key]))
                elif key == "env" and isinstance(item, str):
                    monkeypatch.setenv(item, "example-secret")
                elif key == "file" and isinstance(item, str):
                    write(item, b"example-secret\n")
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(document)
    return moved


def stub_flow() -> dict[str, Any]:
    return {"steps": [{"hangup": None}]}


def complete_dialplan(document: Any) -> dict[str, Any]:
    """The smallest dialplan around an example: steps go in flow main; missing routes, flows and
    version are added."""
    if isinstance(document, list):
        document = {"flows": {"main": {"steps": document}}}
    plan = dict(document)
    plan.setdefault("version", 1)
    flows = dict(plan.get("flows") or {})
    for route in plan.get("routes") or []:
        flows.setdefault(route["flow"], stub_flow())
    if not flows:
        flows["main"] = stub_flow()
    plan["flows"] = flows
    plan.setdefault("routes", [{"flow": next(iter(flows))}])
    return plan


def load_as_dialplan(document: Any, where: str) -> None:
    """Parse through the dialplan loader; what the example refers to but does not show is added
    (a step or flow that hangs up, a declared variable, an ask with the intents a condition
    names); any other error fails."""
    plan = complete_dialplan(document)
    for _ in range(4):
        text = yaml.safe_dump(plan, sort_keys=False)
        try:
            parse_dialplan(text, where)
            return
        except Exception as exc:  # noqa: BLE001 - the message decides
            lines = str(exc).splitlines()
            steps = {m for line in lines for m in UNKNOWN_STEP.findall(line)}
            variables = {m for line in lines for m in UNKNOWN_VARIABLE.findall(line)}
            flows = {m for line in lines for m in UNKNOWN_FLOW.findall(line)}
            intents = {m for line in lines for m in UNKNOWN_INTENT.findall(line)}
            others = [line for line in lines if not any(p.search(line) for p in COMPLETABLE)]
            if not (steps or variables or flows or intents) or others:
                raise AssertionError(f"{where}: the documented dialplan is refused:\n{exc}\n--- as loaded:\n{text}")
            for step, flow in steps:
                flow_steps = plan["flows"][flow]["steps"]
                if flow_steps == stub_flow()["steps"]:  # a stub flow: entered at that step only
                    flow_steps.clear()
                flow_steps.append({"id": step, "hangup": None})
            plan["variables"] = {**(plan.get("variables") or {}), **{name: "" for name in variables}}
            for flow in flows:
                plan["flows"][flow] = stub_flow()
            if intents:
                first = next(iter(plan["flows"].values()))
                first["steps"].insert(0, {"ask": {"prompt": "How can I help?",
                                                  "intents": {i: {"examples": [i]} for i in sorted(intents)}}})
    raise AssertionError(f"{where}: could not complete the example")


@pytest.mark.parametrize(("where", "text"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_documented_example_loads(where: str, text: str, tmp_path, monkeypatch) -> None:
    """The example is accepted by the loader of its kind (or is an excerpt marked with '...')."""
    if is_excerpt(text):
        return
    document = yaml.load(text, Loader=_TaggedLoader)
    if document is None:
        return  # a comment alone (an editor hint)
    if isinstance(document, dict) and "scenarios" in document:
        from agent.tools.simulation_script import load_script

        path = tmp_path / "script.yaml"
        path.write_text(text)
        script = load_script(str(path))
        assert script["scenarios"]
        return
    if isinstance(document, dict) and set(document) == {"webhooks"}:
        assert MockWebhooks.from_data(document, where).rules
        return
    if isinstance(document, dict) and set(document) <= CONFIG_KEYS and set(document) != {"variables"}:
        for named, made in provide_files_and_secrets(document, tmp_path, monkeypatch).items():
            text = text.replace(named, made)
        path = tmp_path / "config.yaml"
        path.write_text(text)
        load_config(str(path))
        return
    try:
        load_as_dialplan(document, where)
    except AssertionError as exc:
        # A list of alternative forms ("- goto: a", "- goto: {flow: b}") is not one flow: each
        # form must load on its own.
        if not isinstance(document, list) or "never reached" not in str(exc):
            raise
        for i, step in enumerate(document):
            load_as_dialplan([step], f"{where} (form {i + 1})")


def test_examples_are_found_and_excerpts_are_few() -> None:
    """The extraction sees the documented examples (a broken fence would hide them)."""
    assert len(EXAMPLES) >= 15
    assert any(w.startswith("docs/regions.md") for w, _ in EXAMPLES)
    excerpts = [w for w, t in EXAMPLES if is_excerpt(t)]
    assert len(excerpts) <= 3, excerpts


def test_the_completion_does_not_hide_errors() -> None:
    """A wrong step is still refused after completion (the helper only adds missing targets)."""
    with pytest.raises(AssertionError, match="refused"):
        load_as_dialplan(yaml.safe_load(textwrap.dedent("""\
            - say: {text: "Hi", volume: 11}
            """)), "example")
