"""bench/ scripts loaded as modules for the tests (bench/ is not a package): each under a name of its own, once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str, filename: str) -> ModuleType:
    """bench/``filename`` as module ``name``; the module already loaded when another test file loaded it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / filename)
    assert spec is not None and spec.loader is not None, f"bench/{filename} cannot be loaded"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module
