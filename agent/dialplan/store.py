"""Hot reload of dialplans: validate the new version first, keep the old one if it is invalid.

:class:`DialplanStore` holds the dialplan that new calls get (:attr:`DialplanStore.current`, an
immutable :class:`~agent.dialplan.model.Dialplan`). A call keeps the ``Dialplan`` object it started
with (the :class:`~agent.dialplan.engine.DialogueSession` holds it), so replacing ``current`` never
changes or drops a call in progress.

Reloads happen on :meth:`DialplanStore.reload` (the server calls it on SIGHUP) and, after
:meth:`DialplanStore.watch`, whenever a file's content changes: a ``LoopingCall`` on the injected
clock compares each file's mtime and size, and on a change its SHA-256, with what was loaded
(no inotify dependency; an editor's save-by-rename is seen too). A version that fails to load
is logged with every ``file:line:column`` problem, counted (:attr:`errors_total`, and the
*on_error* callback for metrics), and remembered so the same broken content is not reported
every second; the previous version stays current.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from agent.dialplan.model import Dialplan, DialplanError, load_dialplans

__all__ = ["DialplanStore", "FileState"]

log = Logger(namespace="openclaw.dialplan")


@dataclass(frozen=True)
class FileState:
    """What a dialplan file looked like: cheap ``(mtime_ns, size)`` and its content hash."""

    mtime_ns: int
    size: int
    sha256: str


def _stat(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _state(path: str) -> FileState | None:
    stat = _stat(path)
    if stat is None:
        return None
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
    return FileState(stat[0], stat[1], digest)


class DialplanStore:
    """The current dialplan, reloaded safely.

    *paths*: the dialplan files (loaded together, in order). *clock*: an ``IReactorTime`` for
    the watcher. *loader*: ``paths -> Dialplan`` raising :class:`DialplanError` (default
    :func:`~agent.dialplan.model.load_dialplans`). *on_error(error)* is called for each failed reload
    (the old version stays); *on_reload(new, old)* after each successful one. The first load
    happens in the constructor and raises :class:`DialplanError` when the files are invalid
    (there is nothing to fall back to).
    """

    def __init__(
        self,
        paths: Sequence[str],
        clock: Any,
        loader: Callable[[Sequence[str]], Dialplan] = load_dialplans,
        on_error: Callable[[Exception], None] | None = None,
        on_reload: Callable[[Dialplan, Dialplan], None] | None = None,
    ) -> None:
        if not paths:
            raise ValueError("no dialplan files given")
        self.paths: tuple[str, ...] = tuple(str(p) for p in paths)
        self._clock = clock
        self._loader = loader
        self._on_error = on_error
        self._on_reload = on_reload
        self._loop: LoopingCall | None = None
        self.errors_total = 0
        self.reloads_total = 0
        self.generation = 1
        self.last_error: str | None = None
        states = self._states()
        self._current = loader(self.paths)
        self._loaded_states = states
        self._failed_states: tuple[FileState | None, ...] | None = None

    @property
    def current(self) -> Dialplan:
        """The dialplan new calls get."""
        return self._current

    def reload(self) -> bool:
        """Load the files again; replace :attr:`current` only if the new version is valid.

        Returns True when the current dialplan is valid and up to date with the files (also when
        nothing changed), False when the new version was rejected.
        """
        states = self._states()
        try:
            new = self._loader(self.paths)
        except (DialplanError, ValueError, OSError) as exc:
            self.errors_total += 1
            self.last_error = str(exc)
            self._failed_states = states
            log.error(
                "dialplan reload rejected, keeping version {digest}:\n{error}",
                digest=self._current.digest, error=str(exc),
            )
            if self._on_error is not None:
                self._on_error(exc)
            return False
        self._loaded_states = states
        self._failed_states = None
        self.last_error = None
        if new.digest and new.digest == self._current.digest:
            return True
        old, self._current = self._current, new
        self.generation += 1
        self.reloads_total += 1
        log.info(
            "dialplan reloaded: version {old} -> {new} (generation {generation})",
            old=old.digest, new=new.digest, generation=self.generation,
        )
        if self._on_reload is not None:
            self._on_reload(new, old)
        return True

    def check(self) -> bool | None:
        """Poll the files once: reload if their content changed since the last load attempt.

        Returns None when nothing changed, else what :meth:`reload` returned.
        """
        known = self._loaded_states
        changed = False
        for path, state in zip(self.paths, known):
            stat = _stat(path)
            if state is None or stat is None:
                if (state is None) != (stat is None):
                    changed = True
                    break
                continue
            if stat != (state.mtime_ns, state.size):
                fresh = _state(path)
                if fresh is None or fresh.sha256 != state.sha256:
                    changed = True
                    break
        if not changed:
            # Touched but identical: remember the new mtimes so we stop hashing.
            self._loaded_states = self._states_cheap()
            return None
        states = self._states()
        if self._failed_states is not None and _same_content(states, self._failed_states):
            return None  # this broken version was already reported
        return self.reload()

    def watch(self, interval_s: float = 1.0) -> None:
        """Poll for changes every *interval_s* seconds on the clock (idempotent)."""
        if self._loop is not None and self._loop.running:
            return
        loop = LoopingCall(self._poll)
        loop.clock = self._clock
        self._loop = loop
        loop.start(interval_s, now=False)

    def stop(self) -> None:
        """Stop watching."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def _poll(self) -> None:
        try:
            self.check()
        except Exception as exc:  # noqa: BLE001 - a watcher must never die
            log.failure("dialplan watcher failed: {error}", error=exc)

    def _states(self) -> tuple[FileState | None, ...]:
        return tuple(_state(path) for path in self.paths)

    def _states_cheap(self) -> tuple[FileState | None, ...]:
        out: list[FileState | None] = []
        for path, state in zip(self.paths, self._loaded_states):
            stat = _stat(path)
            if stat is None or state is None:
                out.append(None if stat is None else _state(path))
            elif stat == (state.mtime_ns, state.size):
                out.append(state)
            else:
                out.append(_state(path))
        return tuple(out)


def _same_content(a: Sequence[FileState | None], b: Sequence[FileState | None]) -> bool:
    return [s.sha256 if s else None for s in a] == [s.sha256 if s else None for s in b]
