"""End to end: `numawatch serve` on a fake host with planted drift, scraped by a real Prometheus that evaluates the
shipped rules (``for:`` shortened) and notifies a real Alertmanager running the shipped example configuration,
whose receivers post to a webhook served by this test.

numawatch runs with the fake NVML of the reference node (tests/serve_with_fake_nvml.py injects tests/fake_pynvml.py
as ``pynvml`` and runs the real CLI), so the GPU busy, idle-while-held and holder families have series, and with an
intent file that names two pod shapes, so the capacity replicas have series too: every dashboard query is run against
what this Prometheus scraped and recorded, except the ones listed in ``EXEMPT_QUERIES`` with the reason.

Everything listens on 127.0.0.1 on free ports with temporary storage; every wait is bounded; every process is
stopped by the fixture, whatever happens. The stack is started once for the module; the tests run in file order
and the last one repairs the fixture. Skips with the reason when Debian's `prometheus` or `prometheus-alertmanager`
is not installed.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
NODE = "gpu-e2e-1"
CLUSTER = "e2e"
RUNBOOK_BASE = "https://github.com/numawatch/numawatch/blob/main/docs/runbooks/"
STARTUP_TIMEOUT = 30.0
ALERT_TIMEOUT = 45.0

LAUNCHER = ROOT / "tests" / "serve_with_fake_nvml.py"
# Named pod shapes for the capacity panels: vllm-tp2 needs GPUs, and the reference node has none free (0 replicas);
# tokenizer needs only CPUs and memory, which both NUMA nodes still have.
INTENT = "shapes:\n  vllm-tp2: {cpu: 4, memory: 8Gi, nvidia.com/gpu: 2}\n  tokenizer: {cpu: 2, memory: 4Gi}\n"
# Dashboard queries allowed to return nothing here, with why. Each is still checked by promtool in
# tests/test_dashboards.py (test_every_query_is_valid_promql).
EXEMPT_QUERIES = {
    ("numawatch-fleet.json", "Pending pods (kube-state-metrics)"): (
        "kube-state-metrics is not part of this stack (the project fakes only host hardware, the kubelet's files and "
        "NVML); the panel's description says it shows no data without kube-state-metrics"
    ),
}

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or ALERTMANAGER is None,
    reason="needs Debian's prometheus and prometheus-alertmanager (apt-get install prometheus prometheus-alertmanager)",
)


# --- small helpers -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def http_post_json(url: str, document: Any, timeout: float = 5.0) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(document).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status


def wait_for(condition: Callable[[], Any], timeout: float, what: str, logs: Callable[[], str] = str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` and the processes' logs."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{logs()}")
        time.sleep(0.25)


class Webhook:
    """An Alertmanager webhook receiver (aiohttp, in its own thread): records every POST by receiver path."""

    def __init__(self) -> None:
        self.port = free_port()
        self.posts: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook", daemon=True)

    async def _handle(self, request: web.Request) -> web.Response:
        payload = await request.json()
        with self._lock:
            self.posts.append((request.match_info["receiver"], payload))
        return web.Response(text="ok")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/{receiver}", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the webhook receiver did not start")

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def alerts(self) -> list[tuple[str, dict, dict]]:
        """(receiver, notification, alert) for every alert of every notification received so far."""
        with self._lock:
            posts = list(self.posts)
        return [(receiver, payload, alert) for receiver, payload in posts for alert in payload["alerts"]]

    def find(self, receiver: str, status: str, **labels: str) -> list[tuple[dict, dict]]:
        return [
            (payload, alert)
            for got, payload, alert in self.alerts()
            if got == receiver and alert["status"] == status and labels.items() <= alert["labels"].items()
        ]


@dataclass
class Stack:
    tmp: Path
    node: Any  # fakehost.reference.ReferenceNode
    webhook: Webhook
    prometheus_url: str = ""
    alertmanager_url: str = ""
    numawatch_url: str = ""
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str]) -> None:
        log = (self.tmp / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp)
        log.close()

    def logs(self) -> str:
        parts = []
        for name, process in self.processes.items():
            text = (self.tmp / f"{name}.log").read_text(errors="replace")
            parts.append(f"--- {name} (pid {process.pid}, exit {process.poll()}), last lines:\n{text[-3000:]}")
        return "\n".join(parts)

    def wait_ready(self, name: str, url: str) -> None:
        def ready() -> bool:
            if self.processes[name].poll() is not None:
                pytest.fail(f"{name} exited with {self.processes[name].returncode}\n{self.logs()}")
            return http_get(url)[0] == 200

        wait_for(ready, STARTUP_TIMEOUT, f"{name} at {url}", self.logs)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def query(self, expr: str) -> list[dict]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http_get(url, timeout=5)
        assert status == 200, f"{expr}: HTTP {status} {body[:500]!r}"
        return json.loads(body)["data"]["result"]

    def series(self, selector: str) -> list[dict]:
        url = f"{self.prometheus_url}/api/v1/series?" + urllib.parse.urlencode({"match[]": selector})
        status, body = http_get(url, timeout=5)
        assert status == 200, f"{selector}: HTTP {status} {body[:500]!r}"
        return json.loads(body)["data"]


# --- configuration of the stack ------------------------------------------------------------------------------


def shortened_rule_files(directory: Path) -> list[Path]:
    """Copies of the shipped rule files with every `for` and `keep_firing_for` cut to 1s."""
    written = []
    for source in sorted((ROOT / "alerts").glob("numawatch-*.yml")):
        document = yaml.safe_load(source.read_text())
        for group in document["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rule["for"] = "1s"
                    if "keep_firing_for" in rule:
                        rule["keep_firing_for"] = "1s"
        path = directory / source.name
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        written.append(path)
    return written


def alertmanager_config(webhook_port: int) -> dict:
    """The shipped example with its receivers pointed at the test's webhook and its timers cut to seconds."""
    config = yaml.safe_load((ROOT / "alerts" / "alertmanager.example.yml").read_text())
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = f"http://127.0.0.1:{webhook_port}/{receiver['name']}"

    def fast(route: dict) -> None:
        route.update(group_wait="1s", group_interval="2s", repeat_interval="1h")
        for child in route.get("routes", []):
            fast(child)

    fast(config["route"])
    return config


