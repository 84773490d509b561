"""Tests for agent.dialplan.model: loading, precise errors, routing patterns, templates, prompts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent.dialplan.model import (
    AskStep,
    DialplanError,
    HangupStep,
    NumberPattern,
    SayStep,
    Settings,
    TransferStep,
    Variable,
    load_dialplan,
    load_dialplans,
    parse_dialplan,
    parse_template,
    prompt_cache_key,
    static_prompts,
)

DEFAULT_DIALPLAN = Path(__file__).resolve().parents[2] / "dialplans" / "default.yaml"

MINIMAL = """\
version: 1
routes:
  - flow: main
flows:
  main:
    steps:
      - id: hello
        say: "Hello"
      - hangup:
"""


def write(tmp_path: Path, text: str, name: str = "plan.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def load_error(tmp_path: Path, text: str, name: str = "plan.yaml") -> tuple[str, DialplanError]:
    path = write(tmp_path, text, name)
    with pytest.raises(DialplanError) as info:
        load_dialplan(path)
    return path, info.value


# --------------------------------------------------------------------------- the default line


def test_default_dialplan_loads_and_answers_any_number() -> None:
    """The shipped demo line loads cleanly and routes any called number, even odd ones, to main."""
    plan = load_dialplan(str(DEFAULT_DIALPLAN))
    assert plan.route("+15551234567", "anonymous") == "main"
    assert plan.route("support", "100") == "main"
    assert plan.route("", "") == "main"
    assert plan.required_config() == {"transfer_uri"}


def test_default_dialplan_menu_has_dtmf_one_to_four() -> None:
    """The menu binds keys 1-4 to balance, hours, agent and goodbye, as the demo promises."""
    plan = load_dialplan(str(DEFAULT_DIALPLAN))
    menu = plan.flow("main").step("menu")
    assert isinstance(menu, AskStep)
    assert {i.dtmf: i.goto for i in menu.intents} == {
        "1": "balance",
        "2": "hours",
        "3": "agent",
        "4": "goodbye",
    }
    assert len(menu.no_input.reprompts) == 2 and len(menu.no_match.reprompts) == 2


def test_default_dialplan_merge_key_copies_menu_intents() -> None:
    """The 'anything else' ask reuses the menu intents through a YAML merge key, plus its own."""
    plan = load_dialplan(str(DEFAULT_DIALPLAN))
    ask = plan.flow("main").step("anything_else")
    assert isinstance(ask, AskStep)
    names = [intent.name for intent in ask.intents]
    assert names[:4] == ["balance", "hours", "agent", "goodbye"]
    assert "nothing_else" in names and "something_else" in names


def test_default_dialplan_transfer_target_comes_from_config() -> None:
    """The agent transfer targets {{ config.transfer_uri }} and falls back to a failure step."""
    plan = load_dialplan(str(DEFAULT_DIALPLAN))
    step = plan.flow("main").step("transfer")
    assert isinstance(step, TransferStep)
    assert step.to.variables == ("config.transfer_uri",)
    assert step.on_failure == "transfer_failed"


# --------------------------------------------------------------------------- model building


def test_minimal_dialplan_builds_frozen_objects(tmp_path: Path) -> None:
    """Steps become typed frozen objects; a step without id gets a positional id."""
    plan = load_dialplan(write(tmp_path, MINIMAL))
    flow = plan.flow("main")
    assert [type(step) for step in flow.steps] == [SayStep, HangupStep]
    assert flow.steps[1].id == "#2"
    hangup = flow.steps[1]
    assert isinstance(hangup, HangupStep) and hangup.reason == "normal"
    with pytest.raises(AttributeError):
        flow.steps[0].id = "other"  # type: ignore[misc]


def test_settings_inherit_from_file_to_flow_to_step(tmp_path: Path) -> None:
    """Settings cascade: dialplan defaults, then flow, then step; unset fields are inherited."""
    path = write(
        tmp_path,
        """\
        version: 1
        settings: {voice: rms, no_input_timeout_ms: 7000}
        routes: [{flow: main}]
        flows:
          main:
            settings: {barge_in: false}
            steps:
              - id: a
                say: "One"
              - id: b
                say: "Two"
                settings: {voice: awb}
        """,
    )
    flow = load_dialplan(path).flow("main")
    assert flow.step("a").settings == Settings(
        voice="rms", barge_in=False, no_input_timeout_ms=7000, dtmf_barge_in=False
    )
    assert flow.step("b").settings == Settings(
        voice="awb", barge_in=False, no_input_timeout_ms=7000, dtmf_barge_in=False
    )


def test_ask_without_policies_repeats_prompt_twice_then_ends(tmp_path: Path) -> None:
    """An ask with no no_input/no_match block reprompts with its own prompt twice, then hangs up."""
    path = write(
        tmp_path,
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: q
                ask:
                  prompt: "Yes or no?"
                  intents:
                    yes: {examples: ["yes"]}
        """,
    )
    ask = load_dialplan(path).flow("main").step("q")
    assert isinstance(ask, AskStep)
    assert [t.source for t in ask.no_input.reprompts] == ["Yes or no?", "Yes or no?"]
    assert ask.no_input.then is None and ask.no_match.then is None


