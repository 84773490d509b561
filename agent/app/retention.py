"""Retention of recordings: files older than a number of days, or the oldest beyond a total size, go.

A Twisted ``LoopingCall`` runs the check every ``check_interval_s``; the directory walk and the
deletions run in a thread (a large directory takes a while), never touching a recording in progress.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from twisted.internet import threads
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

log = Logger(namespace="openclaw.server")

RECORDING_SUFFIXES = (".wav",)


@dataclass(frozen=True)
class RetentionOutcome:
    kept: int
    removed: int
    removed_bytes: int
    kept_bytes: int


def apply_retention(directory: str, *, max_age_days: float, max_total_mb: float, now_s: float,
                    in_use: Iterable[str] = ()) -> RetentionOutcome:
    """Remove recordings in *directory* (and below) older than *max_age_days*, then the oldest until
    the rest fits in *max_total_mb* (0: no limit). Files in *in_use* are never removed."""
    busy = {os.path.abspath(p) for p in in_use}
    files: list[tuple[float, int, str]] = []
    for folder, _dirs, names in os.walk(directory):
        for name in names:
            if not name.lower().endswith(RECORDING_SUFFIXES):
                continue
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, path))
    files.sort()
    removed = removed_bytes = 0
    keep: list[tuple[float, int, str]] = []
    for mtime, size, path in files:
        if max_age_days > 0 and now_s - mtime > max_age_days * 86400 and os.path.abspath(path) not in busy:
            if _remove(path):
                removed, removed_bytes = removed + 1, removed_bytes + size
                continue
        keep.append((mtime, size, path))
    total = sum(size for _, size, _ in keep)
    limit = max_total_mb * 1024 * 1024
    if max_total_mb > 0 and total > limit:
        for entry in list(keep):
            if total <= limit:
                break
            _, size, path = entry
            if os.path.abspath(path) in busy:
                continue
            if _remove(path):
                keep.remove(entry)
                total -= size
                removed, removed_bytes = removed + 1, removed_bytes + size
    return RetentionOutcome(len(keep), removed, removed_bytes, total)


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError as e:
        log.error("recording {path} not removed: {err}", path=path, err=e)
        return False


class RecordingRetention:
    """Applies the retention settings to the recordings directory on a ``LoopingCall``."""

    def __init__(self, reactor: Any, directory: str, settings: Any, in_use: Callable[[], Iterable[str]]) -> None:
        self._reactor = reactor
        self._directory = directory
        self._settings = settings
        self._in_use = in_use
        self._loop: LoopingCall | None = None
        self._running = False

    @property
    def enabled(self) -> bool:
        return bool(self._directory) and (self._settings.max_age_days > 0 or self._settings.max_total_mb > 0)

    def start(self) -> None:
        if not self.enabled:
            return
        self._loop = LoopingCall(self.check)
        self._loop.clock = self._reactor
        self._loop.start(self._settings.check_interval_s, now=True)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def check(self) -> Any:
        """One pass (skipped while the previous one still runs); fires with its outcome."""
        if self._running:
            return None
        self._running = True
        busy = list(self._in_use())
        d = threads.deferToThreadPool(self._reactor, self._reactor.getThreadPool(), apply_retention,
                                      self._directory, max_age_days=self._settings.max_age_days,
                                      max_total_mb=self._settings.max_total_mb, now_s=time.time(), in_use=busy)

        def done(outcome: RetentionOutcome) -> RetentionOutcome:
            self._running = False
            if outcome.removed:
                log.info("recordings retention: removed {n} files ({mb:.1f} MB); {kept} kept ({kmb:.1f} MB)",
                         n=outcome.removed, mb=outcome.removed_bytes / 1048576, kept=outcome.kept,
                         kmb=outcome.kept_bytes / 1048576)
            return outcome

        def failed(f: Any) -> None:
            self._running = False
            log.failure("recordings retention failed", f)

        d.addCallbacks(done, failed)
        return d
