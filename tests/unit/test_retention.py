"""Retention of recordings by age and by total size; a recording in progress is never removed."""
from __future__ import annotations

import os
import time

from agent.app.retention import apply_retention


def _wav(path, size: int, age_days: float, now: float) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    os.utime(path, (now - age_days * 86400, now - age_days * 86400))
    return str(path)


def test_files_older_than_the_age_limit_go(tmp_path) -> None:
    now = time.time()
    old = _wav(tmp_path / "a" / "old.wav", 10, 40, now)
    new = _wav(tmp_path / "new.wav", 10, 1, now)
    other = _wav(tmp_path / "notes.txt", 10, 400, now)     # not a recording: left alone
    out = apply_retention(str(tmp_path), max_age_days=30, max_total_mb=0, now_s=now)
    assert (out.removed, out.kept) == (1, 1)
    assert not os.path.exists(old) and os.path.exists(new) and os.path.exists(other)


def test_oldest_files_go_until_the_total_fits(tmp_path) -> None:
    now = time.time()
    mb = 1024 * 1024
    files = [_wav(tmp_path / f"r{i}.wav", mb, 10 - i, now) for i in range(5)]   # r0 oldest
    out = apply_retention(str(tmp_path), max_age_days=0, max_total_mb=2.5, now_s=now)
    assert [os.path.exists(f) for f in files] == [False, False, False, True, True]
    assert out.removed == 3 and out.kept_bytes == 2 * mb


def test_a_recording_in_progress_is_kept_even_when_oldest(tmp_path) -> None:
    now = time.time()
    busy = _wav(tmp_path / "busy.wav", 2048, 90, now)
    out = apply_retention(str(tmp_path), max_age_days=1, max_total_mb=0.001, now_s=now, in_use=[busy])
    assert os.path.exists(busy) and out.removed == 0


def test_no_limits_remove_nothing(tmp_path) -> None:
    now = time.time()
    f = _wav(tmp_path / "x.wav", 10, 1000, now)
    assert apply_retention(str(tmp_path), max_age_days=0, max_total_mb=0, now_s=now).removed == 0
    assert os.path.exists(f)
