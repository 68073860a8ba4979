"""Fixtures of the packaging tests (tests/pkg): the install tree that the
CTest fixture pkg.install_tree puts under $FX_BINARY_DIR/stage
(`cmake --install --prefix /usr/local` with DESTDIR), made here when a test
runs alone; a real felix-broker (python/tests/broker_proc.py)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fxpkg import BIN, PREFIX, Stage, install  # noqa: E402
from broker_proc import Broker  # noqa: E402


@pytest.fixture(scope="session")
def stage(tmp_path_factory):
    if not BIN:
        pytest.skip("FX_BINARY_DIR is not set (run through ctest)")
    root = os.path.join(BIN, "stage")
    if not os.path.exists(os.path.join(root + PREFIX, "lib", "libfelix.so.0")):
        root = install(tmp_path_factory.mktemp("stage"), PREFIX)
    return Stage(root)


@pytest.fixture
def broker(tmp_path):
    if not BIN or not os.access(os.path.join(BIN, "felix-broker"), os.X_OK):
        pytest.skip("felix-broker is not built in FX_BINARY_DIR")
    b = Broker(str(tmp_path / "state"))
    yield b
    b.stop()


@pytest.fixture
def start_broker_sets(tmp_path):
    """start_broker_sets(*sets) -> a Broker with those --set overrides."""
    if not BIN or not os.access(os.path.join(BIN, "felix-broker"), os.X_OK):
        pytest.skip("felix-broker is not built in FX_BINARY_DIR")
    started = []

    def start(*sets):
        b = Broker(str(tmp_path / ("state%d" % len(started))), sets)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture(scope="session", autouse=True)
def _remove_temp_dirs_after_success(request, tmp_path_factory):
    """Brokers' state dirs, install trees and venvs go once every test passed
    (kept after a failure, to look at)."""
    yield
    if request.session.testsfailed == 0:
        import shutil

        shutil.rmtree(tmp_path_factory.getbasetemp(), ignore_errors=True)
