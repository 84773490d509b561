"""PlayoutBuffer: segments in, fixed frames out, with what was played accounted for."""
from media.playout import PlayoutBuffer, PlayoutEventType

FRAME = 320  # 10 ms at 16 kHz


def _collect():
    events = []
    return events, PlayoutBuffer(on_event=events.append, monotonic=lambda: 1.0)


def test_empty_buffer_gives_silence_frames():
    """With nothing queued the bridge gets digital silence of the requested size."""
    _, buf = _collect()
    assert buf.pull_frame(FRAME) == bytes(FRAME)
    assert buf.voiced_frames == 0


def test_segment_plays_in_order_and_reports_start_and_finish():
    """A segment's bytes come out in order, padded at the end, with STARTED then FINISHED."""
    events, buf = _collect()
    pcm = bytes(range(256)) * 3  # 768 bytes: 2 full frames + 128 bytes
    sid = buf.play(pcm)
    out = buf.pull_frame(FRAME) + buf.pull_frame(FRAME) + buf.pull_frame(FRAME)
    assert out[:768] == pcm
    assert out[768:] == bytes(3 * FRAME - 768)
    assert [e.type for e in events] == [PlayoutEventType.STARTED, PlayoutEventType.FINISHED]
    assert events[1].segment_id == sid and events[1].played_bytes == 768 == events[1].total_bytes
    assert not buf.busy


def test_streamed_segment_waits_for_close_before_finishing():
    """An open segment that runs dry is an underrun, not the end of the prompt."""
    events, buf = _collect()
    sid = buf.open_segment()
    buf.append(sid, b"\x01" * FRAME)
    buf.pull_frame(FRAME)
    assert buf.pull_frame(FRAME) == bytes(FRAME)
    assert buf.underruns == 1
    assert [e.type for e in events] == [PlayoutEventType.STARTED]
    buf.append(sid, b"\x02" * FRAME)
    assert buf.pull_frame(FRAME) == b"\x02" * FRAME
    buf.close_segment(sid)
    assert events[-1].type is PlayoutEventType.FINISHED
    assert events[-1].played_bytes == 2 * FRAME


def test_flush_drops_queued_audio_and_reports_how_much_was_heard():
    """Barge-in: a flush silences the next frame and says how much of each prompt played."""
    events, buf = _collect()
    first = buf.play(b"\x05" * (FRAME * 4))
    second = buf.play(b"\x06" * FRAME)
    buf.pull_frame(FRAME)
    flushed = buf.flush()
    assert [(e.segment_id, e.played_bytes, e.total_bytes) for e in flushed] == [
        (first, FRAME, FRAME * 4), (second, 0, FRAME)]
    assert all(e.type is PlayoutEventType.FLUSHED for e in flushed)
    assert buf.pull_frame(FRAME) == bytes(FRAME)
    buf.append(first, b"\x07" * FRAME)  # late streamed audio of a flushed prompt is dropped
    assert buf.pull_frame(FRAME) == bytes(FRAME)


def test_segments_play_back_to_back_within_one_frame():
    """The end of one segment and the start of the next share a frame without a gap."""
    _, buf = _collect()
    buf.play(b"\x01" * 100)
    buf.play(b"\x02" * 300)
    frame = buf.pull_frame(FRAME)
    assert frame == b"\x01" * 100 + b"\x02" * 220
