"""``python -m agent.app``: the ``openclaw-voice`` command."""
from agent.app.cli import main

raise SystemExit(main())
