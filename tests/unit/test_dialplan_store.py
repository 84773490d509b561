"""Tests for agent.dialplan.store: safe hot reload, driven by twisted.internet.task.Clock."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from agent.dialplan.engine import DialogueSession, Say
from agent.dialplan.model import Dialplan, DialplanError, load_dialplans
from agent.dialplan.store import DialplanStore


def text(greeting: str) -> str:
    return textwrap.dedent(f"""\
        version: 1
        routes: [{{flow: main}}]
        flows:
          main:
            steps:
              - ask:
                  prompt: "{greeting}"
                  intents: {{bye: {{examples: [goodbye]}}}}
        """)


BROKEN = "version: 1\nroutes: [{flow: main}]\nflows: {main: {steps: [{sayy: x}]}}\n"


def write(path: Path, content: str, bump_s: int = 0) -> None:
    """Write *content*; move the mtime forward so a change is visible even within one tick."""
    path.write_text(content)
    if bump_s:
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump_s * 1_000_000_000))


def greeting(plan: Dialplan) -> str:
    actions = DialogueSession(plan, "main", {}).start()
    return next(a.text for a in actions if isinstance(a, Say))


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "line.yaml"
    write(path, text("Version one."))
    return path


def test_first_load_must_be_valid(tmp_path: Path) -> None:
    """With nothing to fall back to, an invalid dialplan at start raises DialplanError."""
    path = tmp_path / "bad.yaml"
    write(path, BROKEN)
    with pytest.raises(DialplanError):
        DialplanStore([str(path)], Clock())


def test_reload_swaps_in_a_valid_new_version(plan_file: Path) -> None:
    """reload() (SIGHUP) loads the new text; new calls get it, generation and callback advance."""
    reloads: list[tuple[str, str]] = []
    store = DialplanStore([str(plan_file)], Clock(),
                          on_reload=lambda new, old: reloads.append((old.digest, new.digest)))
    first = store.current
    write(plan_file, text("Version two."), bump_s=1)
    assert store.reload() is True
    assert greeting(store.current) == "Version two."
    assert store.generation == 2 and reloads == [(first.digest, store.current.digest)]


def test_invalid_reload_keeps_the_old_version_and_counts_the_error(plan_file: Path) -> None:
    """A broken file is rejected: the old version stays, the error is counted and reported."""
    errors: list[Exception] = []
    store = DialplanStore([str(plan_file)], Clock(), on_error=errors.append)
    old = store.current
    write(plan_file, BROKEN, bump_s=1)
    assert store.reload() is False
    assert store.current is old and store.errors_total == 1
    assert isinstance(errors[0], DialplanError)
    assert f"{plan_file}:3:" in str(store.last_error) and "sayy" in str(store.last_error)


def test_calls_in_progress_keep_the_version_they_started_with(plan_file: Path) -> None:
    """A call started before a reload still runs the old dialplan; a new call runs the new one."""
    store = DialplanStore([str(plan_file)], Clock())
    ongoing = DialogueSession(store.current, "main", {})
    ongoing.start()
    write(plan_file, text("Version two."), bump_s=1)
    store.reload()
    assert ongoing.on_no_input()[0].text == "Version one."  # the reprompt of the old version
    assert greeting(store.current) == "Version two."


def test_watch_reloads_when_the_content_changes(plan_file: Path) -> None:
    """The watcher polls on the clock and reloads on a content change, not before."""
    clock = Clock()
    store = DialplanStore([str(plan_file)], clock)
    store.watch(interval_s=1.0)
    write(plan_file, text("Version two."), bump_s=1)
    clock.advance(0.5)
    assert greeting(store.current) == "Version one."
    clock.advance(0.5)
    assert greeting(store.current) == "Version two."
    store.stop()
    write(plan_file, text("Version three."), bump_s=2)
    clock.advance(5)
    assert greeting(store.current) == "Version two."


def test_watch_ignores_touches_and_reports_a_broken_save_once(plan_file: Path) -> None:
    """A touch with the same content reloads nothing; a broken save is logged once, not every
    second; fixing the file reloads."""
    clock = Clock()
    errors: list[Exception] = []
    store = DialplanStore([str(plan_file)], clock, on_error=errors.append)
    store.watch(interval_s=1.0)
    write(plan_file, text("Version one."), bump_s=1)  # same content, new mtime
    clock.advance(1)
    assert store.generation == 1 and store.reloads_total == 0
    write(plan_file, BROKEN, bump_s=2)
    clock.advance(1)
    clock.advance(1)
    clock.advance(1)
    assert len(errors) == 1 and store.errors_total == 1
    assert greeting(store.current) == "Version one."
    write(plan_file, text("Fixed."), bump_s=3)
    clock.advance(1)
    assert greeting(store.current) == "Fixed." and store.last_error is None
    store.stop()


def test_a_deleted_file_is_an_error_and_the_old_version_stays(plan_file: Path) -> None:
    """Removing a file mid-run is reported like any invalid version."""
    clock = Clock()
    store = DialplanStore([str(plan_file)], clock)
    store.watch(interval_s=1.0)
    plan_file.unlink()
    clock.advance(1)
    assert store.errors_total == 1 and "cannot read file" in str(store.last_error)
    assert greeting(store.current) == "Version one."
    store.stop()


def test_unchanged_reload_keeps_the_same_object(plan_file: Path) -> None:
    """A SIGHUP with nothing changed keeps the current object and generation."""
    store = DialplanStore([str(plan_file)], Clock(), loader=load_dialplans)
    current = store.current
    assert store.reload() is True
    assert store.current is current and store.generation == 1
