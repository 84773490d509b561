"""Tests for the dialplan language's checks: one case per class of error, routing, schema.

Each error case is a small dialplan with one kind of mistake; the test asserts the exact
``line:column: message`` list, so both the position and the wording are pinned down.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from agent.dialplan.model import (
    DialplanError,
    GotoStep,
    HoursStep,
    QueueStep,
    TransferStep,
    WebhookStep,
    load_dialplan,
    load_dialplans,
    parse_dialplan,
    static_prompts,
)
from agent.dialplan.validation import SCHEMA_PATH, load_schema, validate_text

DIALPLANS = Path(__file__).resolve().parents[2] / "dialplans"
EXAMPLES = [DIALPLANS / "default.yaml", DIALPLANS / "bank.yaml", DIALPLANS / "appointments.yaml"]


def problems(text: str) -> list[str]:
    """The issues of loading *text*, as 'line:col: message' (empty when it loads)."""
    try:
        parse_dialplan(textwrap.dedent(text), "p.yaml")
    except DialplanError as error:
        return [str(issue)[len("p.yaml:"):] for issue in error.errors]
    return []


SEMANTIC_CASES = [
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: lookup
                webhook: {url: "https://x.example/a", save_as: r, on_failure: oops}
              - hangup:
        """,
        [
            "7:71: 'on_failure' refers to unknown step 'oops' in flow 'main'; expected one of: lookup (did you mean 'lookup'?)",
        ],
        id="unknown-target",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - goto: {flow: verify, step: star}
          verify:
            steps:
              - id: start
                return:
        """,
        [
            "6:36: 'step' refers to unknown step 'star' in flow 'verify'; expected one of: start (did you mean 'start'?)",
        ],
        id="unknown-subflow",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - set: {count: "1"}
              - say: "You tried {{ cuont }} times."
        """,
        [
            "7:28: in 'say': unknown variable 'cuont'; no step sets it and it is not a call variable (caller, called, call_id, region, now.<part>, intent, input, ...) or config.<key> (did you mean 'count'?)",
        ],
        id="unknown-variable",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - webhook: {url: "https://x.example/a", save_as: acct, fields: [name], on_failure: bye}
              - say: "Your balance is {{ acct.balance }}."
              - id: bye
                hangup:
        """,
        [
            "7:34: in 'say': unknown variable 'acct.balance': the webhook saving as 'acct' declares only these fields: acct.name",
        ],
        id="undeclared-field",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - ask:
                  intents: {balance: {examples: [balance]}}
              - branch:
                  - when: "intent == 'balanse'"
                    goto: bye
              - id: bye
                hangup:
        """,
        [
            "9:20: condition refers to unknown intent 'balanse'; expected one of: balance (did you mean 'balance'?)",
        ],
        id="unknown-intent",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - say: "Hello"
              - hangup:
              - id: orphan
                say: "Nobody gets here."
        """,
        [
            "8:9: step 'orphan' in flow 'main' is never reached: no earlier step, 'goto', 'next' or 'then' leads to it",
        ],
        id="unreachable",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps: [{say: "Hi"}]
          forgotten:
            steps: [{say: "Bye"}]
        """,
        [
            "6:3: flow 'forgotten' is never used: no route or 'goto' leads to it",
        ],
        id="unused-flow",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: top
                set: {n: "{{ n + 1 }}"}
              - id: again
                goto: top
        """,
        [
            "6:9: steps top -> again -> top loop forever: nothing in the loop leads out of it (add a way out such as a hangup, an ask's 'then' or a branch that leaves)",
        ],
        id="loop",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: menu
                ask:
                  prompt: "Yes?"
                  intents: {yes: {examples: ["yes"], goto: menu}}
                  no_input: {then: menu}
                  no_match: {then: menu}
        """,
        [
            "6:9: steps menu -> menu loop forever: nothing in the loop leads out of it (add a way out such as a hangup, an ask's 'then' or a branch that leaves)",
        ],
        id="loop-asks",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - branch:
                  - when: "intent = 'x'"
                    goto: bye
              - id: bye
                hangup:
        """,
        [
            "7:27: in 'when': unexpected '=' at character 8",
        ],
        id="condition-syntax",
    ),
    pytest.param(
        """\
        version: 1
        routes:
          - number: "_X."
            flow: main
          - number: "5551234"
            flow: main
          - flow: main
          - caller: "_44X."
            flow: main
        flows:
          main:
            steps: [{say: "Hi"}]
        """,
        [
            "5:5: this route is never used: the route at p.yaml:3:5 takes every call it would match (give this route a lower 'priority' or move it first)",
            "8:5: this route is never used: the route at p.yaml:7:5 takes every call it would match (give this route a lower 'priority' or move it first)",
        ],
        id="shadowed-route",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - model: {on_failure: bye}
              - id: bye
                hangup:
        """,
        [
            "6:9: a 'model' step needs its flow to declare 'needs_model: true' (such a flow only runs where a dialogue model is configured)",
        ],
        id="model-without-flag",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - webhook: {url: "{{ callback }}/x", save_as: r, on_failure: bye}
              - webhook: {url: "ftp://files.example/x", save_as: s, on_failure: bye}
              - id: bye
                set: {callback: "x"}
        """,
        [
            "6:24: expected 'url' to start with 'http://' or 'https://', or with a '{{ config.<key> }}' placeholder (the base URL must not come from the caller)",
            "7:24: expected 'url' to start with 'http://' or 'https://', or with a '{{ config.<key> }}' placeholder (the base URL must not come from the caller)",
        ],
        id="unsafe-url",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - hours:
                  timezone: Mars/Olympus
                  open: {funday: "09:00-17:00", mon: "17:00-09:00"}
                  holidays: ["2025-02-30"]
                  closed: bye
              - id: bye
                hangup:
        """,
        [
            "7:21: unknown timezone 'Mars/Olympus'; expected an IANA name such as 'America/New_York', 'Europe/Paris' or 'UTC'",
            "8:18: expected days such as 'mon-fri', 'sat', 'mon,wed', 'weekdays' or 'daily', found 'funday'",
            "8:46: expected opening hours like '09:00-17:00' (24-hour, start before end), found '17:00-09:00'",
            "9:22: expected a holiday date as YYYY-MM-DD (one day) or MM-DD (every year), found '2025-02-30'",
        ],
        id="hours",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - ask:
                  slot: {name: pin, type: digits, max_length: 4}
                  intents:
                    agent: {examples: ["agent"], dtmf: "0"}
                    done: {examples: ["done"], dtmf: "#"}
              - ask:
                  slot: {name: ok, type: yes_no, min: 1}
                  intents: {}
        """,
        [
            "9:20: intent 'agent' uses DTMF '0', but this ask collects keypad digits for slot 'pin'; bind intents to '*' or '#' instead",
            "10:19: intent 'done' uses DTMF '#', which ends the digits of slot 'pin'",
            "12:42: 'min' applies to number slots, not yes_no",
            "13:20: expected at least one intent under 'intents'",
        ],
        id="slot-keys",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - set: {caller: "x", now.hour: "3", config.transfer_uri: "y"}
        """,
        [
            "6:15: a variable in 'set': 'caller' is set by the call itself and cannot be changed",
            "6:28: a variable in 'set': 'now.hour' is set by the call itself and cannot be changed",
            "6:43: a variable in 'set': 'config.transfer_uri' is set by the call itself and cannot be changed",
        ],
        id="assign-builtin",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - record: {file: "../../etc/{{ caller }}.wav", max_ms: 30000}
        """,
        [
            "6:24: expected 'file' to be a file name ending in '.wav', made of letters, digits, '_', '-', '+', '.' and placeholders (no '/' or '..'), found '../../etc/{{ caller }}.wav'",
        ],
        id="record-file",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - say: "Hi"
                settings: {max_call_duration_s: 60, barge_in: sometimes}
        """,
        [
            "7:20: 'max_call_duration_s' applies to a whole call; set it in the flow's or the file's settings",
            "7:55: expected 'barge_in' to be one of: true, false, dtmf, found a string 'sometimes'",
        ],
        id="step-duration",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - webhook: {url: "https://x.example", method: GET, body: {a: 1}, save_as: r, on_failure: bye, timeout_ms: 10}
              - id: bye
                hangup:
        """,
        [
            "6:58: a GET webhook has no body; use 'query'",
            "6:113: expected 'timeout_ms' between 100 and 60000, found 10",
        ],
        id="get-body",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - return: 5
              - next: x
                goto: y
        """,
        [
            "6:17: expected 'return' (nothing or an empty mapping), found an integer '5'",
            "7:9: 'next' is not allowed in a goto step; 'goto' already says where to go",
            "8:15: 'goto' refers to unknown step 'y' in flow 'main'; expected one of: (none)",
        ],
        id="return-with-value",
    ),
]


