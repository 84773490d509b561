"""Fixtures shared by every test."""
from __future__ import annotations

import pytest

from tests.fakes import FakeReactor


@pytest.fixture
def fake_reactor() -> FakeReactor:
    """A fake reactor (twisted Clock + callFromThread run at once) for the sans-I/O cores."""
    return FakeReactor()
