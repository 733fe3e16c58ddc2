"""Fixtures shared by the store suites that want a master whose dead clients expire fast
(--client_ttl=2) and one client of it: import them by name into a test module
(``from store_fixtures import master, store  # noqa: F401``)."""

from __future__ import annotations

import pytest

from test_store import Master, new_store


@pytest.fixture
def master():
    m = Master("--client_ttl=2")
    yield m
    m.stop()


@pytest.fixture
def store(master):
    s = new_store(master)
    yield s
    s.close()
