"""Test-only launcher: the real ``numawatch`` command with a fake AMD SMI or HLML (tests/fake_amdsmi.py,
tests/fake_pyhlml.py) in place of the vendor's bindings, as tests/serve_with_fake_nvml.py does for NVML.

``FAKE_GPU_LIBRARY=amdsmi`` (or ``hlml``) names the library to fake: that of fakehost.reference's node with the
vendor's accelerators in its slots (``reference_amdsmi``, ``reference_hlml``). numawatch imports ``amdsmi`` and
``pyhlml`` lazily (library_session.py), so putting the fake module in ``sys.modules`` before anything asks for it is
the whole injection; nothing of numawatch is patched. Run as ``python -m serve_with_fake_vendors`` with tests/ on
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys


def install_fake_library(name: str) -> None:
    if name == "amdsmi":
        from fake_amdsmi import reference_amdsmi

        sys.modules["amdsmi"] = reference_amdsmi()
    elif name == "hlml":
        from fake_pyhlml import reference_hlml

        sys.modules["pyhlml"] = reference_hlml()
    else:
        raise SystemExit(f"FAKE_GPU_LIBRARY must be amdsmi or hlml, not {name!r}")


def main(argv: list[str]) -> int:
    install_fake_library(os.environ.get("FAKE_GPU_LIBRARY", ""))
    from numawatch.cli import main as numawatch_main

    return numawatch_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