@pytest.mark.parametrize(("text", "expected"), SEMANTIC_CASES)
def test_each_class_of_mistake_is_reported_with_position_and_expectation(
    text: str, expected: list[str]
) -> None:
    """Every problem is named at file:line:column with what was expected, all at once."""
    assert problems(text) == expected


def test_error_lines_carry_the_file_path(tmp_path: Path) -> None:
    """Loading from a file prefixes each problem with the file's path."""
    path = tmp_path / "lines.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - say: "{{ nobody }}"
        """))
    with pytest.raises(DialplanError) as info:
        load_dialplan(str(path))
    assert str(info.value).startswith(f"{path}:6:18: in 'say': unknown variable 'nobody'")


def test_shape_checks_wait_until_references_resolve() -> None:
    """A broken reference is reported alone, not also as unreachable steps or loops."""
    assert problems("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - goto: nowhere
              - id: later
                say: "Never reached, but that is not the first problem."
        """) == [
        "6:15: 'goto' refers to unknown step 'nowhere' in flow 'main'; expected one of: later"
    ]


def test_variables_set_anywhere_declare_them_for_every_flow() -> None:
    """set, slots, intent slots, webhooks, recordings, models and defaults declare variables."""
    assert problems("""\
        version: 1
        variables: {greeting: "Hello"}
        routes: [{flow: main}]
        flows:
          main:
            needs_model: true
            variables: {tries: "0"}
            steps:
              - ask:
                  slot: {name: pin, type: digits}
                  intents: {book: {examples: [book], slots: {day: date}, dtmf: "*"}}
              - webhook: {url: "{{ config.api }}/x", save_as: acct, on_failure: bye}
              - record: {max_ms: 5000, save_as: msg}
              - model: {on_failure: bye, save_as: answer}
              - goto: {flow: helper}
              - id: bye
                say: "{{ greeting }} {{ tries }} {{ pin }} {{ day }} {{ acct.any.field }}
                  {{ msg.path }} {{ msg.duration_ms }} {{ answer }} {{ shared }}
                  {{ now.weekday }} {{ intent.score }} {{ webhook.reason }} {{ hours.open }}"
          helper:
            steps:
              - set: {shared: "yes"}
              - return:
        """) == []


