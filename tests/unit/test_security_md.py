"""SECURITY.md's advisory table names the pjsua2-python version it was reviewed for: a change of the pin
(setup.cfg) or of the installed wheel fails here until the table is reviewed again."""
from __future__ import annotations

import configparser
import importlib.metadata
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reviewed_for() -> str:
    with open(os.path.join(ROOT, "SECURITY.md"), encoding="utf-8") as f:
        m = re.search(r"This table was reviewed for: `pjsua2-python==([^`]+)`", f.read())
    assert m, "SECURITY.md must say which pjsua2-python version its advisory table was reviewed for"
    return m.group(1)


def pinned() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    m = re.search(r"pjsua2-python==(\S+)", cfg["options"]["install_requires"])
    assert m, "setup.cfg must pin pjsua2-python exactly"
    return m.group(1)


def test_pinned_version_is_the_reviewed_one() -> None:
    """The pin in setup.cfg is the version SECURITY.md was reviewed for."""
    assert pinned() == reviewed_for(), (
        f"pjsua2-python is pinned to {pinned()} but SECURITY.md was reviewed for {reviewed_for()}: review the "
        "advisory table for the new version, then update its 'reviewed for' line")


def test_installed_version_is_the_reviewed_one() -> None:
    """The wheel actually installed is the reviewed one too (an unpinned upgrade would fail here)."""
    assert importlib.metadata.version("pjsua2-python") == reviewed_for()


def test_every_advisory_has_a_status() -> None:
    """Each advisory named by the issue tracker is in the table with a status."""
    with open(os.path.join(ROOT, "SECURITY.md"), encoding="utf-8") as f:
        text = f.read()
    for advisory in ("GHSA-x5pq-qrp4-fmrj", "CVE-2026-33069", "PR 4844", "GHSA-8fj4-fv9f-hjpc",
                     "GHSA-j29p-pvh2-pvqp", "GHSA-g88q-c2hm-q7p7"):
        row = next((line for line in text.splitlines() if line.startswith("|") and advisory in line), "")
        assert re.search(r"\*\*(not reachable|mitigated|open)", row), advisory