def prometheus_config(rule_files: list[Path], alertmanager_port: int, numawatch_port: int) -> dict:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "scrape_configs": [
            {
                # what deploy/components/servicemonitor produces: job numawatch, instance and node = the node's name
                "job_name": "numawatch",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{numawatch_port}"], "labels": {"node": NODE, "cluster": CLUSTER}}
                ],
                "relabel_configs": [{"target_label": "instance", "replacement": NODE}],
            }
        ],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    reference = pytest.importorskip("fakehost.reference", reason="tests/fakehost/reference.py has not landed")
    pytest.importorskip("numawatch.cli", reason="numawatch serve has not landed")
    from fake_pynvml import write_reference_threads
    from fakehost import FakeHost

    tmp = tmp_path_factory.mktemp("e2e")
    node = reference.reference_node(FakeHost(tmp / "host"))
    # Planted drift: a daemon-reload reset vllm's cpuset to every CPU (vllm holds two GPUs: pages), and the
    # kubelet's topology policy was changed to best-effort (a ticket).
    node.widen_cpuset(reference.VLLM)
    node.set_topology_manager_policy("best-effort")
    # The threads of the GPU processes the fake NVML lists (vllm's and trtllm's), for the holder families.
    write_reference_threads(node.host)
    (tmp / "intent.yaml").write_text(INTENT)

    webhook = Webhook()
    stack = Stack(tmp=tmp, node=node, webhook=webhook)
    try:
        webhook.start()
        am_port, prom_port, nw_port = free_port(), free_port(), free_port()
        (tmp / "alertmanager.yml").write_text(yaml.safe_dump(alertmanager_config(webhook.port)))
        stack.start(
            "alertmanager",
            [
                str(ALERTMANAGER),
                f"--config.file={tmp / 'alertmanager.yml'}",
                f"--storage.path={tmp / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",  # no gossip port
                "--log.level=warn",
            ],
        )
        rules = shortened_rule_files(tmp)
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(rules, am_port, nw_port)))
        stack.start(
            "prometheus",
            [
                str(PROMETHEUS),
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
        )
        stack.start(
            "numawatch",
            [
                sys.executable,
                str(LAUNCHER),
                "serve",
                f"--host-root={node.host.root}",
                f"--intent={tmp / 'intent.yaml'}",
                f"--listen=127.0.0.1:{nw_port}",
                "--interval=1",
            ],
        )
        stack.alertmanager_url = f"http://127.0.0.1:{am_port}"
        stack.prometheus_url = f"http://127.0.0.1:{prom_port}"
        stack.numawatch_url = f"http://127.0.0.1:{nw_port}"
        stack.wait_ready("alertmanager", f"{stack.alertmanager_url}/-/ready")
        stack.wait_ready("prometheus", f"{stack.prometheus_url}/-/ready")
        stack.wait_ready("numawatch", f"{stack.numawatch_url}/healthz")
        yield stack
    finally:
        stack.stop()
        webhook.stop()


def wait_for_alert(stack: Stack, receiver: str, status: str, **labels: str) -> tuple[dict, dict]:
    found = wait_for(
        lambda: stack.webhook.find(receiver, status, **labels),
        ALERT_TIMEOUT,
        f"a {status} notification to {receiver} with {labels}; received so far: "
        f"{[(r, a['status'], a['labels'].get('alertname')) for r, _, a in stack.webhook.alerts()]}",
        stack.logs,
    )
    return found[0]


# --- the tests -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_prometheus_scrapes_numawatch_and_sees_the_planted_drift(stack):
    drift = wait_for(
        lambda: stack.query(f'numawatch_drift{{instance="{NODE}", check="container_cpuset_drift"}}'),
        ALERT_TIMEOUT,
        "numawatch_drift for the planted cpuset drift",
        stack.logs,
    )
    labels = drift[0]["metric"]
    assert labels["job"] == "numawatch"
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("inference", "vllm-llama-0", "vllm")


@pytest.mark.slow
def test_cpuset_drift_of_a_gpu_holder_pages_with_its_labels_and_runbook(stack):
    payload, alert = wait_for_alert(
        stack, "numawatch-pager", "firing", alertname="NumawatchContainerCPUSetDrift", check="container_cpuset_drift"
    )
    assert alert["labels"] == {
        "alertname": "NumawatchContainerCPUSetDrift",
        "severity": "critical",
        "check": "container_cpuset_drift",
        "cluster": CLUSTER,
        "node": NODE,
        "instance": NODE,
        "namespace": "inference",
        "pod": "vllm-llama-0",
        "container": "vllm",
    }
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}NumawatchContainerCPUSetDrift.md"
    assert (ROOT / "docs" / "runbooks" / "NumawatchContainerCPUSetDrift.md").is_file()
    assert (
        alert["annotations"]["summary"] == "A container's cgroup cpuset differs from the CPUs the kubelet assigned it."
    )
    assert "inference/vllm-llama-0 container vllm on gpu-e2e-1" in alert["annotations"]["description"]
    assert "It holds a GPU" in alert["annotations"]["description"]
    # grouped as the example configures: one notification per cluster, alert name and check
    assert payload["groupLabels"] == {
        "cluster": CLUSTER,
        "alertname": "NumawatchContainerCPUSetDrift",
        "check": "container_cpuset_drift",
    }
    assert payload["version"] == "4"