def test_transfer_string_shorthand_and_flow_successor(tmp_path: Path) -> None:
    """'transfer: URI' is shorthand for 'transfer: {to: URI}'; fall-through follows file order."""
    path = write(
        tmp_path,
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: t
                transfer: "sip:agent@example.com"
              - id: sorry
                say: "Sorry."
                next: t
        """,
    )
    flow = load_dialplan(path).flow("main")
    transfer = flow.step("t")
    assert isinstance(transfer, TransferStep)
    assert transfer.to.source == "sip:agent@example.com" and transfer.on_failure is None
    assert flow.following(transfer) == "sorry"
    sorry = flow.step("sorry")
    assert isinstance(sorry, SayStep) and flow.successor(sorry) == "t"


def test_parse_dialplan_from_text_names_the_source() -> None:
    """parse_dialplan reads YAML text and uses the given name in errors."""
    assert parse_dialplan(MINIMAL).route("1", "2") == "main"
    with pytest.raises(DialplanError) as info:
        parse_dialplan("version: 2\n", path="inline.yaml")
    assert str(info.value) == "inline.yaml:1:10: expected 'version' to be 1, found an integer '2'"


# --------------------------------------------------------------------------- errors

ERROR_CASES = [
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - sayy: "Hello"
                id: x
        """,
        [
            "6:9: unknown key 'sayy' in a step; expected one of: id, settings, next, say, ask, "
            "set, branch, webhook, hours, transfer, queue, goto, return, hangup, record, model "
            "(did you mean 'say'?)",
            "6:9: expected a step to have one of: say, ask, set, branch, webhook, hours, "
            "transfer, queue, goto, return, hangup, record, model",
        ],
        id="unknown-key",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {barge_in: maybe}
            steps:
              - say: [1, 2]
        """,
        [
            "5:26: expected 'barge_in' to be one of: true, false, dtmf, found a string 'maybe'",
            "7:14: expected 'say' (a string or a mapping), found a list",
        ],
        id="wrong-type",
    ),
    pytest.param(
        """\
        version: 1
        routes:
          - number: "100"
        flows:
          main:
            steps: [{say: hi}]
        """,
        ["3:5: missing required key 'flow' in a route"],
        id="missing-required-key",
    ),
    pytest.param(
        """\
        routes: [{flow: main}]
        flows:
          main:
            steps: [{say: hi}]
        """,
        ["1:1: missing required key 'version' in the dialplan"],
        id="missing-version",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: greeting
                say: "Hi"
                next: menu
              - id: menus
                hangup:
        """,
        [
            "8:15: 'next' refers to unknown step 'menu' in flow 'main'; expected one of: "
            "greeting, menus (did you mean 'menus'?)"
        ],
        id="unknown-next-target",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: mian}]
        flows:
          main:
            steps: [{say: hi}]
        """,
        [
            "2:17: 'flow' refers to unknown flow 'mian'; expected one of: main "
            "(did you mean 'main'?)"
        ],
        id="unknown-flow",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: a
                say: "one"
              - id: a
                hangup:
        """,
        ["8:13: duplicate step id 'a' in flow 'main'; first used at line 6"],
        id="duplicate-step-id",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: q
                ask:
                  intents:
                    one: {examples: ["one"], dtmf: "12"}
                    two: {dtmf: "*"}
                    three: {dtmf: "*"}
              - hangup:
        """,
        [
            "9:44: expected 'dtmf' to be a single key 0-9, * or #, found '12'",
            "11:20: intent 'three' uses DTMF '*', already used by intent 'two'",
        ],
        id="bad-dtmf",
    ),
    pytest.param(
        """\
        version: 1
        routes:
          - number: "_1[5-"
            flow: main
          - number: "_X.9"
            flow: main
        flows:
          main:
            steps: [{say: hi}]
        """,
        [
            "3:13: bad pattern in 'number': unclosed '[' in pattern '_1[5-'",
            "5:13: bad pattern in 'number': '.' must be the last character of pattern '_X.9'",
        ],
        id="bad-pattern",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - say: "Hello {{ caller | shout }}"
        """,
        [
            "6:33: in 'say': unknown filter 'shout' at character 19; expected one of: default, "
            "upper, lower, title, trim, digits, round, date, weekday, time",
        ],
        id="template-syntax",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - say: "Hello {{ name }} via {{ config }}"
        """,
        [
            "6:24: in 'say': unknown variable 'name'; no step sets it and it is not a call "
            "variable (caller, called, call_id, region, now.<part>, intent, input, ...) or "
            "config.<key>",
            "6:39: in 'say': expected 'config.<key>', found 'config' alone",
        ],
        id="unknown-variable",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        routes: []
        flows:
          main:
            steps: [{say: hi}]
        """,
        ["3:1: duplicate key 'routes' in the dialplan; first given at line 2"],
        id="duplicate-key",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - say: hi
                hangup:
        """,
        ["7:9: a step does one thing; found both 'say' and 'hangup' (split them into two steps)"],
        id="two-kinds",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: a
                say: "A"
                next: b
              - id: b
                say: "B"
                next: a
        """,
        ["6:9: steps a -> b -> a repeat forever without asking the caller anything"],
        id="say-loop",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: t
                transfer: {to: "sip:x@y"}
                next: t
        """,
        ["8:9: 'next' is not allowed in a transfer step; use 'on_failure' inside 'transfer'"],
        id="next-on-transfer",
    ),
    pytest.param(
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {no_input_timeout_ms: 10}
            steps: []
        """,
        [
            "5:37: expected 'no_input_timeout_ms' between 100 and 120000, found 10",
            "6:12: expected at least one step under 'steps'",
        ],
        id="range-and-empty-flow",
    ),
    pytest.param(
        """\
        version: 1
        routes:
          - flow: main
            number: [1
        """,
        [
            "5:1: YAML syntax error: expected ',' or ']', but got '<stream end>' "
            "(while parsing a flow sequence at line 4)"
        ],
        id="yaml-syntax",
    ),
    pytest.param(
        "",
        [
            "1:1: expected a dialplan (a mapping with keys version, routes, flows), "
            "found an empty document"
        ],
        id="empty-file",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ERROR_CASES)
