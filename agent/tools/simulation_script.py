"""Scripted dialplan simulations for CI: ``openclaw-voice dialplan simulate --script``.

A YAML file of scenarios (turns with expected replies, see ``docs/dialplans.md``) is checked
for shape on load, each scenario runs as one :class:`~agent.tools.simulated_call.SimulatedCall`,
and :func:`run_script` prints PASS/FAIL per scenario with what was expected and what the agent
said.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TextIO

import yaml

from agent.dialplan.model import Dialplan, DialplanError, load_dialplans
from agent.integrations.webhook import MockWebhooks
from agent.tools.simulated_call import RealWebhooks, SimulatedCall, WebhookExecutor, no_webhooks, parse_now


class ScriptError(ValueError):
    """A simulation script is malformed."""


_SCRIPT_KEYS = ("dialplan", "webhooks", "variables", "now", "number", "caller", "scenarios")
_SCENARIO_KEYS = (
    "name", "number", "caller", "now", "webhooks", "variables", "transfer", "model_reply",
    "turns", "end", "expect_variables", "unrouted",
)
_TURN_KEYS = ("say", "dtmf", "silence", "expect", "expect_not", "expect_steps", "transfer",
              "model_reply")
_END_KEYS = ("reason", "transferred_to")


@dataclass
class ScenarioResult:
    """How one scenario went: *failures* is empty when it passed."""

    name: str
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every expectation held."""
        return not self.failures


@dataclass(frozen=True)
class _Expectation:
    text: str
    regex: bool

    def found_in(self, said: str) -> bool:
        if self.regex:
            return re.search(self.text, said, re.IGNORECASE | re.DOTALL) is not None
        return self.text.lower() in said.lower()

    def __str__(self) -> str:
        return f"/{self.text}/ (regex)" if self.regex else repr(self.text)


def _expectations(value: Any, where: str) -> list[_Expectation]:
    items = value if isinstance(value, list) else [value]
    out: list[_Expectation] = []
    for item in items:
        if isinstance(item, Mapping) and set(item) == {"regex"}:
            try:
                re.compile(str(item["regex"]))
            except re.error as exc:
                raise ScriptError(f"{where}: bad regex {item['regex']!r}: {exc}")
            out.append(_Expectation(str(item["regex"]), True))
        elif isinstance(item, (str, int, float)) and not isinstance(item, bool):
            out.append(_Expectation(str(item), False))
        else:
            raise ScriptError(f"{where}: expected text or {{regex: ...}}, found {item!r}")
    return out


def _check_keys(data: Any, allowed: Sequence[str], where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where}: expected a mapping, found {type(data).__name__}")
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise ScriptError(f"{where}: unknown key {unknown[0]!r}; expected one of: {', '.join(allowed)}")
    return data


