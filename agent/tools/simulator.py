"""Try a dialplan without a phone: ``openclaw-voice dialplan simulate``.

:class:`SimulatedCall` runs one call through the real dialogue engine
(:class:`~agent.dialplan.engine.DialogueSession`) and carries out its actions the way the call session
would, minus audio: prompts become text, webhooks are called for real or answered from a mock
file (:class:`~agent.integrations.webhook.MockWebhooks`), transfers, recordings and model replies are
simulated with configurable outcomes. Each call returns :class:`Output` lines: what the agent
says and a ``[flow/step]`` trace of what ran.

Two front ends use it:

* :func:`run_interactive`: the user types what the caller says; ``#1`` (or ``#1234#``) presses
  keys, an empty line is silence (a no-input timeout), ``/vars`` shows the variables, ``/quit``
  ends.
* :func:`run_script`: a YAML file of scenarios (turns with expected replies, see
  ``docs/dialplans.md``) for CI; returns non-zero when a reply does not match, printing what was
  expected and what the agent said.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

import yaml

from agent.dialplan.engine import (
    Action,
    AskModel,
    CallWebhook,
    DialogueSession,
    Hangup,
    Listen,
    Record,
    Say,
    Transfer,
    WebhookRequest,
    WebhookResult,
    call_variables,
)
from agent.dialplan.model import Dialplan, DialplanError, load_dialplans
from agent.integrations.webhook import MockWebhooks

__all__ = [
    "Output",
    "ScriptError",
    "SimulatedCall",
    "parse_now",
    "run_interactive",
    "run_script",
]

WebhookExecutor = Callable[[WebhookRequest], WebhookResult]


@dataclass(frozen=True)
class Output:
    """One line of simulator output: *kind* ``say`` (the agent speaks), ``trace`` (what ran),
    ``end`` (the call ended)."""

    kind: str
    text: str

    def render(self) -> str:
        """The line as printed."""
        if self.kind == "say":
            return f"agent: {self.text}"
        return self.text


class ScriptError(ValueError):
    """A simulation script is malformed."""


def parse_now(text: str) -> datetime:
    """Parse an ISO 8601 time; without an offset it is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected an ISO 8601 time such as 2025-03-04T10:00:00-05:00, found {text!r}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class RealWebhooks:
    """Calls webhooks for real: runs Twisted's reactor in a background thread."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        self._reactor: Any = reactor
        self._thread: threading.Thread | None = None

    def __call__(self, request: WebhookRequest) -> WebhookResult:
        from twisted.internet.threads import blockingCallFromThread

        from agent.integrations.webhook import call_webhook

        if self._thread is None:
            self._thread = threading.Thread(
                target=self._reactor.run, kwargs={"installSignalHandlers": False}, daemon=True
            )
            self._thread.start()
        result: WebhookResult = blockingCallFromThread(
            self._reactor, call_webhook, self._reactor, request
        )
        return result

    def close(self) -> None:
        """Stop the reactor thread if it was started."""
        if self._thread is not None:
            self._reactor.callFromThread(self._reactor.stop)
            self._thread.join(timeout=5)
            self._thread = None


def _no_webhooks(request: WebhookRequest) -> WebhookResult:
    return WebhookResult(False, {}, None, "webhooks are off in this simulation (use --webhooks)")


class SimulatedCall:
    """One simulated call: feed it caller input, get back what the agent says and does.

    *transfer*: outcome of transfers, ``succeed`` or a failure reason (``"486 Busy Here"``).
    *model_reply*: what the dialogue model answers (None: no model, the step's failure path).
    """

    def __init__(
        self,
        dialplan: Dialplan,
        number: str = "1000",
        caller: str = "+15550000000",
        now: datetime | None = None,
        webhooks: WebhookExecutor = _no_webhooks,
        variables: Mapping[str, str] | None = None,
        transfer: str = "succeed",
        model_reply: str | None = None,
        call_id: str = "sim-call-1",
        flow: str | None = None,
    ) -> None:
        self.dialplan = dialplan
        self.flow = flow or dialplan.route(number, caller)
        self.number = number
        self.caller = caller
        self._now = now
        self.webhooks = webhooks
        self.transfer_outcome = transfer
        self.model_reply = model_reply
        self.transferred_to: str | None = None
        self.end_reason: str | None = None
        self.webhook_calls: list[tuple[WebhookRequest, WebhookResult]] = []
        self._seen = 0
        self.steps_run: list[str] = []
        self.session: DialogueSession | None = None
        if self.flow is not None:
            values = call_variables(caller, number, call_id, "simulator")
            values.update(variables or {})
            self.session = DialogueSession(dialplan, self.flow, values, now=self.now)

    def now(self) -> datetime:
        """The simulated time (fixed when given, else the wall clock)."""
        return self._now if self._now is not None else datetime.now(timezone.utc)

    @property
    def routed(self) -> bool:
        """False when no route takes the number (a real call would get 404)."""
        return self.session is not None

    @property
    def ended(self) -> bool:
        """True once the call is over (hung up, transferred or unrouted)."""
        return self.session is None or self.session.ended or self.end_reason is not None

    @property
    def listening(self) -> Listen | None:
        """The Listen the agent waits on, if any."""
        return self._listen

    _listen: Listen | None = None

    def start(self) -> list[Output]:
        """Answer the call."""
        if self.session is None:
            self.end_reason = "404"
            return [Output("end", f"[no route for {self.number} from {self.caller}: 404 Not Found]")]
        return self._drive(self.session.start())

    def say(self, text: str) -> list[Output]:
        """The caller says *text* (as a final transcript)."""
        if self.session is None or self.ended:
            return []
        return self._drive(self.session.on_transcript(text))

    def dtmf(self, digits: str) -> list[Output]:
        """The caller presses *digits*."""
        if self.session is None or self.ended:
            return []
        return self._drive(self.session.on_dtmf(digits))

    def silence(self) -> list[Output]:
        """The caller says nothing until the no-input timeout."""
        if self.session is None or self.ended:
            return []
        return self._drive(self.session.on_no_input())

    def _drive(self, actions: list[Action]) -> list[Output]:
        assert self.session is not None
        session = self.session
        out: list[Output] = []
        pending = list(actions)
        self._listen = None
        self.steps_run = []
        while pending:
            action = pending.pop(0)
            self._trace(out, until_step=action.step if isinstance(action, Say) else None)
            if isinstance(action, Say):
                out.append(Output("say", action.text))
            elif isinstance(action, Listen):
                self._listen = action
                out.append(Output("trace", f"[{session.current_flow}/{action.step}] listening "
                                           f"({_describe_listen(action)})"))
            elif isinstance(action, Hangup):
                self.end_reason = action.reason
                out.append(Output("end", f"[hangup: {action.reason}]"))
            elif isinstance(action, Transfer):
                pending.extend(self._transfer(action, out))
            elif isinstance(action, CallWebhook):
                result = self.webhooks(action.request)
                self.webhook_calls.append((action.request, result))
                outcome = (f"ok {result.status} ({len(result.variables)} fields)" if result.ok
                           else f"failed: {result.reason}")
                out.append(Output("trace", f"[webhook {action.request.method} "
                                           f"{action.request.url} -> {outcome}]"))
                pending.extend(session.on_webhook_result(result))
            elif isinstance(action, Record):
                duration = min(action.max_ms, 5000)
                path = os.path.join("recordings", action.path)
                out.append(Output("trace", f"[recording to {path}, at most {action.max_ms} ms "
                                           f"(simulated: {duration} ms)]"))
                pending.extend(session.on_record_done(path, duration))
            elif isinstance(action, AskModel):
                if self.model_reply is None:
                    out.append(Output("trace", "[model: none in the simulator (--model-reply)]"))
                    pending.extend(session.on_model_failed("no dialogue model configured"))
                else:
                    out.append(Output("trace", f"[model asked: {action.text!r}]"))
                    pending.extend(session.on_model_reply(self.model_reply))
        self._trace(out)
        if session.ended and self.end_reason is None:
            self.end_reason = "bridged"
        return out

    def _transfer(self, action: Transfer, out: list[Output]) -> list[Action]:
        assert self.session is not None
        kind = f"{action.mode} transfer" + (f" to queue {action.queue}" if action.queue else "")
        if self.transfer_outcome == "succeed":
            self.transferred_to = action.target_uri
            out.append(Output("trace", f"[{kind} to {action.target_uri}: succeeded]"))
            result = self.session.on_transfer_succeeded()
            if not result:
                out.append(Output("end", "[bridged: the caller is talking to the target]"))
            return result
        out.append(Output("trace", f"[{kind} to {action.target_uri}: failed "
                                   f"({self.transfer_outcome})]"))
        return self.session.on_transfer_failed(self.transfer_outcome)

    def _trace(self, out: list[Output], until_step: str | None = None) -> None:
        """Show the engine's new history events; with *until_step*, stop after that step
        begins (so a prompt is printed right after the step that says it)."""
        assert self.session is not None
        history = self.session.history
        if until_step is not None and not any(
            e.kind == "step" and e.step == until_step for e in history[self._seen:]
        ):
            until_step = None
        for event in history[self._seen:]:
            self._seen += 1
            where = f"{event.flow}/{event.step}"
            if event.kind == "step":
                self.steps_run.append(where)
                out.append(Output("trace", f"[{where}]"))
            elif event.kind == "intent":
                out.append(Output("trace", f"  intent {event.intent} ({event.score:.2f})"))
            elif event.kind in ("slot", "set") and event.data:
                pairs = ", ".join(f"{k} = {v!r}" for k, v in event.data.items())
                out.append(Output("trace", f"  {event.kind}: {pairs}"))
            elif event.kind in ("no_match", "no_input", "gave_up", "skipped"):
                out.append(Output("trace", f"  {event.kind.replace('_', ' ')}"
                                           + (f": {event.text}" if event.text else "")))
            elif event.kind in ("branch", "hours", "goto", "return"):
                out.append(Output("trace", f"  {event.kind}: {event.text}"))
            if event.kind == "step" and event.step == until_step:
                return

    def variables(self) -> dict[str, str]:
        """The call's variables now (configuration values left out)."""
        if self.session is None:
            return {}
        return {k: v for k, v in sorted(self.session.variables.items())
                if not k.startswith("config.")}


def _describe_listen(listen: Listen) -> str:
    parts = []
    if listen.speech:
        parts.append("speech")
    if listen.dtmf:
        parts.append("keys" if listen.max_digits <= 1 else f"up to {listen.max_digits} digits"
                     + (f" or {listen.terminator}" if listen.terminator else ""))
    if listen.slot_type:
        parts.append(f"slot {listen.slot_type}")
    return ", ".join(parts) + f"; silence after {listen.no_input_timeout_ms} ms"


# --------------------------------------------------------------------------- interactive


HELP = (
    "Type what the caller says. '#1' presses 1 ('#1234#' several keys), an empty line is "
    "silence, /vars shows variables, /quit ends."
)


def run_interactive(
    call: SimulatedCall, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout
) -> int:
    """Run *call* reading caller input from *stdin*; 0 when the call ran, 1 when unrouted."""
    tty = stdin.isatty()

    def show(lines: Iterable[Output]) -> None:
        for line in lines:
            print(line.render(), file=stdout)
        stdout.flush()

    print(f"Simulating a call from {call.caller} to {call.number} (flow {call.flow}). {HELP}",
          file=stdout)
    show(call.start())
    if not call.routed:
        return 1
    while not call.ended:
        if tty:
            print("caller> ", end="", file=stdout, flush=True)
        line = stdin.readline()
        if not line:
            print("[end of input: the caller hung up]", file=stdout)
            break
        text = line.rstrip("\n")
        if not tty:
            print(f"caller> {text}", file=stdout)
        command = text.strip()
        if command == "/quit":
            print("[the caller hung up]", file=stdout)
            break
        if command == "/vars":
            for name, value in call.variables().items():
                print(f"  {name} = {value!r}", file=stdout)
            continue
        if command in ("/help", "/?"):
            print(HELP, file=stdout)
            continue
        if command.startswith("#") and len(command) > 1:
            show(call.dtmf(command[1:]))
        elif not command:
            show(call.silence())
        else:
            show(call.say(text))
    return 0


# --------------------------------------------------------------------------- scripts

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
        webhooks=mocks or _no_webhooks,
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