def test_sub_flow_return_and_flow_end_are_exits_of_a_loop() -> None:
    """A loop through a sub-flow is fine: the sub-flow may hang up (judged on its own)."""
    assert problems("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: top
                goto: {flow: verify}
              - goto: top
          verify:
            steps:
              - hangup:
        """) == []


# --------------------------------------------------------------------------- routing


def test_routes_follow_priority_then_written_order_with_a_default() -> None:
    """Lower priority numbers go first; equal ones keep file order; a bare route is the default."""
    plan = parse_dialplan(textwrap.dedent("""\
        version: 1
        routes:
          - flow: fallback
            priority: 900
          - number: "_1800NXXXXXX"
            flow: tollfree
          - number: "18005550100"
            flow: vip
            priority: 10
          - number: "_X."
            caller: "_+44X."
            flow: uk
        flows:
          fallback: {steps: [{say: "f"}]}
          tollfree: {steps: [{say: "t"}]}
          vip: {steps: [{say: "v"}]}
          uk: {steps: [{say: "u"}]}
        """))
    assert plan.route("18005550100", "+15551234") == "vip"
    assert plan.route("18005550199", "+15551234") == "tollfree"
    assert plan.route("18001550199", "+15551234") == "fallback"
    assert plan.route("2000", "+447700900123") == "uk"
    assert plan.route("2000", "+15551234") == "fallback"
    assert [r.flow for r in plan.routes] == ["vip", "tollfree", "uk", "fallback"]


def test_unrouted_number_has_no_flow() -> None:
    """Without a default route a number no pattern matches gets None (the server answers 404)."""
    plan = parse_dialplan('version: 1\nroutes: [{number: "_2XXX", flow: m}]\n'
                          'flows: {m: {steps: [{say: "x"}]}}\n')
    assert plan.route("2000", "") == "m"
    assert plan.route("200", "") is None and plan.route("20000", "") is None


# --------------------------------------------------------------------------- example dialplans


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_dialplans_load_and_match_the_schema(path: Path) -> None:
    """The shipped examples load cleanly and validate against dialplans/schema.json."""
    load_dialplan(str(path))
    assert validate_text(path.read_text()) == []


def test_example_dialplans_load_together_with_the_demo_line_last() -> None:
    """All examples form one dialplan: their DIDs first, the demo line's catch-all last."""
    plan = load_dialplans([str(p) for p in EXAMPLES])
    assert plan.route("18005550103", "") == "bank"
    assert plan.route("3000", "") == "appointments"
    assert plan.route("4000", "") == "main"


def test_bank_line_uses_the_features_it_documents() -> None:
    """The bank example exercises hours, a webhook with declared fields, a queue and subflow-free
    menus; static prompts are listed for caching, templated ones are not."""
    plan = load_dialplan(str(DIALPLANS / "bank.yaml"))
    flow = plan.flow("bank")
    hours = flow.step("check_hours")
    lookup = flow.step("lookup")
    assert isinstance(hours, HoursStep) and hours.holiday == "holiday"
    assert isinstance(lookup, WebhookStep) and lookup.fields == ("found", "name", "balance", "status")
    assert isinstance(flow.step("to_agent"), QueueStep)
    assert flow.settings.timezone == "America/New_York" and flow.settings.max_call_duration_s == 900
    prompts = {text for text, _ in static_prompts(plan)}
    assert "Welcome to OpenClaw Bank." in prompts
    assert not any("{{" in text for text in prompts)
    assert "Please hold for the next available agent." in prompts
    assert plan.required_config() == {"bank_api_url", "bank_api_token", "support_queue_uri"}


def test_appointment_line_transfers_bridged() -> None:
    """The appointment example's front desk is a bridged transfer with a ring timeout."""
    desk = load_dialplan(str(DIALPLANS / "appointments.yaml")).flow("appointments").step("desk")
    assert isinstance(desk, TransferStep) and (desk.mode, desk.timeout_ms) == ("bridged", 25000)


def test_needs_model_follows_sub_flows() -> None:
    """A flow needs a model when it, or a sub-flow it enters, has a model step."""
    plan = parse_dialplan(textwrap.dedent("""\
        version: 1
        routes: [{flow: main}, {number: "1", flow: plain, priority: 1}]
        flows:
          main:
            steps: [{goto: {flow: chat}}]
          plain:
            steps: [{say: "hi"}]
          chat:
            needs_model: true
            steps:
              - model: {on_failure: sorry}
              - id: sorry
                say: "Sorry."
        """))
    assert plan.needs_model("main") and plan.needs_model("chat") and not plan.needs_model("plain")
    assert isinstance(plan.flow("main").steps[0], GotoStep)


def test_phrase_hints_are_the_spoken_answers_of_reachable_flows() -> None:
    """Intent examples, synonyms and slot words of the flows a call may reach; none where
    callers may say anything (a model step or a free-text slot)."""
    plan = parse_dialplan(textwrap.dedent("""\
        version: 1
        routes: [{flow: main}, {number: "1", flow: notes, priority: 1}, {number: "2", flow: chat, priority: 2}]
        flows:
          main:
            steps:
              - ask:
                  prompt: "Balance or a payment?"
                  intents:
                    balance: {examples: ["check my balance"], synonyms: {balance: ["funds"]}}
                    pay: {examples: ["make a payment"], goto: amount}
              - goto: {flow: confirm}
              - id: amount
                ask: {prompt: "How much?", slot: {name: amount, type: number}}
          confirm:
            steps:
              - ask: {prompt: "Is that right?", slot: {name: ok, type: yes_no}}
          notes:
            steps:
              - ask: {prompt: "Say anything.", slot: {name: note, type: text}}
          chat:
            needs_model: true
            steps:
              - model: {on_failure: sorry}
              - id: sorry
                say: "Sorry."
        """))
    hints = plan.phrase_hints("main")
    for phrase in ("check my balance", "funds", "make a payment", "twenty", "hundred", "yes", "nope"):
        assert phrase in hints, phrase
    assert plan.phrase_hints("notes") == () and plan.phrase_hints("chat") == ()


# --------------------------------------------------------------------------- schema


def test_schema_is_published_as_draft_2020_12() -> None:
    """dialplans/schema.json is valid JSON declaring draft 2020-12, with every step kind."""
    with open(SCHEMA_PATH, encoding="utf-8") as handle:
        schema = json.load(handle)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    step_kinds = set(schema["$defs"]["step"]["properties"]) - {"id", "settings", "next"}
    assert step_kinds == {"say", "ask", "set", "branch", "webhook", "hours", "transfer", "queue",
                          "goto", "return", "hangup", "record", "model"}
    assert load_schema() == schema


SCHEMA_CASES = [
    pytest.param("version: 1\nflows: {m: {steps: [{say: hi, sayy: x}]}}\n",
                 [(2, 31, "unknown key 'sayy' in a step; expected one of: id, settings, next, say, "
                          "ask, set, branch, webhook, hours, transfer, queue, goto, return, "
                          "hangup, record, model (did you mean 'say'?)")],
                 id="unknown-key"),
    pytest.param("version: 1\nroutes: 5\n",
                 [(2, 9, "expected 'routes' (a list), found an integer '5'")], id="wrong-type"),
    pytest.param("version: 1\nroutes: [{number: '1'}]\n",
                 [(2, 10, "missing required key 'flow' in a route")], id="missing-required"),
    pytest.param("version: 2\n", [(1, 10, "expected 'version' to be 1, found an integer '2'")],
                 id="const"),
    pytest.param("version: 1\nflows: {m: {steps: [{transfer: {to: x, mode: blund}}]}}\n",
                 [(2, 46, "expected 'mode' to be one of: blind, bridged, found a string 'blund' "
                          "(did you mean 'blind'?)")], id="enum"),
    pytest.param("version: 1\nflows: {m: {steps: [{ask: {intents: {a: {dtmf: '12'}}}}]}}\n",
                 [(2, 48, "expected 'dtmf' to be a single key 0-9, * or #, found '12'")], id="pattern"),
    pytest.param("version: 1\nsettings: {no_input_timeout_ms: 5}\n",
                 [(2, 33, "expected 'no_input_timeout_ms' between 100 and 120000, found 5")],
                 id="range"),
    pytest.param("version: 1\nflows: {m: {steps: [{say: a, hangup: }]}}\n",
                 [(2, 30, "a step does one thing; found both 'say' and 'hangup' "
                         "(split them into two steps)")],
                 id="two-kinds"),
    pytest.param("version: 1\nflows: {m: {steps: [{id: x}]}}\n",
                 [(2, 21, "expected a step to have one of: say, ask, set, branch, webhook, hours, "
                          "transfer, queue, goto, return, hangup, record, model")],
                 id="no-kind"),
    pytest.param("version: 1\nflows: {m: {steps: [{goto: [a]}]}}\n",
                 [(2, 28, "expected 'goto' (a string or a mapping), found a list")],
                 id="union-type"),
    pytest.param("version: 1\nflows: {m: {steps: [{ask: {prompt: x}}]}}\n",
                 [(2, 27, "expected 'ask' to have one of: intents, slot")], id="ask-needs-one"),
]


@pytest.mark.parametrize(("text", "expected"), SCHEMA_CASES)
def test_schema_validation_reports_line_column_and_expectation(
    text: str, expected: list[tuple[int, int, str]]
) -> None:
    """The schema check gives each structural problem a position and what was expected."""
    assert validate_text(text) == expected


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    """dialplans/schema.json itself passes the draft 2020-12 meta-schema."""
    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_yaml_numbers_and_booleans_are_text_where_text_is_expected() -> None:
    """'dtmf: 1', 'examples: [yes]' and 'id: no' read as the text written, not as 1 or True."""
    plan = parse_dialplan(textwrap.dedent("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: no
                ask:
                  prompt: 1.50
                  intents: {yes: {examples: [yes, on], dtmf: 1}}
        """))
    ask = plan.flow("main").step("no")
    assert ask.prompt is not None and ask.prompt.source == "1.50"
    assert [(i.name, i.examples, i.dtmf) for i in ask.intents] == [("yes", ("yes", "on"), "1")]
    assert validate_text("version: 1\nflows: {m: {steps: [{say: x, next: yes}]}}\n") == []
    assert validate_text("version: 1\nsettings: {no_input_timeout_ms: yes}\n") == [
        (2, 33, "expected 'no_input_timeout_ms' (an integer), found a boolean 'yes'")
    ]
