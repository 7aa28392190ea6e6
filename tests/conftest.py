"""Shared test helpers: where the real vendor captures are, and tools that tests need."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The one way a test reaches ../shared: shared_fixture, shared_fixtures, shared_root and the
# fixtures_dir fixture below (tests/test_shared_access.py keeps it so). Each skips, or gives
# nothing to parametrize, with a reason when the folder is absent: a fresh clone passes alone.
_SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"
SHARED_ABSENT = f"real vendor captures not found at {_SHARED_FIXTURES} (../shared absent)"
REQUIRE_TOOLS = os.environ.get("HETERO_REQUIRE_TOOLS") == "1"


def shared_fixture(*parts: str) -> Path:
    """Path of a real capture in ../shared/fixtures; skips the test when it is absent."""
    if not _SHARED_FIXTURES.is_dir():
        pytest.skip(SHARED_ABSENT)
    p = _SHARED_FIXTURES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"capture {p} is absent")
    return p


def shared_fixtures(tool: str, pattern: str = "*") -> list[Path]:
    """All captures of one tool folder (for parametrize); [] when ../shared is absent."""
    d = _SHARED_FIXTURES / tool
    return sorted(p for p in d.glob(pattern) if p.is_file()) if d.is_dir() else []


def shared_root() -> Path:
    """The captures folder, for code that walks it (it may be absent: check ``is_dir()``)."""
    return _SHARED_FIXTURES


def require_tool(name: str) -> str:
    """Path of an external program; skip without it, fail when HETERO_REQUIRE_TOOLS=1."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not installed (apt-get install prometheus prometheus-alertmanager)"
        if REQUIRE_TOOLS:
            pytest.fail(msg + " and HETERO_REQUIRE_TOOLS=1")
        pytest.skip(msg)
    return path


@pytest.fixture
def fixtures_dir() -> Path:
    if not _SHARED_FIXTURES.is_dir():
        pytest.skip(SHARED_ABSENT)
    return _SHARED_FIXTURES


def pytest_configure(config):
    """Byte-compile the project once before any test starts. Simulated vendor tools are fresh
    interpreters (``python -m collectors.<vendor>.<tool>.fake``); where PYTHONDONTWRITEBYTECODE
    is set none of them leaves a .pyc, so each start recompiled every module it imports (0.6 to
    0.9 s here instead of 0.2 s), and on a loaded machine the collectors' 1 s tool deadlines
    were missed. The .pyc files are ignored by git; the controller alone compiles (workers
    find them written)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall
    for package in ("hetero_exporter", "collectors"):
        compileall.compile_dir(str(ROOT / package), quiet=2, workers=1)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: two workers a CPU (README caps it at 4). Most of the suite waits on what it
    started (agents, fake vendor tools, servers, deadlines) rather than computing: on 2 CPUs, 2
    workers took 567 s at about 100 % CPU and 4 took 375 s at 177 % (2026-12-07), all passing.
    At most 16, so a big machine does not start more agents and servers than the suite needs."""
    return min(16, 2 * (os.cpu_count() or 1))


def pytest_collection_modifyitems(config, items):
    """`device` tests need a real accelerator: skip them unless nvidia-smi is present."""
    if shutil.which("nvidia-smi"):
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU here (device tests run on the lent GPU machine)")
    for item in items:
        if "device" in item.keywords:
            item.add_marker(skip)


# The loopback Kubernetes API server fixture (tests/kubeapi.py), available to every test.
from kubeapi import kube_api  # noqa: E402,F401
