"""Tests for agent.dialplan.engine: every step type, on a fake clock with scripted recogniser results.

The engine is a pure state machine: each test feeds it events (transcripts as the recogniser
would deliver them, keys, timeouts, webhook/transfer/record/model outcomes) and checks the
actions it returns and the variables and history it keeps.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from agent.dialplan.engine import (
    AskModel,
    CallWebhook,
    DialogueSession,
    Hangup,
    Listen,
    Record,
    Say,
    Transfer,
    WebhookResult,
    call_variables,
)
from agent.dialplan.model import Dialplan, Endpointing, parse_dialplan

TUESDAY_10AM_NY = datetime(2025, 3, 4, 15, 0, tzinfo=timezone.utc)  # 10:00 in New York


class FakeClock:
    """A settable 'now' for the engine."""

    def __init__(self, at: datetime = TUESDAY_10AM_NY) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def plan(text: str) -> Dialplan:
    return parse_dialplan(textwrap.dedent(text), "test.yaml")


def session(text: str, clock: FakeClock | None = None, flow: str = "main",
            **config: object) -> DialogueSession:
    variables = call_variables("+15551230000", "18005550100", "call-7", "us-east", config)
    return DialogueSession(plan(text), flow, variables, now=clock or FakeClock())


def said(actions: list) -> list[str]:
    return [a.text for a in actions if isinstance(a, Say)]


def one_ask(ask_body: str, after: str = "") -> str:
    """A flow: an ask, then a say of the collected variables."""
    return f"""\
        version: 1
        routes: [{{flow: main}}]
        flows:
          main:
            steps:
              - id: q
                ask:
{textwrap.indent(textwrap.dedent(ask_body), " " * 18)}
              - id: done
                say: "{after}"
        """


# --------------------------------------------------------------------------- say


def test_say_mapping_overrides_voice_and_barge_in_and_dtmf_only_policy() -> None:
    """say: {text, voice, barge_in} sets the prompt's voice; barge_in: dtmf lets only keys in."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {barge_in: dtmf}
            steps:
              - say: {text: "Important notice.", voice: awb, barge_in: false}
              - say: "Keys may interrupt this."
              - hangup:
        """)
    first, second, end = call.start()
    assert (first.voice, first.barge_in, first.keys_interrupt) == ("awb", False, False)
    assert (second.voice, second.barge_in, second.keys_interrupt) == ("English-US.Male-1", False, True)
    assert second.step == "#2" and end == Hangup("normal")


# --------------------------------------------------------------------------- ask: slots


DIGITS_ASK = """\
    prompt: "Enter your four digit PIN, then pound."
    slot: {name: pin, type: digits, min_length: 4, max_length: 4}
    intents:
      agent: {examples: ["agent"], dtmf: "*", goto: agent}
    no_match:
      reprompts: ["That was not four digits."]
      retries: 3