def load_script(path: str) -> Mapping[str, Any]:
    """Read and check the shape of a simulation script."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read: {exc.strerror}")
    except yaml.YAMLError as exc:
        raise ScriptError(f"{path}: YAML error: {exc}")
    script = _check_keys(data, _SCRIPT_KEYS, path)
    scenarios = script.get("scenarios")
    if not isinstance(scenarios, list) or not scenarios:
        raise ScriptError(f"{path}: expected 'scenarios', a list of at least one scenario")
    for i, scenario in enumerate(scenarios, 1):
        where = f"{path}: scenario {i}"
        scenario = _check_keys(scenario, _SCENARIO_KEYS, where)
        turns = scenario.get("turns", [])
        if not isinstance(turns, list):
            raise ScriptError(f"{where}: 'turns' must be a list")
        for j, turn in enumerate(turns, 1):
            turn = _check_keys(turn, _TURN_KEYS, f"{where}, turn {j}")
            inputs = [k for k in ("say", "dtmf", "silence") if k in turn]
            if len(inputs) > 1 or (j > 1 and not inputs):
                raise ScriptError(f"{where}, turn {j}: expected one of 'say', 'dtmf' or 'silence' "
                                  "(only the first turn, the greeting, has none)")
            for key in ("expect", "expect_not"):
                if key in turn:
                    _expectations(turn[key], f"{where}, turn {j}")
        if "end" in scenario:
            _check_keys(scenario["end"], _END_KEYS, f"{where}: end")
    return script


def _mocks(value: Any, base: str) -> WebhookExecutor | None:
    if value is None:
        return None
    if isinstance(value, str):
        return MockWebhooks.from_file(os.path.join(base, value))
    return MockWebhooks.from_data(value, "inline webhooks")


def run_script(
    paths: Sequence[str],
    script_path: str,
    stdout: TextIO = sys.stdout,
    webhooks: str | None = None,
    now: str | None = None,
    variables: Mapping[str, str] | None = None,
) -> int:
    """Run every scenario of *script_path* against the dialplan *paths*.

    *webhooks*: ``real``, a mock file (overrides the script's), or None (the script's mocks, or
    none). Prints one PASS/FAIL line per scenario and the details of each failure; returns 0
    when all pass, 1 when one fails, 2 when the script or dialplan cannot be loaded.
    """
    try:
        script = load_script(script_path)
        base = os.path.dirname(os.path.abspath(script_path))
        if not paths:
            if "dialplan" not in script:
                raise ScriptError(f"{script_path}: no dialplan given (PATH or 'dialplan:')")
            given = script["dialplan"]
            paths = [os.path.join(base, p) for p in (given if isinstance(given, list) else [given])]
        dialplan = load_dialplans(list(paths))
        default_mocks = _mocks(script.get("webhooks"), base)
        real: RealWebhooks | None = None
        if webhooks == "real":
            real = RealWebhooks()
            default_mocks = real
        elif webhooks is not None:
            default_mocks = MockWebhooks.from_file(webhooks)
    except DialplanError as exc:
        print(str(exc), file=stdout)
        return 2
    except (ScriptError, ValueError, OSError) as exc:
        print(f"simulate: {exc}", file=stdout)
        return 2
    results: list[ScenarioResult] = []
    try:
        for i, scenario in enumerate(script["scenarios"], 1):
            try:
                results.append(_run_scenario(dialplan, script, scenario, i, base, default_mocks,
                                             webhooks is not None, now, variables or {}))
            except (ScriptError, ValueError, OSError) as exc:
                results.append(ScenarioResult(str(scenario.get("name", f"scenario {i}")),
                                              [str(exc)]))
    finally:
        if real is not None:
            real.close()
    for result in results:
        print(f"{'PASS' if result.passed else 'FAIL'} {result.name}", file=stdout)
        for failure in result.failures:
            print("  " + failure.replace("\n", "\n  "), file=stdout)
    failed = sum(1 for r in results if not r.passed)
    print(f"{len(results) - failed} passed, {failed} failed", file=stdout)
    return 1 if failed else 0


def _run_scenario(
    dialplan: Dialplan,
    script: Mapping[str, Any],
    scenario: Mapping[str, Any],
    index: int,
    base: str,
    default_mocks: WebhookExecutor | None,
    mocks_forced: bool,
    now_override: str | None,
    extra_variables: Mapping[str, str],
) -> ScenarioResult:
    name = str(scenario.get("name", f"scenario {index}"))
    result = ScenarioResult(name)
    mocks = default_mocks
    if "webhooks" in scenario and not mocks_forced:
        mocks = _mocks(scenario["webhooks"], base)
    now_text = now_override or scenario.get("now") or script.get("now")
    values = {str(k): str(v) for k, v in (script.get("variables") or {}).items()}
    values.update({str(k): str(v) for k, v in (scenario.get("variables") or {}).items()})
    values.update(extra_variables)
    call = SimulatedCall(
        dialplan,
        number=str(scenario.get("number", script.get("number", "1000"))),
        caller=str(scenario.get("caller", script.get("caller", "+15550000000"))),
        now=parse_now(str(now_text)) if now_text else None,
        webhooks=mocks or no_webhooks,
        variables=values,
        transfer=str(scenario.get("transfer", "succeed")),
        model_reply=scenario.get("model_reply"),
    )
    transcript: list[str] = []
    if scenario.get("unrouted"):
        call.start()
        if call.routed:
            result.failures.append(f"expected no route for {call.number}, but flow {call.flow} took it")
        return result
    turns = list(scenario.get("turns") or [{}])
    for number, turn in enumerate(turns, 1):
        if "transfer" in turn:
            call.transfer_outcome = str(turn["transfer"])
        if "model_reply" in turn:
            call.model_reply = turn["model_reply"]
        if number == 1 and not any(k in turn for k in ("say", "dtmf", "silence")):
            what, lines = "the greeting", call.start()
        else:
            if number == 1:
                transcript.extend(o.render() for o in call.start())
            if call.ended:
                result.failures.append(
                    f"turn {number}: the call had already ended ({call.end_reason}) before this "
                    f"turn\n{_show(transcript)}"
                )
                break
            if "say" in turn:
                what, lines = f"say {turn['say']!r}", call.say(str(turn["say"]))
            elif "dtmf" in turn:
                what, lines = f"dtmf {turn['dtmf']}", call.dtmf(str(turn["dtmf"]))
            else:
                what, lines = "silence", call.silence()
        transcript.append(f"caller> {what}")
        transcript.extend(line.render() for line in lines)
        said = "\n".join(line.text for line in lines if line.kind == "say")
        steps = list(call.steps_run)
        where = f"turn {number} ({what})"
        for expectation in _expectations(turn.get("expect", []), where):
            if not expectation.found_in(said):
                result.failures.append(
                    f"{where}: expected the agent to say {expectation}\n"
                    f"  the agent said:\n{_quote(said)}"
                )
        for expectation in _expectations(turn.get("expect_not", []), where):
            if expectation.found_in(said):
                result.failures.append(
                    f"{where}: expected the agent NOT to say {expectation}\n"
                    f"  the agent said:\n{_quote(said)}"
                )
        for step in turn.get("expect_steps", []) or []:
            wanted = str(step)
            if not any(s == wanted or s.split("/", 1)[1] == wanted for s in steps):
                ran = " -> ".join(steps) or "(nothing)"
                result.failures.append(f"{where}: expected step {wanted!r} to run; ran: {ran}")
    end = scenario.get("end")
    if end is not None:
        if "reason" in end and str(end["reason"]) != str(call.end_reason):
            result.failures.append(
                f"end: expected the call to end with {end['reason']!r}, but it "
                + (f"ended with {call.end_reason!r}" if call.end_reason else "had not ended")
                + f"\n{_show(transcript)}"
            )
        if "transferred_to" in end and str(end["transferred_to"]) != str(call.transferred_to):
            result.failures.append(
                f"end: expected a transfer to {end['transferred_to']!r}, got {call.transferred_to!r}"
            )
    for variable, expected in (scenario.get("expect_variables") or {}).items():
        actual = call.variables().get(str(variable))
        if actual != str(expected):
            result.failures.append(
                f"variables: expected {variable} = {str(expected)!r}, found {actual!r}"
            )
    return result


def _quote(text: str) -> str:
    return "\n".join(f"    | {line}" for line in (text.splitlines() or ["(nothing)"]))


def _show(transcript: Sequence[str]) -> str:
    return "  the call so far:\n" + "\n".join(f"    {line}" for line in transcript[-12:])
