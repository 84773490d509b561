"""The test caller's printed report."""
from agent.tools.caller import CallReport, TurnResult, format_report


def test_summary_gives_the_median_and_the_worst_turn():
    """Two turns of 150 and 112 ms: median 131, worst 150 (not the upper middle value)."""
    report = CallReport("sip:1000@127.0.0.1", answered=True, codec="PCMU", turns=[
        TurnResult("check my balance", "your account balance", 150.0),
        TurnResult("what are your opening hours", "we are open", 112.0),
        TurnResult("goodbye"),
    ])
    text = format_report(report)
    assert "turn latency: median 131 ms, worst 150 ms (2 turns;" in text
    assert "no reply" in text


def test_a_turn_the_call_ended_under_is_waited_for_no_longer():
    """The agent hangs up while the caller's turn waits to be played out (its media no longer
    pulled): the wait ends with the call instead of polling for ever."""
    from types import SimpleNamespace

    from twisted.internet.task import Clock

    from agent.tools.caller import TestCaller
    clock = Clock()
    caller = TestCaller(clock, speech=None, uri="sip:1000@127.0.0.1", turns=[])
    caller.call = SimpleNamespace(disconnected=False)  # type: ignore[assignment]
    sid = caller.source.playout.play(b"\0" * 320)  # queued, never pulled
    ended: list[float] = []
    caller._wait_segment(sid).addCallback(ended.append)
    clock.advance(1.0)
    assert not ended
    caller.call.disconnected = True  # type: ignore[misc]
    clock.advance(0.02)
    assert len(ended) == 1
