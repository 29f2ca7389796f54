"""bench/source_medians.py runs warm and cold on a small tree and names every source and the checks asked for."""

from __future__ import annotations

import ast

import pytest
from bench_modules import load_bench
from fakehost.reference import reference_node


@pytest.mark.parametrize("cold", [False, True])
@pytest.mark.slow
def test_it_prints_the_phases_every_source_and_the_checks_asked_for(fake_host, capsys, cold):
    reference_node(fake_host)
    medians = load_bench("bench_source_medians", "source_medians.py")

    argv = ["--host-root", str(fake_host.root), "--runs", "2", "--checks", "cpuidle_deep_state,gpu_nic_path"]
    assert medians.main([*argv, "--cold"] if cold else argv) == 0

    phases, sources, checks = capsys.readouterr().out.splitlines()
    assert phases.startswith("read ") and "render+gzip" in phases and "total" in phases
    assert {"cpuidle", "pci_topology", "pod_usage", "topology"} <= set(ast.literal_eval(sources.split(": ", 1)[1]))
    assert set(ast.literal_eval(checks.split(": ", 1)[1])) == {"cpuidle_deep_state", "gpu_nic_path"}
