"""Call records on disk: one JSON line per call, appended and synced."""
from __future__ import annotations

import os
import time

from twisted.logger import Logger

log = Logger(namespace="openclaw.server")


def append_record(line: str, call_id: str, path: str, worker_id: int | None) -> None:
    """Append *line* to *path*: a ``.jsonl`` file, or a directory of one file per day (UTC) and worker."""
    if not path.endswith(".jsonl"):
        # A directory: one file per day (UTC), and per worker under `serve --workers N`
        # (whole lines from several processes must never interleave).
        name = time.strftime("calls-%Y-%m-%d", time.gmtime())
        if worker_id is not None:
            name += f".w{worker_id}"
        path = os.path.join(path, name + ".jsonl")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        log.error("call {call_id} record not written to {path}: {err}", call_id=call_id,
                  path=path, err=e)
