"""Call journals: a running call's record, appended and synced turn by turn, recovered after a crash.

While a call runs, each change of its record (a turn begun, a prompt said, the reply's first audio,
a barge-in, a dialogue event, a SIP state) is one JSON line appended to the call's journal file and
``fsync``-ed. When the call ends the full record goes to the call records and the journal is
removed. A journal still there when a server starts belongs to a call that a crash cut off: the
server writes its record from the journal (``end_reason: "crashed"``) and removes it.

Writes run in order on one thread of their own (``fsync`` takes milliseconds on a disk; the
reactor thread carries the calls' media decisions and must not wait for it).
"""
from __future__ import annotations

import json
import os
import re
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

from twisted.logger import Logger

from agent.secrets import redact_value

log = Logger(namespace="openclaw.server")

#: how many of a call's latest turns are compared for changes at each progress point
_TURNS_WATCHED = 2
_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


def journal_dir(call_records: str, worker_id: int | None) -> str:
    """Where a server's call journals live: beside its call records, one folder per worker."""
    base = call_records + ".journal" if call_records.endswith(".jsonl") else os.path.join(call_records, "journal")
    return os.path.join(base, "standalone" if worker_id is None else f"w{worker_id}")


def _file_name(call_id: str) -> str:
    safe = _UNSAFE.sub("_", call_id)[:120]
    return f"{safe}.{zlib.crc32(call_id.encode()):08x}.journal"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class CallJournals:
    """The journals of one server process; every write is one line, appended then synced."""

    def __init__(self, directory: str, executor: ThreadPoolExecutor | None = None) -> None:
        self.directory = directory
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="call-journal")
        self._last_write: Future[None] | None = None
        #: lines that could not be written (a full or failing disk): the first and every 100th are logged
        self.failures = 0
        self.on_write_error: Callable[[], None] | None = None

    def open(self, call_id: str, header: dict[str, Any]) -> "CallJournal":
        path = os.path.join(self.directory, _file_name(call_id))
        journal = CallJournal(self, call_id, path)
        journal.write({"event": "start", "call_id": call_id, "pid": os.getpid(), "at": _now(),
                       "at_s": time.time(), **header})
        return journal

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._last_write = self._executor.submit(fn, *args)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until every line given so far is on disk (tests and shutdown)."""
        if self._last_write is not None:
            self._last_write.result(timeout=timeout_s)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class CallJournal:
    """One call's journal: :meth:`progress` writes what changed since the last line."""

    def __init__(self, journals: CallJournals, call_id: str, path: str) -> None:
        self._journals = journals
        self.call_id = call_id
        self.path = path
        self._file: Any = None
        self._turns_written: dict[int, str] = {}
        self._dialogue_written = 0
        self._closed = False

    def write(self, entry: dict[str, Any]) -> None:
        if self._closed:
            return
        line = json.dumps(redact_value(entry), sort_keys=True, default=str)
        self._journals.submit(self._append, line)

    def state(self, state: str, **data: Any) -> None:
        """A SIP or call state change (answered, media active, disconnected, transfer...)."""
        self.write({"event": "state", "state": state, "at": _now(), "at_s": time.time(), **data})

    def progress(self, turns: list[Any], dialogue_history: Iterable[Any]) -> None:
        """Journal the turns (``Turn`` objects) and dialogue events that changed since the last call."""
        if self._closed:
            return
        first = max(0, len(turns) - _TURNS_WATCHED)
        for index in range(first, len(turns)):
            record = turns[index].as_record()
            text = json.dumps(record, sort_keys=True, default=str)
            if self._turns_written.get(index) != text:
                self._turns_written[index] = text
                self.write({"event": "turn", "index": index, "turn": record, "at_s": time.time()})
        history = list(dialogue_history)
        if len(history) > self._dialogue_written:
            from dataclasses import asdict, is_dataclass

            new = [asdict(e) if is_dataclass(e) else e for e in history[self._dialogue_written:]]
            self._dialogue_written = len(history)
            self.write({"event": "dialogue", "entries": new, "at_s": time.time()})

    def finish(self) -> None:
        """The call's full record is written: the journal goes (after every line given before)."""
        if self._closed:
            return
        self._closed = True
        self._journals.submit(self._remove)

    # -- on the journal thread ----------------------------------------------------
    def _append(self, line: str) -> None:
        try:
            if self._file is None:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            self._journals.failures += 1
            if self._journals.on_write_error is not None:
                self._journals.on_write_error()
            if self._journals.failures == 1 or self._journals.failures % 100 == 0:
                log.error("call {call_id} journal not written to {path}: {err} ({n} lines lost so far)",
                          call_id=self.call_id, path=self.path, err=e, n=self._journals.failures)

    def _remove(self) -> None:
        try:
            if self._file is not None:
                self._file.close()
                self._file = None
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.error("call {call_id} journal {path} not removed: {err}", call_id=self.call_id, path=self.path,
                      err=e)


# --------------------------------------------------------------------------- recovery