"""


def digits_call() -> DialogueSession:
    text = one_ask(DIGITS_ASK, after="PIN {{ pin }}").replace(
        '                say: "PIN {{ pin }}"\n',
        '                say: "PIN {{ pin }}"\n              - hangup:\n'
        '              - id: agent\n                say: "Agent."\n')
    return session(text)


def test_digits_slot_collects_keys_with_inter_digit_listens() -> None:
    """Each key but the last re-issues a Listen with the inter-digit timeout; the 4th completes."""
    call = digits_call()
    start = call.start()
    listen = start[-1]
    assert isinstance(listen, Listen)
    assert (listen.slot_type, listen.max_digits, listen.terminator) == ("digits", 4, "#")
    assert call.on_dtmf("1") == [Listen(3000, slot_type="digits", max_digits=4, terminator="#",
                                        collecting_digits=True)]
    call.on_dtmf("2")
    call.on_dtmf("3")
    assert said(call.on_dtmf("4")) == ["PIN 1234"]
    assert call.variables["pin"] == "1234" and call.variables["input.mode"] == "dtmf"


def test_digits_slot_several_keys_at_once_and_terminator_and_timeout() -> None:
    """'12#' is too short (no-match reprompt); a timeout ends the entry like the terminator."""
    call = digits_call()
    call.start()
    assert said(call.on_dtmf("12#")) == ["That was not four digits."]
    call.on_dtmf("98")
    call.on_dtmf("76")  # four keys: complete
    assert call.variables["pin"] == "9876"

    timed = digits_call()
    timed.start()
    timed.on_dtmf("555")
    assert said(timed.on_no_input()) == ["That was not four digits."]
    timed.on_dtmf("5555")
    assert timed.variables["pin"] == "5555"


def test_digits_slot_spoken_and_star_intent() -> None:
    """Spoken digits fill the slot; '*' still selects the intent bound to it."""
    call = digits_call()
    call.start()
    assert said(call.on_transcript("it is four three two one")) == ["PIN 4321"]
    other = digits_call()
    other.start()
    assert said(other.on_dtmf("*")) == ["Agent."]
    assert other.variables["intent"] == "agent"


@pytest.mark.parametrize(
    ("slot", "heard", "value"),
    [
        ("{name: n, type: number, min: 1, max: 12}", "twelve please", "12"),
        ("{name: n, type: yes_no}", "yes that's right", "yes"),
        ("{name: n, type: date}", "next friday", "2025-03-07"),
        ("{name: n, type: date}", "tomorrow", "2025-03-05"),
        ("{name: n, type: time}", "half past two", "14:30"),
        ("{name: n, type: text, min_length: 2}", "Ann Smith", "Ann Smith"),
    ],
)
def test_slot_types_read_values_from_speech(slot: str, heard: str, value: str) -> None:
    """Numbers, yes/no, dates relative to the fake clock, times and free text fill their slot."""
    call = session(one_ask(f'prompt: "?"\nslot: {slot}\n', after="got {{ n }}"))
    call.start()
    assert said(call.on_transcript(heard)) == [f"got {value}"]


def test_slot_limits_and_yes_no_keys() -> None:
    """A number out of range is a no-match; keys 1 and 2 answer a yes/no slot."""
    call = session(one_ask('prompt: "How many?"\nslot: {name: n, type: number, min: 1, max: 12}\n',
                           after="{{ n }}"))
    call.start()
    assert said(call.on_transcript("forty")) == ["How many?"]
    yes_no = session(one_ask('prompt: "OK?"\nslot: {name: ok, type: yes_no}\n', after="{{ ok }}"))
    yes_no.start()
    assert said(yes_no.on_dtmf("2")) == ["no"]


def test_ask_speech_only_rejects_keys_and_listen_says_so() -> None:
    """input: speech makes keys a no-match and tells the session not to collect them."""
    call = session(one_ask('prompt: "Say it."\ninput: speech\nintents: {yes: {examples: [yes]}}\n'))
    listen = call.start()[-1]
    assert isinstance(listen, Listen) and (listen.speech, listen.dtmf) == (True, False)
    assert said(call.on_dtmf("1")) == ["Say it."]


def test_intent_slots_fill_and_skip_if_set_skips_the_asks() -> None:
    """An intent's slots read the same sentence; asks with skip_if_set then are skipped."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {timezone: America/New_York}
            steps:
              - ask:
                  prompt: "How can I help?"
                  intents:
                    book: {examples: ["book an appointment"], slots: {day: date, at: time}}
              - ask:
                  prompt: "Which day?"
                  slot: {name: day, type: date}
                  skip_if_set: true
              - ask:
                  prompt: "What time?"
                  slot: {name: at, type: time}
                  skip_if_set: true
              - say: "Booked {{ day | date }} at {{ at | time }}."
        """)
    call.start()
    actions = call.on_transcript("I want to book an appointment on friday at 3 pm")
    assert said(actions) == ["Booked Friday, March 7 at 3 PM."]
    assert [e.kind for e in call.history].count("skipped") == 2


def test_an_intent_with_a_key_and_no_examples_takes_its_spoken_key_only() -> None:
    """An intent bound to a key alone is chosen by the key said aloud; sentences are matched
    against the other intents' examples, by words and meaning, without it."""
    body = ('prompt: "?"\nno_match: {reprompts: ["Sorry?"]}\nintents:\n'
            '  balance: {examples: ["check my balance"], dtmf: "1"}\n  hours: {dtmf: "2"}\n')
    for heard, reply in [("two", "hours"), ("when are you open on saturday", "Sorry?"),
                         ("how much money have I got", "balance")]:
        call = session(one_ask(body, after="{{ intent }}"))
        call.start()
        assert said(call.on_transcript(heard)) == [reply], heard


