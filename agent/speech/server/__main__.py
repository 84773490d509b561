"""``python -m agent.speech.server``: the embedded speech server."""
from agent.speech.server.main import main

raise SystemExit(main())
