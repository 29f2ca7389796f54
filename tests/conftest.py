from __future__ import annotations

import os
from pathlib import Path

import pytest
from corpus import REALKERNEL_4NODE, corpus_root
from fakehost import FakeHost


@pytest.fixture
def fake_host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


@pytest.fixture(scope="session")
def realkernel_root() -> Path:
    """The 4-node real-kernel capture (tests/corpus/realkernel-4node), extracted once per session: read only."""
    return corpus_root(REALKERNEL_4NODE)


# `numawatch check` watches the host for 3 s by default so rate checks can run; the suite's many check runs read
# once (tests that need two readings pass --window explicitly). Set before any test starts a subprocess.
os.environ["NUMAWATCH_CHECK_WINDOW"] = "0"
