"""Fixtures of the felix package's tests: a real felix-broker per test
(broker_proc.Broker) and clients pinned to it. The package under test is
the one on sys.path (PYTHONPATH=python in the ctest registration), loading
libfelix from $FELIX_LIBRARY."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from broker_proc import Broker, broker_binary  # noqa: E402


@pytest.fixture
def start_broker(tmp_path):
    """start_broker(*sets) -> a running Broker with those --set overrides."""
    if broker_binary() is None:
        pytest.skip("felix-broker is not built (set FX_BINARY_DIR or FELIX_BROKER)")
    started = []

    def start(*sets):
        b = Broker(str(tmp_path / ("state%d" % len(started))), sets)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def broker(start_broker):
    return start_broker()


@pytest.fixture
def connect(broker):
    """connect(**kw) -> a felix.Client of |broker|, closed after the test."""
    import felix

    clients = []

    def make(b=None, **kw):
        b = b or broker
        kw.setdefault("server", b.server)
        kw.setdefault("pin", b.pin)
        kw.setdefault("connect_timeout", 15)
        c = felix.Client(**kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture(scope="session", autouse=True)
def _remove_temp_dirs_after_success(request, tmp_path_factory):
    """Brokers' state dirs, install trees and venvs go once every test passed
    (kept after a failure, to look at)."""
    yield
    if request.session.testsfailed == 0:
        import shutil

        shutil.rmtree(tmp_path_factory.getbasetemp(), ignore_errors=True)
