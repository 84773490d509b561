"""The regions lab: a reference multi-region deployment in network namespaces (docs/deployment.md).

``ops/regions-lab up|status|kill REGION|revive REGION|down`` (ops/lab/cli.py). Rooms:

- ``plan.py``: pure: names, addresses, ports, the PowerDNS zone, and each namespace's services;
- ``netns.py``: namespaces, the hub bridge and veths (``ip``);
- ``lab.py``: start, readiness, kill/revive, teardown; state in the run directory;
- ``caller.py``: runs inside the caller namespace: resolves the SIP service through DNS and calls.
"""
