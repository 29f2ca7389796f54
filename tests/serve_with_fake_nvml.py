"""Test-only launcher: the real ``numawatch`` command with tests/fake_pynvml.py in place of nvidia-ml-py.

tests/test_e2e_prometheus.py runs ``python tests/serve_with_fake_nvml.py serve --host-root=<fake host> ...`` so that
the real CLI, server, NVML session, sources and metrics serve GPU series on a machine without an NVIDIA driver, for a
real Prometheus to scrape. numawatch imports ``pynvml`` lazily (numawatch.nvml_session), so putting the fake module in
``sys.modules`` before anything asks for it is the whole injection; nothing of numawatch is patched.

The fake is fakehost.reference's node (``reference_nvml``: 4 GPUs, vllm's process on GPUs 0-1, trtllm's on 2-3).
Its sample buffer holds four samples, which the first evaluation consumes; after that NVML reports the buffer empty
and numawatch falls back to ``nvmlDeviceGetUtilizationRates``, which returns ``UTILIZATION`` below: so from the
second evaluation on, GPUs 0-1 are 60 % busy (40 % idle while held) and GPUs 2-3 95 % (5 % idle while held).
The fake host must also hold the GPU processes' threads (``fake_pynvml.write_reference_threads``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# tests/ holds fake_pynvml and fakehost; it is sys.path[0] when this file runs as a script, not under runpy.
TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

UTILIZATION = (60, 60, 95, 95)  # percent, per GPU of reference_nvml(), in NVML index order


def install_fake_nvml() -> None:
    """Make ``import pynvml`` return the reference node's fake NVML, with the GPUs as busy as ``UTILIZATION``."""
    from fake_pynvml import reference_nvml

    fake = reference_nvml()
    for gpu, percent in zip(fake.gpus, UTILIZATION, strict=True):
        gpu.rate = percent
    sys.modules["pynvml"] = fake


def main(argv: list[str]) -> int:
    install_fake_nvml()
    from numawatch.cli import main as numawatch_main

    return numawatch_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