def test_synonyms_widen_an_intents_examples() -> None:
    """A synonym of a word in the examples matches like the word itself."""
    call = session(one_ask(
        'prompt: "?"\nintents:\n  balance: {examples: ["check my balance"], '
        'synonyms: {balance: [funds]}, goto: done}\n', after="ok"))
    call.start()
    assert said(call.on_transcript("check my funds")) == ["ok"]


@pytest.mark.parametrize(("heard", "reply"), [
    ("one", "balance"),
    ("um, option two please", "hours"),
    ("I'll press one", "balance"),
    ("I do have one more", "Sorry?"),
    ("my two kids called you earlier", "Sorry?"),
])
def test_a_spoken_key_is_a_key_only_when_said_alone(heard: str, reply: str) -> None:
    """A DTMF-bound intent takes its key said aloud ("option two"), but a key word inside a
    longer sentence ("I do have one more") is not a key press."""
    call = session(one_ask(
        'prompt: "?"\nno_match: {reprompts: ["Sorry?"]}\nintents:\n'
        '  balance: {examples: ["check my balance"], dtmf: "1"}\n'
        '  hours: {examples: ["opening hours"], dtmf: "2"}\n', after="{{ intent }}"))
    call.start()
    assert said(call.on_transcript(heard)) == [reply]


def test_retries_repeat_the_last_reprompt_then_take_then() -> None:
    """retries: 3 with one reprompt says it three times, then goes to 'then'."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - ask:
                  prompt: "Yes or no?"
                  intents: {yes: {examples: ["yes"], goto: bye}}
                  no_input: {reprompts: ["Hello?"], retries: 3, then: bye}
              - id: bye
                say: "Bye."
        """)
    call.start()
    assert [said(call.on_no_input()) for _ in range(3)] == [["Hello?"]] * 3
    assert said(call.on_no_input()) == ["Bye."]


def test_listen_carries_recogniser_preferences() -> None:
    """Listen passes language, the ASR model pin, endpointing and intent phrases as hints."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings:
              language: en-GB
              asr_model: "parakeet-en@2.17"
              endpointing: {end_silence_ms: 500, fast_end_silence_ms: 150}
            steps:
              - ask:
                  intents: {balance: {examples: ["balance"], dtmf: "1"}}
        """)
    listen = call.start()[-1]
    assert isinstance(listen, Listen)
    assert (listen.language, listen.asr_model) == ("en-GB", "parakeet-en@2.17")
    assert listen.endpointing == Endpointing(500, 150, None)
    assert "balance" in listen.phrases and "press one" in listen.phrases
    assert listen.intents == ("balance",)


# --------------------------------------------------------------------------- set and branch


def test_set_and_branch_count_attempts_and_leave_the_loop() -> None:
    """set evaluates expressions; branch takes the first true case, else 'next'."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        variables: {tries: "0"}
        flows:
          main:
            steps:
              - id: top
                set: {tries: "{{ tries + 1 }}", label: "try {{ tries }}"}
              - branch:
                  - when: "tries >= 3"
                    goto: done
                  - when: "label == 'x'"
                    goto: done
                next: top
              - id: done
                say: "{{ label }} of {{ tries }}"
        """)
    assert said(call.start()) == ["try 3 of 3"]
    branches = [e.text for e in call.history if e.kind == "branch"]
    assert branches == ["otherwise", "otherwise", "tries >= 3"]
    assert call.call_record()["variables_set"] == {"tries": "3", "label": "try 3"}


