from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakehost import FakeHost

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REALKERNEL_4NODE = SHARED / "fixtures/realkernel-4node/root"


@pytest.fixture
def fake_host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


@pytest.fixture
def realkernel_root() -> Path:
    if not REALKERNEL_4NODE.is_dir():
        pytest.skip(f"shared fixture {REALKERNEL_4NODE} is not present in this checkout")
    return REALKERNEL_4NODE


# `numawatch check` watches the host for 3 s by default so rate checks can run; the suite's many check runs read
# once (tests that need two readings pass --window explicitly). Set before any test starts a subprocess.
os.environ["NUMAWATCH_CHECK_WINDOW"] = "0"
