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