# --------------------------------------------------------------------------- webhook

WEBHOOK_PLAN = """\
    version: 1
    routes: [{flow: main}]
    flows:
      main:
        steps:
          - id: lookup
            webhook:
              url: "{{ config.api }}/accounts"
              headers: {Authorization: "Bearer {{ config.token }}"}
              body: {account: "{{ account }}", tries: "{{ 1 + 1 }}"}
              timeout_ms: 1500
              retries: 2
              retry_backoff_ms: 100
              save_as: acct
              fields: [name, owner.city]
              on_failure: failed
          - say: "Hello {{ acct.name }}, {{ acct.owner.city | default('somewhere') }}."
          - hangup:
          - id: failed
            say: "Sorry ({{ webhook.reason }})."
    variables: {account: "42"}
    """


def test_webhook_request_is_rendered_with_the_call_variables() -> None:
    """The CallWebhook carries the URL, headers, JSON body, timeout and retry policy."""
    call = session(WEBHOOK_PLAN, api="https://api.example/v1", token="s3cret")
    (action,) = call.start()
    assert isinstance(action, CallWebhook)
    request = action.request
    assert request.url == "https://api.example/v1/accounts" and request.method == "POST"
    assert ("Authorization", "Bearer s3cret") in request.headers
    assert ("Content-Type", "application/json") in request.headers
    assert json.loads(request.body or b"") == {"account": "42", "tries": 2}
    assert (request.timeout_ms, request.retries, request.retry_backoff_ms) == (1500, 2, 100)
    assert call.waiting_for == "webhook"
    assert call.on_transcript("hello") == [] and call.history[-1].kind == "ignored"


def test_webhook_success_sets_prefixed_variables_and_continues() -> None:
    """Response fields become acct.<field>; the flow continues after the webhook."""
    call = session(WEBHOOK_PLAN, api="https://api.example")
    call.start()
    actions = call.on_webhook_result(
        WebhookResult(True, {"name": "Ann", "owner.city": "Boston"}, 200))
    assert said(actions) == ["Hello Ann, Boston."] and actions[-1] == Hangup("normal")
    assert call.variables["webhook.status"] == "ok"
    assert call.call_record()["webhooks"][0]["ok"] is True


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (WebhookResult(False, {}, None, "timeout", 3), "timeout"),
        (WebhookResult(False, {}, 503, "http 503", 3), "http 503"),
        (WebhookResult(False, {}, 200, "bad json: expected an object"), "bad json: expected an object"),
        (WebhookResult(True, {"owner.city": "x"}, 200), "missing field(s): name"),
    ],
)
def test_webhook_failures_take_the_fallback_path(result: WebhookResult, reason: str) -> None:
    """Timeouts, 5xx, bad JSON and missing declared fields all go to on_failure."""
    call = session(WEBHOOK_PLAN, api="https://api.example")
    call.start()
    assert said(call.on_webhook_result(result)) == [f"Sorry ({reason})."]
    assert call.variables["webhook.status"] == "failed"


def test_webhook_with_a_non_http_url_fails_without_a_request() -> None:
    """A config value that is not an http(s) URL fails at once, without calling anything."""
    call = session(WEBHOOK_PLAN, api="file:///etc")
    assert said(call.start()) == ["Sorry (bad url 'file:///etc/accounts': expected http:// or https://)."]


def test_get_webhook_sends_call_identity_as_query_by_default() -> None:
    """A GET without 'query' sends call_id, caller and called as query parameters."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - webhook: {url: "https://api.example/who?v=1", method: GET, save_as: who, on_failure: x}
              - id: x
                hangup:
        """)
    (action,) = call.start()
    assert action.request.url == (
        "https://api.example/who?v=1&call_id=call-7&caller=%2B15551230000&called=18005550100")
    assert action.request.body is None


