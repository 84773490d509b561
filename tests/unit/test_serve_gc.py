"""What the server loaded at start is kept out of the garbage collector's full collections."""
from __future__ import annotations

import gc

from agent.app.serve import freeze_what_was_loaded


def test_objects_alive_at_start_are_frozen_and_the_start_result_passes_through() -> None:
    loaded = [{"prompt": i} for i in range(1000)]
    try:
        assert freeze_what_was_loaded("started") == "started"
        assert gc.get_freeze_count() >= len(loaded)
        # a full collection no longer walks them
        assert not any(obj is loaded for obj in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()