def read_journal(path: str) -> dict[str, Any] | None:
    """The call record a journal holds (``end_reason: "crashed"``); None when it has no start line.

    A last line cut short by the crash is skipped; every line before it counts.
    """
    start: dict[str, Any] | None = None
    turns: dict[int, Any] = {}
    dialogue: list[Any] = []
    states: list[dict[str, Any]] = []
    last_s: float | None = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            last_s = entry.get("at_s", last_s)
            kind = entry.get("event")
            if kind == "start":
                start = entry
            elif kind == "turn" and isinstance(entry.get("index"), int):
                turns[entry["index"]] = entry.get("turn")
            elif kind == "dialogue":
                dialogue.extend(entry.get("entries") or [])
            elif kind == "state":
                states.append({k: v for k, v in entry.items() if k not in ("event", "at_s")})
    if start is None:
        return None
    started_s = float(start.get("at_s") or 0.0)
    record = {k: v for k, v in start.items() if k not in ("event", "pid", "at", "at_s")}
    record.update({
        "call_id": start.get("call_id", ""),
        "end_reason": "crashed",
        "started_at": start.get("at"),
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(last_s or started_s)),
        "duration_s": round(max(0.0, (last_s or started_s) - started_s), 3),
        "recovered_at": _now(),
        "states": states,
        "dialogue": dialogue,
        "path": None,
        "turns": [turns[i] for i in sorted(turns)],
    })
    record.setdefault("barge_ins", sum(1 for t in record["turns"] if isinstance(t, dict) and t.get("barge_in")))
    return record


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_pid(path: str) -> Any:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return json.loads(f.readline()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None


def recover_journals(directory: str, recorded_since: Callable[[float], set[str]],
                     write_record: Callable[[dict[str, Any]], None]) -> int:
    """Write the record of every call whose journal a crash left in *directory*; returns how many.

    Journals of a live process (another server sharing the folder by mistake) are left alone; a
    call whose full record was written just before the crash (*already_recorded*) only loses its
    journal. *recorded_since(t)* gives the call ids of the records written since *t* (epoch s).
    """
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".journal"))
    except FileNotFoundError:
        return 0
    recovered = 0
    recorded: set[str] | None = None
    for name in names:
        path = os.path.join(directory, name)
        if _pid_alive(_start_pid(path)):
            log.warn("journal {path} belongs to a running process; left alone", path=path)
            continue
        try:
            record = read_journal(path)
        except OSError as e:
            log.error("journal {path} cannot be read: {err}", path=path, err=e)
            continue
        if record is not None and recorded is None:
            oldest = min((os.path.getmtime(os.path.join(directory, n)) for n in names
                          if os.path.exists(os.path.join(directory, n))), default=time.time())
            recorded = recorded_since(oldest - 1.0)
        if record is not None and record["call_id"] not in (recorded or set()):
            write_record(record)
            recovered += 1
            log.warn("call {call_id} was cut off by a crash: record completed from its journal "
                     "({turns} turns)", call_id=record["call_id"], turns=len(record["turns"]))
        try:
            os.unlink(path)
        except OSError as e:
            log.error("journal {path} not removed: {err}", path=path, err=e)
    return recovered


def recorded_call_ids(call_records: str, since_s: float) -> set[str]:
    """Call ids in the records written since *since_s* (epoch seconds): one file, or a folder of files."""
    if call_records.endswith(".jsonl"):
        paths = [call_records]
    else:
        try:
            paths = [os.path.join(call_records, n) for n in os.listdir(call_records)
                     if n.startswith("calls-") and n.endswith(".jsonl")]
        except FileNotFoundError:
            return set()
    ids: set[str] = set()
    for path in paths:
        try:
            if os.path.getmtime(path) < since_s:
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = re.search(r'"call_id": "((?:[^"\\]|\\.)*)"', line)
                    if m:
                        ids.add(json.loads(f'"{m.group(1)}"'))
        except (OSError, ValueError):
            continue
    return ids


class ServerJournals:
    """What the server does with journals: recover at start, open one per answered call, end it.

    With a Prometheus *registry*: ``openclaw_call_records_recovered_total`` (records completed
    from a crashed process's journals) and ``openclaw_call_journal_write_errors_total``.
    """

    def __init__(self, call_records: str, worker_id: int | None, registry: Any = None) -> None:
        self.call_records = call_records
        self.journals = CallJournals(journal_dir(call_records, worker_id)) if call_records else None
        self._open: dict[str, CallJournal] = {}
        self._recovered: Any = None
        if registry is not None and self.journals is not None:
            from prometheus_client import Counter

            self._recovered = Counter("openclaw_call_records_recovered_total",
                                      "Call records completed from the journals of a crashed process",
                                      registry=registry)
            self.journals.on_write_error = Counter("openclaw_call_journal_write_errors_total",
                                                   "Journal lines of running calls that could not be written",
                                                   registry=registry).inc

    def recover(self, write_record: Callable[[dict[str, Any]], None]) -> int:
        if self.journals is None:
            return 0
        n = recover_journals(self.journals.directory, lambda since: recorded_call_ids(self.call_records, since),
                             write_record)
        if self._recovered is not None and n:
            self._recovered.inc(n)
        return n

    def call_answered(self, session: Any, header: dict[str, Any]) -> None:
        """Open the call's journal and have the session report its progress to it."""
        if self.journals is None:
            return
        journal = self.journals.open(session.call_id, header)
        self._open[session.call_id] = journal
        session.on_progress = lambda: journal.progress(session.turns, getattr(session.dialogue, "history", ()))

    def state(self, call_id: str, state: str, **data: Any) -> None:
        journal = self._open.get(call_id)
        if journal is not None:
            journal.state(state, **data)

    def call_recorded(self, call_id: str) -> None:
        """The call's full record is written: its journal goes."""
        journal = self._open.pop(call_id, None)
        if journal is not None:
            journal.finish()

    def flush(self, timeout_s: float = 5.0) -> None:
        if self.journals is not None:
            self.journals.flush(timeout_s)