def test_stale_webhook_fields_are_cleared_on_the_next_call() -> None:
    """A second call of the same webhook does not keep fields from the first answer."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: w
                webhook: {url: "https://a.example", save_as: r, on_failure: bye}
              - ask:
                  prompt: "{{ r.a | default('none') }}"
                  intents: {again: {examples: [again], goto: w}}
              - id: bye
                hangup:
        """)
    call.start()
    assert said(call.on_webhook_result(WebhookResult(True, {"a": "1"}, 200))) == ["1"]
    call.on_transcript("again")
    assert said(call.on_webhook_result(WebhookResult(True, {"b": "2"}, 200))) == ["none"]


# --------------------------------------------------------------------------- hours

HOURS_PLAN = """\
    version: 1
    routes: [{flow: main}]
    flows:
      main:
        steps:
          - hours:
              timezone: America/New_York
              open: {mon-fri: ["09:00-12:00", "13:00-17:00"], sat: "10:00-12:00"}
              holidays: [{date: "12-25", name: Christmas}, "2025-07-04"]
              closed: closed
              holiday: holiday
          - say: "Open."
          - hangup:
          - id: closed
            say: "Closed."
          - hangup:
          - id: holiday
            say: "Closed for {{ hours.holiday | default('the holiday') }}."
    """


@pytest.mark.parametrize(
    ("utc", "expected"),
    [
        (datetime(2025, 3, 4, 15, 0), "Open."),              # Tue 10:00 EST
        (datetime(2025, 3, 4, 17, 30), "Closed."),           # Tue 12:30 lunch
        (datetime(2025, 3, 4, 21, 59), "Open."),             # Tue 16:59
        (datetime(2025, 3, 4, 22, 0), "Closed."),            # Tue 17:00
        (datetime(2025, 3, 8, 15, 30), "Open."),             # Sat 10:30
        (datetime(2025, 3, 9, 15, 30), "Closed."),           # Sun
        (datetime(2025, 7, 4, 15, 0), "Closed for the holiday."),  # Fri, one-off holiday
        (datetime(2026, 12, 25, 15, 0), "Closed for Christmas."),  # every year
        (datetime(2025, 3, 10, 13, 30), "Open."),            # Mon 09:30 EDT (DST began Mar 9)
    ],
)
def test_hours_in_the_flows_timezone_with_holidays(utc: datetime, expected: str) -> None:
    """Opening windows are local time (DST included); holidays win over opening hours."""
    call = session(HOURS_PLAN, FakeClock(utc.replace(tzinfo=timezone.utc)))
    assert said(call.start()) == [expected]


def test_now_variables_use_the_flows_timezone() -> None:
    """now.* read the injected clock in the flow's timezone."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {timezone: Europe/Paris}
            steps:
              - say: "{{ now.weekday }} {{ now.date }} {{ now.time }} {{ now.hour }}"
        """, FakeClock(datetime(2025, 3, 4, 23, 30, tzinfo=timezone.utc)))
    assert said(call.start()) == ["wednesday 2025-03-05 00:30 0"]


# --------------------------------------------------------------------------- transfer and queue

TRANSFER_PLAN = """\
    version: 1
    routes: [{flow: main}]
    flows:
      main:
        steps:
          - id: desk
            transfer: {to: "sip:desk@example.com", mode: bridged, timeout_ms: 20000, on_failure: busy}
          - id: busy
            say: "Busy: {{ transfer.reason }}."
          - queue:
              name: support
              uri: "sip:support@queues.example"
              announce: "Please hold."
              on_failure: gone
          - id: gone
            hangup: {reason: nobody}
    """


def test_bridged_transfer_connects_and_ends_the_dialogue() -> None:
    """A bridged transfer asks the session to dial; success leaves the bridge up, no hangup."""
    call = session(TRANSFER_PLAN)
    assert call.start() == [Transfer("sip:desk@example.com", "bridged", 20000)]
    assert call.on_transfer_succeeded() == []
    assert call.ended and call.call_record()["transfer"]["result"] == "succeeded"
    assert call.on_dtmf("1") == []


