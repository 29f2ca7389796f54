"""bench/soak.py's own logic (never its timing): reading /proc/<pid>/status, the RSS at each point of the table, the
peak, the table and its ``--env`` pairs."""

from __future__ import annotations

import os

import pytest
from bench_modules import load_bench

soak = load_bench("bench_soak", "soak.py")

STATUS = """Name:\tpython
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t  360472 kB
VmHWM:\t   91234 kB
VmRSS:\t   88000 kB
RssAnon:\t   60000 kB
Threads:\t4
"""


def _samples(*rows: tuple[float, int, int]) -> list:
    return [soak.Sample(seconds, rss, hwm, "0.10 0.20 0.30") for seconds, rss, hwm in rows]


def test_status_gives_rss_and_hwm_in_kb():
    assert soak.status_kb(STATUS) == {"VmRSS": 88000, "VmHWM": 91234}
    assert soak.status_kb(STATUS, ("RssAnon",)) == {"RssAnon": 60000}


def test_status_of_a_live_process_has_both_figures():
    with open(f"/proc/{os.getpid()}/status") as handle:
        found = soak.status_kb(handle.read())
    assert set(found) == {"VmRSS", "VmHWM"} and 0 < found["VmRSS"] <= found["VmHWM"]


@pytest.mark.parametrize("text", [
    "VmRSS:\t   88000 MB\n",  # another unit
    "VmRSS:\t   -5 kB\n",  # a negative figure
    "VmRSS:\t   88000\n",  # no unit
    "VmRSS:\n",  # no figure
    "VmRSS 88000 kB\n",  # no colon
    "",  # nothing
])  # fmt: skip
def test_status_lines_that_are_not_a_kb_figure_are_left_out(text):
    assert soak.status_kb(text) == {}


def test_each_point_takes_the_nearest_sample_within_the_tolerance():
    samples = _samples((0, 4000, 4000), (10, 70000, 70000), (20, 71000, 71000), (30.4, 72704, 72800),
                       (118, 80000, 80100), (124, 81920, 82000))  # fmt: skip
    summary = soak.summarise(samples, points=(30, 120, 300))
    assert summary["rss_mb_at"] == {"30": 71.0, "120": 78.1}  # 72704 kB is 71.0 MB; 118 s is nearer 120 than 124
    assert "300" not in summary["rss_mb_at"]  # the run ended long before 5 minutes


def test_the_peak_is_the_largest_hwm_and_when_rss_came_within_a_megabyte_of_it():
    samples = _samples((10, 70000, 70000), (20, 81000, 81920), (30, 81500, 81920), (40, 79000, 81920))
    summary = soak.summarise(samples, points=(10,))
    assert summary["peak_mb"] == 80.0 and summary["meets_target"]  # 81920 kB is exactly the 80 MB target
    assert summary["peak_reached_s"] == 20 and summary["duration_s"] == 40


def test_a_peak_over_the_target_is_a_miss():
    summary = soak.summarise(_samples((10, 82000, 82000)), points=(10,))
    assert summary["peak_mb"] == 80.1 and not summary["meets_target"]


def test_no_samples_summarise_to_nothing_met():
    summary = soak.summarise([], points=(30,))
    assert summary == {"rss_mb_at": {}, "peak_mb": 0.0, "peak_reached_s": None, "meets_target": False,
                       "duration_s": 0}  # fmt: skip


def test_the_table_has_a_row_per_shape_and_a_dash_where_the_run_did_not_reach():
    summaries = {
        "b384": soak.summarise(_samples((30, 76800, 76800), (120, 87040, 87040)), points=(30, 120)),
        "host32": soak.summarise(_samples((30, 63488, 63488)), points=(30, 120)),
    }
    lines = soak.table(summaries, points=(30, 120)).splitlines()
    assert lines[0] == "| shape | 30 s | 2 min | peak (VmHWM) | ≤ 80 MB |"
    assert lines[1] == "|---|---|---|---|---|"
    assert lines[2] == "| b384 | 75.0 | 85.0 | 85.0 | **no** |"
    assert lines[3] == "| host32 | 62.0 | - | 62.0 | yes |"


def test_env_pairs():
    assert soak.parse_env(["MALLOC_ARENA_MAX=2", "A=b=c", "EMPTY="]) == {"MALLOC_ARENA_MAX": "2", "A": "b=c",
                                                                          "EMPTY": ""}  # fmt: skip
    for bad in ("NOEQUALS", "=value"):
        with pytest.raises(ValueError, match="expected KEY=VALUE"):
            soak.parse_env([bad])


def test_cpu_per_evaluation():
    assert soak.cpu_ms_per_evaluation(12.0, 400) == 30.0
    assert soak.cpu_ms_per_evaluation(None, 400) is None
    assert soak.cpu_ms_per_evaluation(12.0, None) is None and soak.cpu_ms_per_evaluation(12.0, 0) is None
