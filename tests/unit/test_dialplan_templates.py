"""Tests for agent.dialplan.templates: the safe template and condition language of dialplans."""

from __future__ import annotations

import pytest

from agent.dialplan.templates import (
    JsonArray,
    JsonObject,
    Placeholder,
    TemplateError,
    Variable,
    parse_expression,
    parse_template,
    render_json,
    to_text,
    truthy,
)


@pytest.mark.parametrize(
    ("source", "scope", "expected"),
    [
        ("{{ caller }}", {"caller": "+1555"}, "+1555"),
        ("{{ name | default('friend') }}", {}, "friend"),
        ("{{ name | default('friend') }}", {"name": "Ann"}, "Ann"),
        ("{{ name | upper }}", {"name": "ann"}, "ANN"),
        ("{{ tries + 1 }}", {"tries": "2"}, "3"),
        ("{{ a + b }}", {"a": "x", "b": "y"}, "xy"),
        ("{{ total / 4 }}", {"total": "10"}, "2.5"),
        ("{{ total / 0 }}", {"total": "10"}, ""),
        ("{{ balance | round(2) }}", {"balance": "1234.5678"}, "1234.57"),
        ("{{ balance | round }}", {"balance": "1234.5"}, "1234"),
        ("{{ account | digits }}", {"account": "1234"}, "1 2 3 4"),
        ("{{ day | date }}", {"day": "2025-03-04"}, "Tuesday, March 4"),
        ("{{ day | weekday }}", {"day": "2025-03-08"}, "saturday"),
        ("{{ at | time }}", {"at": "15:30"}, "3:30 PM"),
        ("{{ at | time }}", {"at": "09:00"}, "9 AM"),
        ("{{ missing }} and {{ 'lit' }}", {}, " and lit"),
        ("{{ ok }}", {"ok": "true"}, "true"),
    ],
)
def test_templates_render_values_filters_and_arithmetic(
    source: str, scope: dict[str, str], expected: str
) -> None:
    """Placeholders hold expressions with filters; missing values render empty, never raise."""
    assert parse_template(source).render(scope) == expected


def test_simple_placeholders_stay_variables_and_report_their_names() -> None:
    """'{{ name }}' is a Variable part; expressions become Placeholders; names are listed."""
    template = parse_template("Hi {{ caller }}, {{ n + 1 }} {{ x | default(y) }}")
    assert template.parts[1] == Variable("caller")
    assert isinstance(template.parts[3], Placeholder)
    assert template.variables == ("caller", "n", "x", "y")
    assert template.missing({"caller": "a", "n": "1"}) == ("x", "y")
    assert not template.is_static and parse_template("plain } text {").is_static


@pytest.mark.parametrize(
    ("condition", "scope", "expected"),
    [
        ("intent == 'balance'", {"intent": "balance"}, True),
        ("intent != 'balance'", {"intent": "balance"}, False),
        ("balance > 100", {"balance": "150.5"}, True),
        ("balance > 100", {"balance": "99"}, False),
        ("balance > 100", {}, False),
        ("'10' == 10.0", {}, True),
        ("time < '08:00' or time >= '17:00'", {"time": "07:30"}, True),
        ("time < '08:00' or time >= '17:00'", {"time": "12:00"}, False),
        ("status in ['blocked', 'closed']", {"status": "closed"}, True),
        ("status not in ['blocked', 'closed']", {"status": "closed"}, False),
        ("'ann' in name", {"name": "joann"}, True),
        ("called matches '_1800NXXXXXX'", {"called": "18005550100"}, True),
        ("called matches '_1800NXXXXXX'", {"called": "18001550100"}, False),
        ("not found", {"found": "false"}, True),
        ("not found", {"found": "true"}, False),
        ("found and count >= 3", {"found": "yes", "count": "3"}, True),
        ("(day | weekday) in ['saturday', 'sunday']", {"day": "2025-03-09"}, True),
        ("-x < 0", {"x": "5"}, True),
        ("flag == true", {"flag": "true"}, True),
    ],
)
def test_conditions_compare_numbers_numerically_and_text_as_text(
    condition: str, scope: dict[str, str], expected: bool
) -> None:
    """Conditions: numeric when both sides are numbers, text otherwise; logic short-circuits."""
    assert parse_expression(condition).is_true(scope) is expected


@pytest.mark.parametrize(
    ("source", "message", "offset"),
    [
        ("a ==", "expected a value (a variable, a quoted text, a number, true, false or '(') "
                 "at character 5, found the end", 4),
        ("a b", "expected an operator or the end of the expression at character 3, found 'b'", 2),
        ("'open", "unclosed string starting at character 1", 0),
        ("x | shout", "unknown filter 'shout' at character 5; expected one of: default, upper, "
                      "lower, title, trim, digits, round, date, weekday, time", 4),
        ("x | default", "filter 'default' takes 1 argument(s), found 0", 4),
        ("called matches x", "expected a quoted pattern after 'matches', such as '_1800NXXXXXX' "
                             "at character 16, found 'x'", 15),
        ("called matches '_1['", "bad pattern after 'matches': unclosed '[' in pattern '_1['", 15),
        ("a = 1", "unexpected '=' at character 3", 2),
        ("", "expected an expression, found nothing", 0),
    ],
)
def test_expression_syntax_errors_name_position(source: str, message: str, offset: int) -> None:
    """Bad syntax raises TemplateError saying what was expected, with the character offset."""
    with pytest.raises(TemplateError) as info:
        parse_expression(source)
    assert str(info.value) == message
    assert info.value.offset == offset


def test_template_errors_give_offsets_within_the_whole_text() -> None:
    """Errors inside a placeholder point at the character of the whole template."""
    with pytest.raises(TemplateError) as info:
        parse_template("Hello {{ a b }}")
    assert info.value.offset == 11
    with pytest.raises(TemplateError) as unclosed:
        parse_template("Hello {{ caller")
    assert str(unclosed.value) == "unclosed '{{' at character 7; expected '}}'"


def test_no_code_can_run_through_a_template() -> None:
    """Python syntax is not an escape hatch: attribute access, calls and dunders do not parse."""
    for source in ["{{ ().__class__ }}", "{{ open('x') }}", "{{ __import__('os') }}",
                   "{{ caller[0] }}"]:
        with pytest.raises(TemplateError):
            parse_template(source)


def test_compared_literals_find_intent_names_in_conditions() -> None:
    """The loader learns which intent names a condition mentions, to check they exist."""
    expression = parse_expression("intent == 'balance' or intent in ['agent', 'help'] or x == 'y'")
    assert [name for name, _ in expression.compared_literals("intent")] == [
        "balance", "agent", "help"
    ]


def test_json_bodies_render_templates_and_keep_types() -> None:
    """Webhook bodies: template leaves become text, a lone expression keeps its value type."""
    body = JsonObject((
        ("account", parse_template("{{ account }}")),
        ("tries", parse_template("{{ tries + 1 }}")),
        ("tags", JsonArray((parse_template("a-{{ x }}"), True, None, 3))),
    ))
    assert render_json(body, {"account": "0042", "tries": "1", "x": "b"}) == {
        "account": "0042", "tries": 2, "tags": ["a-b", True, None, 3]
    }


def test_text_and_truth_of_values() -> None:
    """How values print and count as true: 'false', 'no', '0', '' and none are false."""
    assert to_text(2.0) == "2" and to_text(True) == "true" and to_text(None) == ""
    assert [truthy(v) for v in ["false", "No", "0", "", None, "off"]] == [False] * 6
    assert [truthy(v) for v in ["yes", "true", "x", 1, ("a",)]] == [True] * 5
