"""Call journals: turns appended while a call runs, and the record completed after a crash."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from agent.app.call_journal import CallJournals, ServerJournals, journal_dir, read_journal, recover_journals
from agent.call.record import Turn


class _Dialogue:
    def __init__(self) -> None:
        self.history: list[dict[str, str]] = []


def _journal_lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_each_change_is_one_line_and_unchanged_turns_are_not_rewritten(tmp_path) -> None:
    journals = CallJournals(str(tmp_path / "j"))
    journal = journals.open("call-1@host", {"caller": "5550100", "flow": "main"})
    turns = [Turn(started_at=0.0)]
    dialogue = _Dialogue()
    journal.progress(turns, dialogue.history)
    journal.progress(turns, dialogue.history)        # nothing changed: nothing written
    turns.append(Turn(started_at=1.0, caller_text="check my balance"))
    dialogue.history.append({"kind": "intent", "text": "balance"})
    journal.progress(turns, dialogue.history)
    turns[-1].latency_ms = 140.0
    journal.progress(turns, dialogue.history)
    journals.flush()
    lines = _journal_lines(journal.path)
    assert [line["event"] for line in lines] == ["start", "turn", "turn", "dialogue", "turn"]
    assert lines[0]["caller"] == "5550100" and lines[0]["pid"] == os.getpid()
    assert lines[-1]["turn"]["latency_ms"] == 140.0 and lines[-1]["index"] == 1


def test_a_journal_becomes_a_crashed_record_with_every_turn(tmp_path) -> None:
    journals = CallJournals(str(tmp_path / "j"))
    journal = journals.open("c2", {"caller": "1", "called": "1000", "flow": "main"})
    turns = [Turn(started_at=0.0), Turn(started_at=1.0, caller_text="hours"), Turn(started_at=2.0, dtmf="1")]
    journal.progress(turns[:2], ())
    journal.progress(turns, ())
    journal.state("media_active", codec="PCMU")
    journals.flush()
    with open(journal.path, "a", encoding="utf-8") as f:
        f.write('{"event": "turn", "index": 3, "tu')       # the crash cut the last line short
    record = read_journal(journal.path)
    assert record is not None
    assert record["end_reason"] == "crashed" and record["call_id"] == "c2" and record["called"] == "1000"
    assert [t["caller"] for t in record["turns"]] == ["", "hours", ""]
    assert record["turns"][2]["dtmf"] == "1"
    assert record["states"][0]["state"] == "media_active"


def test_finish_removes_the_journal_after_its_lines(tmp_path) -> None:
    journals = CallJournals(str(tmp_path / "j"))
    journal = journals.open("c3", {})
    journal.progress([Turn(started_at=0.0, caller_text="x")], ())
    journal.finish()
    journal.progress([Turn(started_at=0.0, caller_text="y")], ())   # after the end: ignored
    journals.flush()
    assert not os.path.exists(journal.path)


def test_recovery_writes_crashed_records_once_and_removes_journals(tmp_path) -> None:
    records = str(tmp_path / "calls.jsonl")
    journals = CallJournals(journal_dir(records, None))
    for cid in ("a", "b"):
        journals.open(cid, {"flow": "main"}).progress([Turn(started_at=0.0, caller_text=cid)], ())
    journals.flush()
    # Pretend the journals were left by a process that is gone.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name in os.listdir(journals.directory):
        path = os.path.join(journals.directory, name)
        lines = _journal_lines(path)
        lines[0]["pid"] = int(dead.stdout)
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(line) + "\n" for line in lines))
    # "b" had its full record written just before the crash.
    with open(records, "w", encoding="utf-8") as f:
        f.write(json.dumps({"call_id": "b", "end_reason": "caller hung up"}) + "\n")
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    written: list[dict] = []
    server = ServerJournals(records, None, registry)
    assert server.recover(written.append) == 1
    assert registry.get_sample_value("openclaw_call_records_recovered_total") == 1.0
    assert [(r["call_id"], r["end_reason"], r["turns"][0]["caller"]) for r in written] == [("a", "crashed", "a")]
    assert os.listdir(journals.directory) == []


def test_a_live_process_journal_is_left_alone(tmp_path) -> None:
    directory = str(tmp_path / "j")
    journals = CallJournals(directory)
    journal = journals.open("live", {})
    journals.flush()
    lines = _journal_lines(journal.path)
    lines[0]["pid"] = os.getppid()               # a running process that is not this one
    with open(journal.path, "w", encoding="utf-8") as f:
        f.write(json.dumps(lines[0]) + "\n")
    written: list[dict] = []
    assert recover_journals(directory, lambda since: set(), written.append) == 0
    assert written == [] and os.path.exists(journal.path)


def test_journal_lines_are_redacted(tmp_path) -> None:
    journals = CallJournals(str(tmp_path / "j"))
    journal = journals.open("c4", {})
    journal.progress([Turn(started_at=0.0)], [{"kind": "webhook", "text": "GET https://crm/x?token=zz"}])
    journals.flush()
    with open(journal.path, encoding="utf-8") as f:
        assert "token=zz" not in f.read()


def test_recoveries_and_write_errors_are_counted(tmp_path) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    server = ServerJournals(str(tmp_path / "calls"), 3, registry)
    assert server.journals is not None and server.journals.directory.endswith(os.path.join("journal", "w3"))
    os.makedirs(os.path.dirname(server.journals.directory), exist_ok=True)
    with open(server.journals.directory, "w") as f:     # the journal folder cannot be made
        f.write("")
    journal = server.journals.open("c9", {})
    journal.progress([Turn(started_at=0.0, caller_text="x")], ())
    server.journals.flush()
    assert registry.get_sample_value("openclaw_call_journal_write_errors_total") == 2.0
    assert registry.get_sample_value("openclaw_call_records_recovered_total") == 0.0