def test_failed_transfer_then_queue_with_announcement() -> None:
    """A failed transfer continues at on_failure; a queue announces, then transfers blind."""
    call = session(TRANSFER_PLAN)
    call.start()
    actions = call.on_transfer_failed("486 Busy Here")
    assert said(actions) == ["Busy: 486 Busy Here.", "Please hold."]
    assert actions[-1] == Transfer("sip:support@queues.example", "blind", queue="support")
    assert call.on_transfer_failed("no agents") == [Hangup("nobody")]
    assert call.call_record()["transfer"] == {
        "target": "sip:support@queues.example", "mode": "blind", "queue": "support",
        "result": "failed", "reason": "no agents"}


def test_blind_transfer_success_hangs_up_as_transferred() -> None:
    """Old-style blind transfers keep their contract: success returns Hangup('transferred')."""
    call = session('version: 1\nroutes: [{flow: main}]\nflows: {main: {steps: [{transfer: "sip:a@b"}]}}\n')
    assert call.start() == [Transfer("sip:a@b")]
    assert call.on_transfer_succeeded() == [Hangup("transferred")]


# --------------------------------------------------------------------------- goto and return

SUBFLOW_PLAN = """\
    version: 1
    routes: [{flow: main}]
    flows:
      main:
        steps:
          - say: "Main."
          - goto: {flow: verify}
          - say: "Back in main, {{ verified }}."
          - goto: {flow: verify, step: quick}
          - say: "Done."
          - goto: finish
          - id: finish
            hangup: {reason: finished}
      verify:
        steps:
          - set: {verified: "yes"}
          - say: "Verified."
          - return:
          - id: quick
            say: "Quick check."
    """


def test_goto_enters_sub_flows_and_return_comes_back() -> None:
    """goto {flow} runs a sub-flow; return (or its end) continues after the goto."""
    call = session(SUBFLOW_PLAN)
    actions = call.start()
    assert said(actions) == ["Main.", "Verified.", "Back in main, yes.", "Quick check.", "Done."]
    assert actions[-1] == Hangup("finished")
    assert [e.text for e in call.history if e.kind == "goto"] == [
        "verify/#1", "verify/quick", "finish"]


def test_runaway_sub_flow_recursion_is_cut_off() -> None:
    """A flow that enters itself forever hits the depth limit and hangs up."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - goto: {flow: main}
        """)
    assert call.start()[-1] == Hangup("stack_overflow")


# --------------------------------------------------------------------------- record and model

RECORD_PLAN = """\
    version: 1
    routes: [{flow: main}]
    flows:
      main:
        needs_model: true
        steps:
          - record:
              prompt: "Leave a message."
              file: "vm-{{ caller }}-{{ call_id }}.wav"
              max_ms: 30000
              beep: false
              save_as: msg
              on_failure: no_message
          - say: "Saved {{ msg.duration_ms }} ms."
          - id: chat
            ask:
              prompt: "What else?"
              slot: {name: question, type: text}
          - model:
              instructions: "You are the bank's assistant. Caller: {{ caller }}."
              input: "{{ question }}"
              timeout_ms: 4000
              on_failure: no_model
          - hangup: {reason: answered}
          - id: no_message
            say: "No message."
          - hangup:
          - id: no_model
            say: "I cannot answer that."
    """


def test_record_issues_a_safe_file_name_and_stores_the_result() -> None:
    """Record's path is a sanitised bare file name; on_record_done sets msg.* and continues."""
    call = session(RECORD_PLAN)
    actions = call.start()
    assert said(actions) == ["Leave a message."]
    assert actions[-1] == Record("vm-+15551230000-call-7.wav", 30000, False, "#")
    actions = call.on_record_done("/var/rec/vm.wav", 4200)
    assert said(actions) == ["Saved 4200 ms.", "What else?"]
    assert call.variables["msg.path"] == "/var/rec/vm.wav"