def test_numa_misalignment_of_the_gpu_pod_pages_for_pod_and_container_level_findings(stack):
    _, split = wait_for_alert(
        stack, "numawatch-pager", "firing", alertname="NumawatchContainerNUMAMisaligned", check="container_numa_split"
    )
    # container_numa_split is a pod-level finding: no container label, joined with the GPU holder by pod
    assert "container" not in split["labels"]
    assert split["labels"]["pod"] == "vllm-llama-0"
    _, mismatch = wait_for_alert(
        stack,
        "numawatch-pager",
        "firing",
        alertname="NumawatchContainerNUMAMisaligned",
        check="container_gpu_numa_mismatch",
    )
    assert mismatch["labels"]["container"] == "vllm"
    assert mismatch["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}NumawatchContainerNUMAMisaligned.md"


def test_kubelet_policy_drift_is_a_ticket(stack):
    _, alert = wait_for_alert(
        stack,
        "numawatch-ticket",
        "firing",
        alertname="NumawatchKubeletPolicyMismatch",
        check="kubelet_topology_manager_policy",
    )
    assert alert["labels"]["severity"] == "warning"
    assert alert["labels"]["instance"] == NODE
    assert alert["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}NumawatchKubeletPolicyMismatch.md"
    # tickets never reach the pager
    assert not stack.webhook.find("numawatch-pager", "firing", alertname="NumawatchKubeletPolicyMismatch")


def dashboard_queries() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        document = json.loads(path.read_text())
        for panel in document["panels"]:
            for target in panel.get("targets", []):
                found.append((path.name, panel["title"], target["expr"]))
        for variable in document["templating"]["list"]:
            if variable["type"] == "query":
                found.append((path.name, f"variable {variable['name']}", variable["query"]["query"]))
    return found


def substitute(expr: str) -> str:
    values = {
        "$__rate_interval": "15s",
        "$cluster": CLUSTER,
        "$job": "numawatch",
        "$instance": NODE,
        "$check": ".*",
        "$shape": ".*",
    }
    for variable, value in values.items():
        expr = expr.replace(variable, value)
    return expr


def test_every_dashboard_query_returns_data(stack):
    # firing alerts feed two fleet panels; rate() over 15s needs a few scrapes
    wait_for_alert(stack, "numawatch-pager", "firing", alertname="NumawatchContainerCPUSetDrift")
    queries = dashboard_queries()
    assert queries
    assert set(EXEMPT_QUERIES) <= {(name, title) for name, title, _ in queries}, "a stale entry in EXEMPT_QUERIES"
    queries = [(name, title, expr) for name, title, expr in queries if (name, title) not in EXEMPT_QUERIES]
    empty: list[str] = []
    deadline = time.monotonic() + 30
    pending = list(queries)
    while pending and time.monotonic() < deadline:
        still = []
        for name, title, expr in pending:
            expr = substitute(expr)
            variable = re.fullmatch(r"label_values\((.+), *(\w+)\)", expr)
            if variable:
                selector, label = variable.groups()
                ok = any(label in series for series in stack.series(selector))
            else:
                ok = bool(stack.query(expr))
            if not ok:
                still.append((name, title, expr))
        pending = still
        if pending:
            time.sleep(1)
    empty = [f"{name} / {title}: {expr}" for name, title, expr in pending]
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)


def test_numawatch_serves_the_fake_nvml_gpus_and_their_holders(stack):
    up = wait_for(
        lambda: stack.query(f'numawatch_gpu_nvml_up{{instance="{NODE}"}} == 1'),
        ALERT_TIMEOUT,
        "numawatch_gpu_nvml_up from the fake NVML",
        stack.logs,
    )
    assert len(up) == 4
    holders = stack.query(f'numawatch_gpu_processes{{instance="{NODE}"}}')
    assert {(s["metric"]["gpu"], s["metric"]["container"]) for s in holders} == {
        ("0000:18:00.0", "vllm"),
        ("0000:2a:00.0", "vllm"),
        ("0000:9a:00.0", "trtllm"),
        ("0000:ab:00.0", "trtllm"),
    }


@pytest.mark.slow
def test_gpu_bubble_rules_put_each_gpus_idle_while_held_next_to_its_holders_run_queue_wait(stack):
    from fake_pynvml import FakeThread, reference_pid, write_threads
    from fakehost.reference import VLLM

    # vllm's main thread waits another 0.5 s for a CPU: its holder's run-queue wait rate turns positive, trtllm's
    # (nothing changes) stays 0.
    pid = reference_pid(VLLM)
    write_threads(stack.node.host, pid, [FakeThread(pid, VLLM.exclusive, 501_000_000, involuntary=5, migrations=2)])

    def waiting() -> dict[str, float]:
        rows = stack.query(f'instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m{{instance="{NODE}"}}')
        found = {row["metric"]["container"]: float(row["value"][1]) for row in rows}
        return found if found.get("vllm", 0) > 0 else {}

    wait = wait_for(waiting, ALERT_TIMEOUT, "a positive run-queue wait rate for vllm", stack.logs)
    assert wait["trtllm"] == 0
    # Coarse idle while held per GPU, with the holder's labels: serve_with_fake_nvml.py makes GPUs 0-1 60 % busy
    # and GPUs 2-3 95 % busy once the fake's sample buffer has run dry.
    rows = stack.query(f'instance_gpu:numawatch_gpu_held_idle:ratio_rate5m{{instance="{NODE}"}}')
    idle = {(row["metric"]["gpu"], row["metric"]["container"]): float(row["value"][1]) for row in rows}
    assert set(idle) == {
        ("0000:18:00.0", "vllm"),
        ("0000:2a:00.0", "vllm"),
        ("0000:9a:00.0", "trtllm"),
        ("0000:ab:00.0", "trtllm"),
    }
    for (gpu, container), value in idle.items():
        assert value == pytest.approx(0.4 if container == "vllm" else 0.05, abs=0.02), (gpu, value)
    for row in rows:
        assert (row["metric"]["cluster"], row["metric"]["namespace"]) == (CLUSTER, "inference")
    # Side by side in one query: GPUs idle more than 10 % of their held time whose holder waited for CPUs.
    suspects = stack.query(
        "instance_gpu:numawatch_gpu_held_idle:ratio_rate5m > 0.1\n"
        "and on (cluster, node, instance, namespace, pod, container)\n"
        "instance_container:numawatch_gpu_holder_run_delay_seconds:rate5m > 0"
    )
    assert {row["metric"]["gpu"] for row in suspects} == {"0000:18:00.0", "0000:2a:00.0"}
    fleet = stack.query(f'cluster:numawatch_gpu_held_idle:ratio_rate5m{{cluster="{CLUSTER}"}}')
    assert float(fleet[0]["value"][1]) == pytest.approx((0.4 + 0.05) / 2, abs=0.02)


def test_capacity_rules_answer_how_many_more_replicas_of_each_shape_fit(stack):
    rows = wait_for(
        lambda: stack.query(f'cluster_shape:numawatch_capacity_shape_replicas:sum{{cluster="{CLUSTER}"}}'),
        ALERT_TIMEOUT,
        "cluster_shape:numawatch_capacity_shape_replicas:sum",
        stack.logs,
    )
    replicas = {row["metric"]["shape"]: float(row["value"][1]) for row in rows}
    assert replicas["vllm-tp2"] == 0  # every GPU of the reference node is held
    assert replicas["tokenizer"] > 0
    nodes = stack.query(f'cluster_shape:numawatch_capacity_shape_nodes:count{{cluster="{CLUSTER}"}}')
    assert {row["metric"]["shape"] for row in nodes} == {"tokenizer"}


@pytest.mark.slow
def test_widespread_drift_inhibits_the_per_node_alerts_of_the_same_check(stack):
    now = datetime.now(UTC)
    window = {"startsAt": now.isoformat(), "endsAt": (now + timedelta(minutes=5)).isoformat()}
    cluster = "inhibition-test"
    alerts = [
        {"labels": {"alertname": "NumawatchDriftWidespread", "severity": "critical", "cluster": cluster,
                    "check": "thp_enabled"}},
        {"labels": {"alertname": "NumawatchHostTuningDrift", "severity": "warning", "cluster": cluster,
                    "check": "thp_enabled", "instance": "n1"}},
        {"labels": {"alertname": "NumawatchHostTuningDrift", "severity": "warning", "cluster": cluster,
                    "check": "vm_swappiness", "instance": "n1"}},
    ]  # fmt: skip
    assert http_post_json(f"{stack.alertmanager_url}/api/v2/alerts", [{**a, **window} for a in alerts]) == 200

    wait_for_alert(stack, "numawatch-pager", "firing", alertname="NumawatchDriftWidespread", cluster=cluster)
    wait_for_alert(stack, "numawatch-ticket", "firing", cluster=cluster, check="vm_swappiness")

    query = urllib.parse.urlencode({"filter": f'cluster="{cluster}"', "inhibited": "true", "active": "true"})
    status, body = http_get(f"{stack.alertmanager_url}/api/v2/alerts?{query}")
    assert status == 200
    state = {(a["labels"]["alertname"], a["labels"]["check"]): a["status"] for a in json.loads(body)}
    assert state[("NumawatchHostTuningDrift", "thp_enabled")]["inhibitedBy"]
    assert state[("NumawatchHostTuningDrift", "thp_enabled")]["state"] == "suppressed"
    assert not state[("NumawatchHostTuningDrift", "vm_swappiness")]["inhibitedBy"]
    assert not state[("NumawatchDriftWidespread", "thp_enabled")]["inhibitedBy"]
    # both groups were flushed together (same group_wait); give a straggler one more group_interval
    time.sleep(2.5)
    assert not stack.webhook.find("numawatch-ticket", "firing", cluster=cluster, check="thp_enabled")


@pytest.mark.slow
def test_alerts_resolve_after_the_fixture_is_repaired(stack):
    from fakehost.reference import VLLM

    wait_for_alert(stack, "numawatch-pager", "firing", alertname="NumawatchContainerCPUSetDrift")
    wait_for_alert(stack, "numawatch-ticket", "firing", alertname="NumawatchKubeletPolicyMismatch")
    node = stack.node
    node.pin(VLLM, node.exclusive[VLLM.uid])
    node.set_topology_manager_policy("single-numa-node")

    _, resolved = wait_for_alert(stack, "numawatch-pager", "resolved", alertname="NumawatchContainerCPUSetDrift")
    assert resolved["labels"]["container"] == "vllm"
    assert resolved["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}NumawatchContainerCPUSetDrift.md"
    wait_for_alert(stack, "numawatch-ticket", "resolved", alertname="NumawatchKubeletPolicyMismatch")
    wait_for_alert(stack, "numawatch-pager", "resolved", alertname="NumawatchContainerNUMAMisaligned")
    assert stack.query(f'numawatch_drift{{instance="{NODE}"}}') == []
    firing = stack.query('ALERTS{alertname=~"Numawatch.+", alertstate="firing"}')
    assert firing == [], [a["metric"] for a in firing]