def test_load_errors_name_file_line_and_column(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    """Each kind of mistake is reported as 'path:line:col: what was expected', all at once."""
    path, error = load_error(tmp_path, text)
    assert [str(issue) for issue in error.errors] == [f"{path}:{line}" for line in expected]
    assert str(error) == "\n".join(f"{path}:{line}" for line in expected)


def test_error_is_a_value_error_with_structured_marks(tmp_path: Path) -> None:
    """DialplanError is a ValueError whose issues carry path, line and column separately."""
    path, error = load_error(tmp_path, "version: 1\nroutes: 5\n")
    assert isinstance(error, ValueError)
    issue = error.errors[0]
    assert (issue.mark.path, issue.mark.line, issue.mark.column) == (path, 2, 9)
    assert issue.message == "expected 'routes' (a list), found an integer '5'"


def test_broken_step_does_not_cascade_into_unknown_target_errors(tmp_path: Path) -> None:
    """A goto to a step that exists but has its own error reports only that step's error."""
    path, error = load_error(
        tmp_path,
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: start
                say: "hi"
                next: broken
              - id: broken
                say: ["oops"]
        """,
    )
    assert str(error) == f"{path}:10:14: expected 'say' (a string or a mapping), found a list"


def test_dialplan_without_routes_is_an_error(tmp_path: Path) -> None:
    """A dialplan that routes no number would answer nothing, so it is refused."""
    path, error = load_error(tmp_path, "version: 1\nflows:\n  main:\n    steps: [{say: hi}]\n")
    assert str(error) == f"{path}:1:1: no routes: add at least one entry under 'routes'"


def test_unreadable_file_is_reported_as_dialplan_error(tmp_path: Path) -> None:
    """A missing file is a DialplanError naming the path, not a bare OSError."""
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(DialplanError) as info:
        load_dialplan(missing)
    assert str(info.value) == f"{missing}:1:1: cannot read file: No such file or directory"


# --------------------------------------------------------------------------- several files


def test_load_dialplans_merges_routes_in_file_order(tmp_path: Path) -> None:
    """Routes from several files keep file order; a route may name a flow from another file."""
    first = write(
        tmp_path,
        """\
        version: 1
        routes:
          - number: "100"
            flow: sales
        """,
        "a.yaml",
    )
    second = write(
        tmp_path,
        """\
        version: 1
        routes:
          - flow: main
        flows:
          main:
            steps: [{say: "Main"}]
          sales:
            steps: [{say: "Sales"}]
        """,
        "b.yaml",
    )
    plan = load_dialplans([first, second])
    assert plan.route("100", "x") == "sales"
    assert plan.route("200", "x") == "main"
    assert plan.sources == (first, second)


def test_load_dialplans_rejects_duplicate_flow_across_files(tmp_path: Path) -> None:
    """The same flow name in two files is an error pointing at both definitions."""
    text = """\
        version: 1
        routes: [{number: "%s", flow: main}]
        flows:
          main:
            steps: [{say: "Hi"}]
        """
    first = write(tmp_path, text % "100", "a.yaml")
    second = write(tmp_path, text % "200", "b.yaml")
    with pytest.raises(DialplanError) as info:
        load_dialplans([first, second])
    assert str(info.value) == f"{second}:4:3: duplicate flow 'main'; first defined at {first}:4:3"


# --------------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("pattern", "number", "expected"),
    [
        ("5551234", "5551234", True),
        ("5551234", "55512345", False),
        ("support", "support", True),
        ("_X.", "1", False),
        ("_X.", "12", True),
        ("_X.", "1abc", True),
        ("_X!", "1", True),
        ("_X!", "", False),
        ("_NXX", "200", True),
        ("_NXX", "100", False),
        ("_ZX", "10", True),
        ("_ZX", "01", False),
        ("_1[5-7]X", "161", True),
        ("_1[5-7]X", "181", False),
        ("_[135]", "3", True),
        ("_[135]", "2", False),
        ("_1-800-NXX-XXXX", "18002345678", True),
        ("_+1NXX.", "+1212555", True),
        ("_nxx", "299", True),
        ("_*X#", "*5#", True),
    ],
)
def test_number_patterns_follow_asterisk_semantics(
    pattern: str, number: str, expected: bool
) -> None:
    """X/Z/N classes, [sets], trailing . and !, ignored dashes, literal match without '_'."""
    assert NumberPattern.parse(pattern).matches(number) is expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "empty pattern"),
        ("_", "pattern '_' has nothing after the '_'"),
        ("_X.X", "'.' must be the last character of pattern '_X.X'"),
        ("_1[]", "empty '[]' in pattern '_1[]'"),
        ("_1[a]", "unexpected 'a' inside '[]' in pattern '_1[a]'"),
        ("_1[5-3]", "range 5-3 runs backwards in pattern '_1[5-3]'"),
        ("_1]", "']' without '[' in pattern '_1]'"),
        ("55 5", "pattern '55 5' contains whitespace"),
    ],
)
def test_bad_patterns_are_rejected_with_reason(pattern: str, message: str) -> None:
    """Invalid patterns raise ValueError saying what is wrong."""
    with pytest.raises(ValueError) as info:
        NumberPattern.parse(pattern)
    assert str(info.value) == message


def test_routes_first_match_wins_and_caller_filters(tmp_path: Path) -> None:
    """Routes are tried in order; 'caller' restricts a route; no match gives None."""
    path = write(
        tmp_path,
        """\
        version: 1
        routes:
          - number: "_1XX"
            caller: "_9."
            flow: vip
          - number: "_1XX"
            flow: main
          - number: "_2XX"
            flow: vip
        flows:
          main: {steps: [{say: "Main"}]}
          vip: {steps: [{say: "VIP"}]}
        """,
    )
    plan = load_dialplan(path)
    assert plan.route("100", "912345") == "vip"
    assert plan.route("100", "812345") == "main"
    assert plan.route("250", "812345") == "vip"
    assert plan.route("300", "912345") is None


# --------------------------------------------------------------------------- templates, prompts


def test_parse_template_renders_and_reports_missing() -> None:
    """Placeholders substitute flat dotted keys; missing ones render empty and are listed."""
    template = parse_template("Hi {{caller}}, dial {{ config.transfer_uri }}!")
    assert template.parts == (
        "Hi ",
        Variable("caller"),
        ", dial ",
        Variable("config.transfer_uri"),
        "!",
    )
    assert not template.is_static
    assert (
        template.render({"caller": "Ann", "config.transfer_uri": "sip:a@b"})
        == "Hi Ann, dial sip:a@b!"
    )
    assert template.render({"caller": "Ann"}) == "Hi Ann, dial !"
    assert template.missing({"caller": "Ann"}) == ("config.transfer_uri",)
    assert parse_template("No placeholders } here").is_static


def test_parse_template_rejects_unclosed_placeholder() -> None:
    """An opening '{{' without '}}' is a syntax error naming its position."""
    with pytest.raises(ValueError) as info:
        parse_template("Hello {{ caller")
    assert str(info.value) == "unclosed '{{' at character 7; expected '}}'"


def test_static_prompts_lists_untemplated_text_with_voice(tmp_path: Path) -> None:
    """Static says, prompts, reprompts and the answer to a request for a moment are listed with their
    voice; templated text is not."""
    path = write(
        tmp_path,
        """\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {voice: rms}
            steps:
              - say: "Hello {{ caller }}"
              - say: "Welcome."
                settings: {voice: awb}
              - id: q
                ask:
                  prompt: "Yes or no?"
                  intents: {yes: {examples: ["yes"]}}
                  no_match: {reprompts: ["Please say yes or no.", "Caller {{ caller }}?"]}
        """,
    )
    assert static_prompts(load_dialplan(path)) == {
        ("Welcome.", "awb"),
        ("Yes or no?", "rms"),
        ("Please say yes or no.", "rms"),
        ("Sure, take your time.", "rms"),
    }


def test_default_static_prompts_include_balance_but_not_templates() -> None:
    """The demo line's balance prompt is pre-synthesisable; the transfer URI is not a prompt."""
    prompts = static_prompts(load_dialplan(str(DEFAULT_DIALPLAN)))
    texts = {text for text, _ in prompts}
    assert any("account balance is" in text for text in texts)
    assert all("{{" not in text for text in texts)
    assert {voice for _, voice in prompts} == {"English-US.Male-1"}


def test_prompt_cache_key_depends_on_text_and_voice() -> None:
    """The cache key changes with the voice and the text, and is stable for equal inputs."""
    key = prompt_cache_key("Hello", "kal16")
    assert key == prompt_cache_key("Hello", "kal16")
    assert key != prompt_cache_key("Hello", "rms")
    assert key != prompt_cache_key("Hello.", "kal16")
    assert key.startswith("kal16-")
