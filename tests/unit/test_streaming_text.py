"""Server-sent events and sentence splitting of a streamed model reply (sans-I/O)."""
import pytest

from agent.integrations.streaming_text import SentenceSplitter, SseParser


def test_sse_events_across_arbitrary_chunk_boundaries():
    """Events split anywhere (even inside CRLF) come out whole; comments and other fields are
    ignored; multi-line data is joined; [DONE] is an ordinary event."""
    stream = b': keep-alive\r\n\r\ndata: {"a": 1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n'
    for size in (1, 2, 3, 7, len(stream)):
        parser, events = SseParser(), []
        for i in range(0, len(stream), size):
            events += parser.feed(stream[i:i + size])
        assert events == ['{"a": 1}', "line1\nline2", "[DONE]"], size


def test_sse_last_event_without_blank_line_comes_out_on_close():
    parser = SseParser()
    assert parser.feed(b"data: tail") == []
    assert parser.close() == ["tail"]


def feed_tokens(tokens):
    splitter, out = SentenceSplitter(), []
    for t in tokens:
        out.append(splitter.feed(t))
    return out, splitter.flush()


def test_a_sentence_is_complete_as_soon_as_its_mark_arrives():
    """"nine." ends a sentence in the token that carries the full stop (no waiting for the next)."""
    out, rest = feed_tokens(["We", " open", " at", " nine", ".", " We", " close", " at", " five", "!"])
    assert out[4] == ["We open at nine."]
    assert out[-1] == ["We close at five!"]
    assert rest == ""


@pytest.mark.parametrize("tokens, sentences", [
    (["It costs 3", ".", "5", " dollars", "."], ["It costs 3.5 dollars."]),
    (["Ask", " Dr", ".", " Smith", " today", "."], ["Ask Dr. Smith today."]),
    (["J", ".", " Smith", " called", "."], ["J. Smith called."]),
    (["Really?", " Yes", "."], ["Really?", "Yes."]),
    (['He said "hi."', " Then", " left", "."], ['He said "hi."', "Then left."]),
])
def test_numbers_abbreviations_and_initials_do_not_end_sentences(tokens, sentences):
    out, rest = feed_tokens(tokens)
    assert [s for batch in out for s in batch] == sentences and rest == ""


def test_the_rest_is_flushed_at_the_end():
    out, rest = feed_tokens(["No", " full", " stop", " here"])
    assert out == [[], [], [], []] and rest == "No full stop here"
