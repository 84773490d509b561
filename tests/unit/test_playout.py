"""PlayoutBuffer: segments in, fixed frames out, with what was played accounted for."""
import numpy as np

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


def _tone(frames: int, amplitude: int = 3000) -> bytes:
    """*frames* 10 ms frames of a square wave at *amplitude* (about -21 dBFS for 3000)."""
    return (amplitude.to_bytes(2, "little", signed=True) + (-amplitude).to_bytes(2, "little", signed=True)) \
        * (frames * FRAME // 4)


class _Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_fades_out_and_a_resume_fades_in_instead_of_clicking():
    """Paused mid-word, the frame the pause came in goes quiet over its 10 ms, then silence; the
    first frame after the resume rises from silence. No jump between samples is larger than the
    word's own."""
    clock = _Clock()
    buf = PlayoutBuffer(monotonic=clock, sample_rate_hz=16000)
    word = _tone(10, amplitude=8000)
    buf.play(word)
    buf.pull_frame(FRAME)
    assert buf.pause()
    faded = np.frombuffer(buf.pull_frame(FRAME), dtype="<i2")
    assert abs(int(faded[0])) > 7000 and abs(int(faded[-1])) < 100
    assert buf.pull_frame(FRAME) == bytes(FRAME)
    clock.now += 0.05
    buf.resume()
    rising = np.frombuffer(buf.pull_frame(FRAME), dtype="<i2")
    assert abs(int(rising[0])) < 100 and abs(int(rising[-1])) > 7000
    assert buf.pull_frame(FRAME) == word[3 * FRAME: 4 * FRAME]


def test_resume_skips_the_prompt_silence_the_pause_stood_in_for():
    """Paused at the end of a sentence for 300 ms, the prompt goes on with its next sentence:
    the 200 ms of silence between the two is not played after the pause as well."""
    clock = _Clock()
    buf = PlayoutBuffer(monotonic=clock, sample_rate_hz=16000)
    first, gap, second = _tone(3), bytes(20 * FRAME), _tone(2, amplitude=5000)
    buf.play(first + gap + second)
    for _ in range(3):
        buf.pull_frame(FRAME)
    assert buf.pause()
    clock.now += 0.3
    assert buf.pull_frame(FRAME) == bytes(FRAME)  # paused: the fade of the silence, then silence
    assert buf.pull_frame(FRAME) == bytes(FRAME)
    buf.resume()
    assert buf.pull_frame(FRAME) != bytes(FRAME)  # the next sentence, fading in
    assert buf.pull_frame(FRAME) == second[FRAME:]
    assert buf.skipped_bytes == len(gap) - FRAME


def _paused_after_one_frame(pcm: bytes, pause_s: float, frames_after: int) -> tuple[PlayoutBuffer, bytes]:
    """Play *pcm*, pause after its first frame (the pause fades out the second) for *pause_s*,
    resume, and pull *frames_after* frames."""
    clock = _Clock()
    buf = PlayoutBuffer(monotonic=clock, sample_rate_hz=16000)
    buf.play(pcm)
    buf.pull_frame(FRAME)
    assert buf.pause()
    buf.pull_frame(FRAME)
    clock.now += pause_s
    buf.resume()
    return buf, b"".join(buf.pull_frame(FRAME) for _ in range(frames_after))


def test_resume_skips_no_more_silence_than_the_pause_lasted():
    """Paused 100 ms inside a word: the rest of the word (faded out by the pause) is not played
    again; 100 ms of the 200 ms silence after it is skipped. Words are never skipped."""
    word, gap = _tone(2), bytes(20 * FRAME)
    buf, out = _paused_after_one_frame(word + gap + word, 0.1, 12)
    assert out == bytes(10 * FRAME) + word
    assert buf.skipped_bytes == 10 * FRAME


def test_resume_skips_no_silence_that_comes_after_more_than_the_end_of_a_word():
    """Paused early in a long stretch of speech: the silence 300 ms later is the prompt's own."""
    speech, gap = _tone(32), bytes(10 * FRAME)
    buf, out = _paused_after_one_frame(speech + gap + speech, 0.3, 41)
    assert out[FRAME:] == speech[3 * FRAME:] + gap + speech[:FRAME]
    assert buf.skipped_bytes == 0


def test_a_pause_in_the_last_frame_of_a_prompt_lets_it_finish():
    """The fade-out frame that plays a prompt's last audio finishes the prompt: the call record
    must not show it interrupted if the pause then becomes a barge-in."""
    events, buf = _collect()
    buf.play(_tone(1) + _tone(1)[: FRAME // 2])
    buf.pull_frame(FRAME)
    assert buf.pause()
    buf.pull_frame(FRAME)
    assert events[-1].type is PlayoutEventType.FINISHED and not buf.busy
    assert buf.flush() == []


def test_words_left_tells_a_prompts_closing_silence_from_words_still_to_come():
    """Paused in a prompt's closing silence (faint hiss under -50 dBFS, as a synthesiser leaves
    it), none of its words are held back; paused before its last word, or with a streamed prompt
    whose rest has not come yet, some are."""
    hiss = _tone(30, amplitude=50)  # about -56 dBFS
    for pcm, pulled, complete, left in (
            (_tone(3) + hiss, 4, True, False),
            (_tone(3) + hiss + _tone(1), 4, True, True),
            (_tone(3) + hiss, 4, False, True),
            (_tone(3), 3, True, False)):
        _, buf = _collect()
        sid = buf.open_segment()
        buf.append(sid, pcm)
        if complete:
            buf.close_segment(sid)
        for _ in range(pulled):
            buf.pull_frame(FRAME)
        buf.pause()
        assert buf.words_left() is left, (len(pcm), pulled, complete)


def _samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.int32)


def test_a_duck_lowers_the_prompt_over_its_ramp_and_plays_it_on_underneath():
    """Ducked, the prompt keeps playing (its time goes on: nothing is held back), 24 dB down
    after a 5 ms ramp, with no step between samples larger than the prompt's own; a paused
    prompt ducked again plays on at the ducked level."""
    buf = PlayoutBuffer(sample_rate_hz=16000)
    word = np.full(FRAME // 2 * 6, 8000, dtype="<i2").tobytes()
    buf.play(word)
    buf.pull_frame(FRAME)
    assert buf.duck()
    ramp = _samples(buf.pull_frame(FRAME))
    assert ramp[0] > 7900 and abs(int(ramp[80]) - round(8000 * 10 ** (-24 / 20))) <= 1
    assert np.max(np.abs(np.diff(ramp))) < 100  # a ramp, not a jump
    assert _samples(buf.pull_frame(FRAME)).max() == round(8000 * 10 ** (-24 / 20))
    buf.pause()
    assert buf.ducked and buf.duck() and not buf.paused  # ducked again: resumed, at the same level
    assert _samples(buf.pull_frame(FRAME)).max() == round(8000 * 10 ** (-24 / 20))
    events = []
    buf._on_event = events.append
    for _ in range(2):
        buf.pull_frame(FRAME)
    assert events == [] and buf.paused  # all of it played, on time; it waits at its end
    assert buf.pull_frame(FRAME) == bytes(FRAME)
    buf.unduck()
    buf.pull_frame(FRAME)
    assert [e.type for e in events] == [PlayoutEventType.FINISHED]


def test_an_unduck_ramps_back_up_without_a_gap():
    """Back up over 40 ms: every sample of the ramp is prompt audio between the ducked and the
    full level, rising, and the frame after it is the prompt as queued."""
    buf = PlayoutBuffer(sample_rate_hz=16000)
    tone = _tone(12, amplitude=8000)
    buf.play(tone)
    buf.duck()
    buf.pull_frame(FRAME)
    buf.pull_frame(FRAME)
    buf.unduck()
    assert not buf.ducked
    ramp = np.abs(_samples(buf.pull_frame(FRAME) + buf.pull_frame(FRAME) + buf.pull_frame(FRAME)
                           + buf.pull_frame(FRAME)))
    assert ramp.min() >= 500 and np.all(np.diff(ramp) >= 0) and ramp[-1] == 8000
    assert buf.pull_frame(FRAME) == tone[6 * FRAME: 7 * FRAME]
    assert buf.gain == 1.0


def test_a_ducked_prompt_waits_at_its_end_and_a_flush_ends_the_duck():
    """A voice still being judged when a prompt has played out ducked holds it at its end, so
    the next prompt does not start under the voice; a flush (the interruption) drops both and
    leaves the next reply at its own level."""
    buf = PlayoutBuffer(sample_rate_hz=16000)
    events = []
    buf._on_event = events.append
    buf.play(_tone(1, amplitude=8000))
    buf.duck()
    buf.pull_frame(FRAME)
    buf.play(_tone(2, amplitude=8000))
    assert buf.pull_frame(FRAME) == bytes(FRAME) and buf.paused
    assert [e.type for e in events] == [PlayoutEventType.STARTED]
    assert [e.type for e in buf.flush()] == [PlayoutEventType.FLUSHED, PlayoutEventType.FLUSHED]
    reply = _tone(1, amplitude=8000)
    buf.play(reply)
    assert buf.pull_frame(FRAME) == reply and not buf.ducked


def test_a_prompt_ducked_without_holding_at_its_end_ends_and_the_next_plays_on_ducked():
    """Ducked after a voice already judged (``hold_at_end=False``), a prompt that plays out ends
    as usual and the next one starts at the ducked level until the unduck; a later duck for a
    voice still being judged holds at the end again."""
    buf = PlayoutBuffer(sample_rate_hz=16000)
    events = []
    buf._on_event = events.append
    buf.play(_tone(1, amplitude=8000))
    buf.duck(hold_at_end=False)
    buf.pull_frame(FRAME)
    buf.play(_tone(2, amplitude=8000))
    out = _samples(buf.pull_frame(FRAME))
    assert [e.type for e in events] == [PlayoutEventType.STARTED, PlayoutEventType.FINISHED,
                                        PlayoutEventType.STARTED]
    assert not buf.paused and 0 < np.abs(out).max() <= round(8000 * 10 ** (-24 / 20))
    buf.duck()  # a new voice: the held end is back
    buf.pull_frame(FRAME)
    assert buf.pull_frame(FRAME) == bytes(FRAME) and buf.paused


def test_nothing_playing_is_not_ducked():
    """Like a pause, a duck needs a prompt: with nothing queued it reports False."""
    buf = PlayoutBuffer(sample_rate_hz=16000)
    assert not buf.duck() and not buf.ducked