def test_record_failure_takes_on_failure() -> None:
    """A recording that could not be made continues at on_failure."""
    call = session(RECORD_PLAN)
    call.start()
    assert said(call.on_record_failed("disk full")) == ["No message."]


def test_model_step_asks_with_history_and_says_the_reply() -> None:
    """AskModel carries instructions, the caller's words and the conversation so far."""
    call = session(RECORD_PLAN)
    call.start()
    call.on_record_done("/r.wav", 1000)
    (ask,) = call.on_transcript("what is your routing number")
    assert isinstance(ask, AskModel)
    assert ask.text == "what is your routing number" and ask.timeout_ms == 4000
    assert ask.instructions == "You are the bank's assistant. Caller: +15551230000."
    assert ask.history[-2:] == (("agent", "What else?"), ("caller", "what is your routing number"))
    actions = call.on_model_reply("It is 021000021.")
    assert said(actions) == ["It is 021000021."] and actions[-1] == Hangup("answered")
    assert call.variables["reply"] == "It is 021000021."


def test_model_failure_takes_on_failure() -> None:
    """Without a model (or on error) the step's on_failure runs."""
    call = session(RECORD_PLAN)
    call.start()
    call.on_record_done("/r.wav", 1000)
    call.on_transcript("hello")
    assert said(call.on_model_failed("no dialogue model configured")) == ["I cannot answer that."]


# --------------------------------------------------------------------------- call-level


def test_max_call_duration_and_timeout_input() -> None:
    """The flow's limit is exposed; on_call_timeout hangs up with reason max_duration."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            settings: {max_call_duration_s: 120}
            steps:
              - ask: {prompt: "Hi", intents: {x: {examples: [x]}}}
        """)
    assert call.max_call_duration_ms == 120_000
    assert call.on_call_timeout() == []  # not started yet
    call.start()
    assert call.on_call_timeout() == [Hangup("max_duration")]
    assert call.ended and call.on_call_timeout() == []


def test_outcomes_that_were_not_asked_for_are_ignored() -> None:
    """A webhook result, recording or model reply while listening changes nothing."""
    call = session(one_ask('prompt: "?"\nintents: {x: {examples: [x]}}\n'))
    call.start()
    assert call.on_webhook_result(WebhookResult(True)) == []
    assert call.on_record_done("/x.wav", 1) == [] and call.on_model_reply("hi") == []
    assert call.on_record_failed("x") == [] and call.on_model_failed("x") == []
    assert call.expects_input


def test_a_call_keeps_its_dialplan_version() -> None:
    """The session holds the Dialplan it started with (hot reload never changes it)."""
    old = plan(one_ask('prompt: "Old?"\nintents: {x: {examples: [x]}}\n'))
    call = DialogueSession(old, "main", {}, now=FakeClock())
    call.start()
    assert call.dialplan is old and call.call_record()["dialplan"] == old.digest


def test_call_record_summarises_the_path() -> None:
    """call_record lists steps run, intents with scores and the end reason."""
    call = session("""\
        version: 1
        routes: [{flow: main}]
        flows:
          main:
            steps:
              - id: menu
                ask: {prompt: "?", intents: {bye: {examples: [goodbye], dtmf: "9", goto: end}}}
              - id: end
                hangup: {reason: done}
        """)
    call.start()
    call.on_dtmf("9")
    record = call.call_record()
    assert record["path"] == ["main/menu", "main/end"]
    assert record["intents"] == [{"step": "main/menu", "intent": "bye", "score": 1.0,
                                  "input": "dtmf 9"}]
    assert record["end_reason"] == "done" and record["flow"] == "main"


def test_default_clock_is_only_a_fallback() -> None:
    """Without an injected clock the engine still works (wall clock, UTC)."""
    call = DialogueSession(plan('version: 1\nroutes: [{flow: main}]\nflows: {main: {steps: '
                                '[{say: "{{ now.year }}"}]}}\n'), "main", {})
    year = said(call.start())[0]
    assert abs(int(year) - (datetime.now(timezone.utc) + timedelta(0)).year) <= 1
