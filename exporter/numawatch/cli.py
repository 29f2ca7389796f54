"""The ``numawatch`` command: argument parsing, exit codes and wiring; the work happens elsewhere.

Exit codes (``check``), node-problem-detector's plugin protocol (0 OK, 1 NonOK, 2 Unknown): 0 clean, 1 findings
of ``--fail-on``'s severity or worse (``report.FAIL_ON_DEFAULT``: warning, info under ``--format npd``), 2 unknown:
numawatch could not run, or ran but could not look (no check could be evaluated, or an essential source, the
topology, is down; ``report.verdict``), with one line on stderr saying why. Findings win over unknown: what was
seen is true whatever could not be read. Anything that stops numawatch from running (a bad flag, a host root that
is not there, an invalid intent or web config file, a port already taken, a hostile or broken capture bundle) is one
line on stderr and exit 2, never a traceback. ``check --fit``: 0 fits, 1 rejected, 2 cannot tell (with its line on
stderr). ``check --format npd`` prints one line for node-problem-detector on stdout whatever happens, a usage error
included (NPD shows stdout as the condition's message); ``--group`` judges one node condition's checks.
``explain``: 0, or 2 with one line on stderr for a name that is neither a check nor a metric.

Logs go to stderr as node_exporter writes them (``logformat``): logfmt, or JSON with ``--log.format=json``, one line
per record whatever a value holds, and whatever a library puts in a message or a traceback, an ``Authorization``
header's credentials never reach the log. ``serve`` logs its fatal errors the same way; ``check`` and ``capture``,
commands for a person or node-problem-detector, print theirs as ``numawatch: error: ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from numawatch import __version__, collectors, kubeapi
from numawatch.intent import REFERENCE, Intent, IntentError
from numawatch.listen import DEFAULT_LISTEN, Listen, parse_listen
from numawatch.logformat import LEVEL_ALIASES, LOG_FORMATS, LOG_LEVELS, fields, redact
from numawatch.paths import Paths
from numawatch.refresh import DEFAULT_INTERVAL, DEFAULT_STAGGER
from numawatch.report import CONDITION_BY_NAME
from numawatch.shapes import shape_argument

if TYPE_CHECKING:
    from numawatch.checks import Evaluation
    from numawatch.library_session import LibrarySession
    from numawatch.nvml_session import NvmlSession
    from numawatch.webconfig import WebConfig

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2  # also "unknown": the same status as report.EXIT_UNKNOWN

# DEFAULT_LISTEN (listen.py), ":10914": every interface, IPv4 and IPv6. The port is outside the fully allocated
# exporter range 9100-9999 and clear of the kubelet (10248/10250/10255), kube-proxy (10249/10256) and ingress-nginx
# (10254). README.md says the same.
DEFAULT_MAX_REQUESTS = 40  # node_exporter's --web.max-requests default
# check watches this long by default so the rate checks (interrupts and ticks on isolated CPUs) are evaluated;
# the environment variable changes the default (the test suite sets 0 to read once).
DEFAULT_WINDOW = 3.0
WINDOW_ENV = "NUMAWATCH_CHECK_WINDOW"
# serve looks at the intent and web config files (and the certificates the latter names) this often and reloads them
# when they changed: a ConfigMap or Secret update is a symlink swap that the kubelet announces to nobody. Each look is
# a stat and a realpath per file; the kubelet itself takes up to a minute or more to project an update.
DEFAULT_AUTO_RELOAD_INTERVAL = 5.0


def _log_level(text: str) -> str:
    level = text.lower()
    level = LEVEL_ALIASES.get(level, level)
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(LOG_LEVELS)})")
    return level

log = logging.getLogger("numawatch")


class UsageError(Exception):
    """Numawatch cannot run as asked; the message is the one line shown on stderr."""


class _UsageExit(SystemExit):
    """argparse's usage error, after its one line went to stderr; ``message`` is that line."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_ERROR)
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (and exit 2) instead of usage text plus the error."""

    def error(self, message: str) -> NoReturn:
        line = f"{self.prog}: error: {message} (see '{self.prog} --help')"
        sys.stderr.write(line + "\n")
        raise _UsageExit(line)


def _global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The flags every subcommand shares; accepted before or after the subcommand.

    On subcommands their default is SUPPRESS, so a flag given before the subcommand is not reset by the
    subparser's default.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("host and intent")
    group.add_argument("--host-root", default=default("/"), metavar="DIR",
                       help="the host's / as seen by numawatch: / on the node, /host in the DaemonSet (default: /)")
    group.add_argument("--path.procfs", dest="procfs", default=default(None), metavar="DIR",
                       help="procfs mount point (default: <host-root>/proc)")
    group.add_argument("--path.sysfs", dest="sysfs", default=default(None), metavar="DIR",
                       help="sysfs mount point (default: <host-root>/sys)")
    group.add_argument("--path.kubelet", dest="kubelet", default=default(None), metavar="DIR",
                       help="the kubelet's root directory (default: <host-root>/var/lib/kubelet)")
    group.add_argument("--path.pod-resources-socket", dest="pod_resources", default=default(None), metavar="SOCKET",
                       help="the kubelet's pod-resources socket (default: <kubelet root>/pod-resources/kubelet.sock)")
    group.add_argument("--path.rke2", dest="rke2", default=default(None), metavar="DIR",
                       help="RKE2 configuration directory (default: <host-root>/etc/rancher/rke2)")
    group.add_argument("--intent", default=default(None), metavar="FILE",
                       help="intent YAML file (default: the reference profile, see docs/intent.md); serve reads "
                            "it again on SIGHUP and when it changes")
    group.add_argument("--no-self-pin", dest="no_self_pin", action="store_true", default=default(False),
                       help="do not pin numawatch to the housekeeping CPUs (online minus isolcpus and nohz_full); "
                            "by default serve always pins itself, check and capture when they read this host (/)")
    group.add_argument("--no-nvml", dest="no_nvml", action="store_true", default=default(False),
                       help="do not use NVML (GPU utilisation and compute processes); the sysfs GPU inventory stays")
    api = parser.add_argument_group("Kubernetes API (optional, read-only; docs/sources.md)")
    api.add_argument("--kubeconfig", default=default(None), metavar="FILE",
                     help="read this node's Node object and pods from the API server of FILE's current context "
                          "(default: in a pod with a service account token, in-cluster access; otherwise the API is "
                          "not read)")
    api.add_argument("--kubernetes.node-name", dest="node_name", default=default(None), metavar="NAME",
                     help=f"this node's name in the API (default: ${kubeapi.NODE_NAME_ENV}, which deploy/ sets "
                          "from spec.nodeName)")
    api.add_argument("--kubernetes.timeout", dest="api_timeout", default=default(kubeapi.DEFAULT_TIMEOUT),
                     type=_positive_seconds, metavar="SECONDS",
                     help=f"time limit of each request to the API server (default: {kubeapi.DEFAULT_TIMEOUT:g})")
    logs = parser.add_argument_group("logging (stderr)")
    logs.add_argument("--log.level", "--log-level", dest="log_level", default=default("info"), type=_log_level,
                      metavar="LEVEL", help=f"only log messages of this level or above: {', '.join(LOG_LEVELS)} "
                                            "(default: info; --log-level and 'warning' are the earlier spellings)")
    logs.add_argument("--log.format", dest="log_format", default=default("logfmt"), choices=LOG_FORMATS,
                      help="logfmt or json, the keys and levels of node_exporter's logs (default: logfmt)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="numawatch",
        description="NUMA pinning drift detector and Prometheus exporter for Kubernetes GPU nodes.",
    )
    parser.add_argument("--version", action="version", version=f"numawatch {__version__}")
    _global_flags(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = commands.add_parser(
        "check", help="evaluate the host once and report drift (exit 0: clean, 1: findings, 2: unknown)",
        description="Evaluate the host once and report drift. Exit 0: clean; 1: findings (of --fail-on's "
                    "severity or worse); 2: unknown: numawatch could not run, no check could be evaluated, or the "
                    "topology source is down (one line on stderr says why). Findings win over unknown.",
    )
    check.add_argument("--format", choices=("table", "json", "npd"), default="table",
                       help="output format (default: table); npd: one line of at most 80 characters for "
                            "node-problem-detector's custom plugins, with the same exit status (docs/checks.md)")
    check.add_argument("--fail-on", choices=("info", "warning", "critical"), default=None,
                       help="the least severe finding that makes the exit status 1; less severe ones are shown and "
                            "leave it 0 or 2 (default: warning; info under --format npd, whose node conditions are "
                            "set by every finding of their group, as the alerts are)")
    check.add_argument("--group", dest="groups", action="append", choices=tuple(CONDITION_BY_NAME), default=None,
                       metavar="CONDITION",
                       help="judge only the checks of this node condition (repeatable): "
                            f"{', '.join(CONDITION_BY_NAME)}; what one node-problem-detector rule runs")
    check.add_argument("--window", default=None, type=_non_negative_seconds, metavar="SECONDS",
                       help="read the host twice, SECONDS apart, so rate checks (interrupts and ticks on isolated "
                            f"CPUs) can be evaluated; 0 reads once (default: ${WINDOW_ENV} or {DEFAULT_WINDOW:g})")
    check.add_argument("--fit", type=shape_argument, default=None, metavar="SHAPE",
                       help="instead of the drift report, say whether a pod of this shape would be admitted now and "
                            "on which NUMA node(s), e.g. cpu=16,memory=200Gi,nvidia.com/gpu=2 (exit 0: fits, "
                            "1: rejected, 2: malformed or cannot tell); see docs/capacity.md")
    check.add_argument("--from", dest="bundle", default=None, metavar="BUNDLE",
                       help="evaluate a bundle made by 'numawatch capture' instead of this host (offline; the "
                            "bundle's intent unless --intent is given)")
    _global_flags(check, suppress=True)
    check.set_defaults(run=run_check)

    serve = commands.add_parser(
        "serve", help="run the Prometheus exporter (/metrics, /healthz, /)",
        description="Evaluate the host every --interval seconds and serve the result as Prometheus metrics.",
    )
    serve.add_argument("--interval", default=DEFAULT_INTERVAL, type=_positive_seconds, metavar="SECONDS",
                       help=f"seconds between evaluations (default: {DEFAULT_INTERVAL:g})")
    serve.add_argument("--stagger", default=DEFAULT_STAGGER, type=_whole_number(1), metavar="K",
                       help="re-read slow-drifting files (pods' cpusets and memory placement, IRQ affinities, "
                            "cpufreq governors, idle-state settings...) for a rotating share of their objects per "
                            "evaluation, each family over K evaluations or a multiple of K; new pods, IRQs and CPU "
                            "policies are read at once; 'numawatch explain' says how stale each check and metric may "
                            f"then be; 1: read everything (default: {DEFAULT_STAGGER})")
    serve.add_argument("--kubernetes.interval", dest="api_interval", default=kubeapi.DEFAULT_INTERVAL,
                       type=_positive_seconds, metavar="SECONDS",
                       help="seconds between readings of the Node and its pods from the API server, where it is "
                            f"read (default: {kubeapi.DEFAULT_INTERVAL:g})")
    web = serve.add_argument_group("web server")
    web.add_argument("--web.listen-address", "--listen", dest="listen", default=parse_listen(DEFAULT_LISTEN),
                     type=parse_listen, metavar="[HOST]:PORT",
                     help=f"address to listen on (default: {DEFAULT_LISTEN}): :PORT or [::]:PORT every interface, "
                          "IPv4 and IPv6; 0.0.0.0:PORT IPv4 only; [::1]:PORT, 127.0.0.1:PORT or HOST:PORT those "
                          "addresses (--listen is the earlier spelling)")
    web.add_argument("--web.config.file", dest="web_config", default=None, metavar="FILE",
                     help="TLS, client certificates, basic auth and headers, in the exporter-toolkit format "
                          "(see docs/security.md); re-read on SIGHUP and when it or a certificate it names changes")
    web.add_argument("--web.max-requests", dest="max_requests", default=DEFAULT_MAX_REQUESTS, type=_whole_number(0),
                     metavar="N", help="requests in flight at once; more are answered 503 at once; 0: no limit "
                                       f"(default: {DEFAULT_MAX_REQUESTS})")
    web.add_argument("--web.read-timeout", dest="read_timeout", default=10.0, type=_positive_seconds,
                     metavar="SECONDS", help="time a client has to send its request (and the TLS handshake); then "
                                             "the connection is closed (default: 10)")
    web.add_argument("--web.write-timeout", dest="write_timeout", default=10.0, type=_positive_seconds,
                     metavar="SECONDS", help="time a client has to take its response; then the connection is closed "
                                             "(default: 10)")
    serve.add_argument("--config.auto-reload-interval", dest="auto_reload_interval",
                       default=DEFAULT_AUTO_RELOAD_INTERVAL, type=_non_negative_seconds, metavar="SECONDS",
                       help="look this often whether the --intent or --web.config.file file (or a certificate it "
                            "names) changed, a Kubernetes ConfigMap or Secret update included, and reload them as "
                            f"SIGHUP does; 0: only on SIGHUP (default: {DEFAULT_AUTO_RELOAD_INTERVAL:g})")
    collectors.add_flags(serve)
    _global_flags(serve, suppress=True)
    serve.set_defaults(run=run_serve)

    capture = commands.add_parser(
        "capture", help="record the files numawatch reads on this host into a bundle for 'check --from'",
        description="Evaluate the host once while recording every file numawatch reads, and write them (command "
                    "lines and environments redacted) with the intent into a .tar.gz bundle that "
                    "'numawatch check --from BUNDLE' evaluates offline with the same result.",
    )
    capture.add_argument("-o", "--output", required=True, metavar="BUNDLE",
                         help="the bundle to write, e.g. node.tar.gz (replaced if it exists)")
    _global_flags(capture, suppress=True)
    capture.set_defaults(run=run_capture)

    explain = commands.add_parser(
        "explain", help="say what a check or metric reads and how stale serve's value of it may be",
        description="Print what a check (by id) or a metric (by name) reads, how often serve reads each input and "
                    "its worst-case staleness in evaluations and in seconds, computed from the refresh table; "
                    "without NAME, every check and metric. An unknown NAME: one line on stderr, exit 2.",
    )
    explain.add_argument("name", nargs="?", default=None, metavar="NAME",
                         help="a check id (container_cpuset_drift) or a metric name (numawatch_cpu_info)")
    explain.add_argument("--interval", default=DEFAULT_INTERVAL, type=_positive_seconds, metavar="SECONDS",
                         help=f"serve's --interval the seconds are counted at (default: {DEFAULT_INTERVAL:g})")
    explain.add_argument("--stagger", default=DEFAULT_STAGGER, type=_whole_number(1), metavar="K",
                         help=f"serve's --stagger (default: {DEFAULT_STAGGER}); 1: as check reads")
    explain.add_argument("--kubernetes.interval", dest="api_interval", default=kubeapi.DEFAULT_INTERVAL,
                         type=_positive_seconds, metavar="SECONDS",
                         help=f"serve's --kubernetes.interval (default: {kubeapi.DEFAULT_INTERVAL:g})")
    explain.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                         help="output format (default: text); markdown: the tables of docs/sources.md")
    explain.set_defaults(run=run_explain)
    return parser


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {text!r}")
        return value

    return parse


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number of seconds, got {text!r}")
    return value


def make_paths(args: argparse.Namespace) -> Paths:
    """Paths from the flags, after checking that the host root is a readable directory."""
    root = Path(args.host_root)
    try:
        if not root.exists():
            raise UsageError(f"host root {root} does not exist")
        if not root.is_dir():
            raise UsageError(f"host root {root} is not a directory")
    except PermissionError:  # a directory above it may not be searched: stat() itself is refused
        raise UsageError(f"host root {root} is not readable") from None
    if not os.access(root, os.R_OK | os.X_OK):
        raise UsageError(f"host root {root} is not readable")
    return Paths.from_root(
        root, procfs=args.procfs, sysfs=args.sysfs, kubelet=args.kubelet, rke2=args.rke2,
        pod_resources=args.pod_resources,
    )


def intent_from(path: str | None) -> Intent:
    """The intent file's profile, or the reference profile when no file is given."""
    if path is None:
        return REFERENCE
    from numawatch.intentfile import load_intent as load

    try:
        return load(path)
    except IntentError as error:
        raise UsageError(_one_line(str(error))) from None
    except OSError as error:
        raise UsageError(f"cannot read intent file {path}: {error.strerror or error}") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run_check(args: argparse.Namespace) -> int:
    from numawatch import report

    if args.fit is not None and (args.format == "npd" or args.groups):
        raise UsageError("--fit answers for one pod shape; --format npd and --group are for the drift report")
    if args.bundle is not None:
        evaluation, shown_root = _evaluate_bundle(args)
    else:
        from numawatch.checks import evaluate
        from numawatch.host import read_host_window

        paths = make_paths(args)
        intent = intent_from(args.intent)
        _pin_if_live(args, paths)
        api = kubernetes_api(args)
        api.read_once()
        with _nvml_session(args) as session, _gpu_libraries() as libraries:
            if args.fit is not None:
                from numawatch.capacity import fit_answer
                from numawatch.host import read_host

                host = read_host(paths, nvml=session, libraries=libraries, kubernetes_api=api)
                answer = fit_answer(host, intent, args.fit)
                sys.stdout.write(answer.as_json() if args.format == "json" else answer.as_text())
                sys.stdout.flush()
                if not answer.determined:
                    print(f"numawatch: {_one_line(answer.reason)}", file=sys.stderr)
                return answer.exit_code
            host = read_host_window(paths, _window(args), nvml=session, libraries=libraries, kubernetes_api=api)
        evaluation, shown_root = evaluate(host, intent), str(paths.root)
    if args.groups:
        evaluation = report.restrict(
            evaluation, {check for name in args.groups for check in CONDITION_BY_NAME[name].checks}
        )
    fail_on = args.fail_on or report.FAIL_ON_DEFAULT[args.format]
    renderers = {"json": report.render_json, "npd": report.render_npd, "table": report.render_table}
    sys.stdout.write(renderers[args.format](evaluation, shown_root, fail_on))
    sys.stdout.flush()
    outcome = report.verdict(evaluation, fail_on)
    if outcome.reason:
        print(f"numawatch: unknown: {outcome.reason}", file=sys.stderr)
    return outcome.exit_code


def _evaluate_bundle(args: argparse.Namespace) -> tuple[Evaluation, str]:
    """``check --from``: the bundle's evaluation, and what the report names as the host root (the bundle)."""
    from numawatch import capture

    moved = [flag for flag, value, default in (
        ("--host-root", args.host_root, "/"), ("--path.procfs", args.procfs, None), ("--path.sysfs", args.sysfs, None),
        ("--path.kubelet", args.kubelet, None), ("--path.rke2", args.rke2, None),
        ("--path.pod-resources-socket", args.pod_resources, None),
    ) if value != default]
    if moved:
        raise UsageError(f"--from reads the host from the bundle; {', '.join(moved)} cannot be used with it")
    if args.window:
        raise UsageError("--from: a bundle holds one reading, so --window cannot be used with it")
    if args.fit is not None:
        raise UsageError("--fit answers for this host now; it cannot be used with --from")
    intent = intent_from(args.intent) if args.intent is not None else None
    try:
        return capture.evaluate_bundle(args.bundle, intent), args.bundle
    except capture.BundleError as error:
        raise UsageError(_one_line(str(error))) from None


def run_capture(args: argparse.Namespace) -> int:
    from numawatch import capture

    paths = make_paths(args)
    intent = intent_from(args.intent)
    _pin_if_live(args, paths)
    api = kubernetes_api(args)
    api.read_once()
    try:
        with _nvml_session(args) as session, _gpu_libraries() as libraries:
            result = capture.capture(paths, intent, args.output, intent_file=args.intent, nvml=session,
                                     libraries=libraries, kubernetes_api=api)  # fmt: skip
    except capture.CaptureError as error:
        raise UsageError(_one_line(str(error))) from None
    print(f"numawatch: captured {result.files} files ({result.bytes} bytes, {result.redacted} redacted) from "
          f"{paths.root} into {args.output}: {result.summary}", file=sys.stderr)
    return EXIT_CLEAN


def run_explain(args: argparse.Namespace) -> int:
    from numawatch import dataflow, explainformat
    from numawatch.hosttext import escaped

    try:
        if args.name is None:
            explanations = dataflow.explain_all(args.stagger, args.api_interval)
        else:
            explanations = [dataflow.explain(args.name, args.stagger, args.api_interval)]
    except dataflow.UnknownName:
        raise UsageError(f"no check or metric is named '{escaped(args.name)}' (numawatch explain lists them)") from None
    if args.format == "json":
        sys.stdout.write(explainformat.as_json(explanations, args.interval, args.api_interval))
    elif args.format == "markdown":
        sys.stdout.write(explainformat.markdown(explanations, args.interval))
    else:
        sys.stdout.write(explainformat.text(explanations, args.interval))
    sys.stdout.flush()
    return EXIT_CLEAN


def _window(args: argparse.Namespace) -> float:
    if args.window is not None:
        return args.window
    configured = os.environ.get(WINDOW_ENV)
    if configured is None:
        return DEFAULT_WINDOW
    try:
        return _non_negative_seconds(configured)
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"${WINDOW_ENV}: {error}") from None


def kubernetes_api(args: argparse.Namespace, interval: float = kubeapi.DEFAULT_INTERVAL) -> kubeapi.KubernetesApi:
    """The Kubernetes API session of --kubeconfig or the pod's service account; without either, one that says the
    API is not configured (the kubernetes_api source is then down with that reason, and nothing else changes)."""
    access, reason = kubeapi.access_from(args.kubeconfig, args.node_name, timeout=args.api_timeout, interval=interval)
    if access is None and (args.kubeconfig is not None or args.node_name is not None):
        log.warning("Kubernetes API not read: %s", reason)
    return kubeapi.KubernetesApi(access, reason)


@contextlib.contextmanager
def _nvml_session(args: argparse.Namespace) -> Iterator[NvmlSession | None]:
    """The NVML session the nvml and processes sources read through, living as long as the block (None with
    --no-nvml: those sources are down saying so)."""
    if args.no_nvml:
        yield None
        return
    from numawatch.nvml_session import NvmlSession

    with NvmlSession() as session:
        yield session


def _library_sessions() -> dict[str, LibrarySession]:
    """AMD SMI's and HLML's sessions for the amdsmi and hlml sources. Nothing is imported until a source
    calls its library, which it does only where sysfs lists that vendor's accelerators."""
    from numawatch.sources.amdsmi import amdsmi_session
    from numawatch.sources.hlml import hlml_session

    return {"amdsmi": amdsmi_session(), "hlml": hlml_session()}


@contextlib.contextmanager
def _gpu_libraries() -> Iterator[dict[str, LibrarySession]]:
    """The other vendors' library sessions, shut down when the block ends."""
    sessions = _library_sessions()
    try:
        yield sessions
    finally:
        for session in sessions.values():
            session.close()


def _pin(paths: Paths) -> None:
    """Move every thread of numawatch onto the housekeeping CPUs, so it never runs on a core it protects."""
    from numawatch.selfpin import pin_to_housekeeping
    from numawatch.sources import topology

    try:
        result = pin_to_housekeeping(topology.read(paths))
    except Exception as error:  # an unreadable topology: run where the kernel puts us, and say so
        log.warning("not pinned to housekeeping CPUs: %s", _one_line(str(error)))
        return
    log.info("%s", result.reason)


def _pin_if_live(args: argparse.Namespace, paths: Paths) -> None:
    """check and capture pin only when they read this machine: / itself, or a host root whose procfs shows this very
    process (the host's /proc under /host in a pod with the host's PID namespace, as node-problem-detector runs
    ``check --host-root=/host``). A captured or fake tree's CPUs are not ours."""
    if not args.no_self_pin and (paths.sysfs == Path("/sys") or _procfs_shows_this_process(paths)):
        _pin(paths)


def _procfs_shows_this_process(paths: Paths) -> bool:
    """Whether ``<procfs>/self`` is the live procfs's link to this process (a fake tree has no such link)."""
    try:
        return os.readlink(paths.procfs / "self") == str(os.getpid())
    except OSError:
        return False


def web_config_from(path: str | None) -> WebConfig | None:
    if path is None:
        return None
    from numawatch.webconfig import WebConfigError, load_web_config

    try:
        return load_web_config(path)
    except WebConfigError as error:
        raise UsageError(_one_line(str(error))) from None


# Young collections every 5,000 net container allocations instead of CPython's 700 (see tune_gc_for_serve).
SERVE_GC_THRESHOLDS = (5000, 10, 10)


def tune_gc_for_serve() -> None:
    """Set the cyclic garbage collector up for a long-running daemon, once everything serve starts with is built.

    What is imported and built by now (modules, the sources' tables, the app) lives as long as the process:
    ``gc.freeze()`` keeps the collector from walking it again at every full collection. An evaluation allocates tens
    of thousands of short-lived objects that reference counting frees; with young collections every 5,000 net
    allocations instead of 700 few of them are still alive when one runs, so the collector's time per evaluation
    falls to a fraction (the measurement is in docs/performance.md). Cycles are still collected, only less often.
    """
    gc.freeze()
    gc.set_threshold(*SERVE_GC_THRESHOLDS)


def run_serve(args: argparse.Namespace) -> int:
    from numawatch import server
    from numawatch.allocator import limit_arenas
    from numawatch.descriptors import raise_soft_limit
    from numawatch.filewatch import FileWatch
    from numawatch.host import HostReader
    from numawatch.intentfile import load_intent
    from numawatch.listen import bind

    paths = make_paths(args)
    gate: server.Gate | None = None
    web_config: WebConfig | None = None
    # Before any thread of serve's allocates: its threads share glibc's one arena (allocator.py).
    limit_arenas()
    # Before anything holds descriptors; the Gate below keeps a reserve of this limit from clients.
    descriptor_limit = raise_soft_limit()

    def watched() -> list[str]:
        """The files a change of which is a reload: the intent, the web config and the certificates it names."""
        files = [name for name in (args.intent, args.web_config) if name is not None]
        config = gate.web_config if gate is not None else web_config
        if config is not None and config.tls is not None:
            tls = config.tls
            files += [str(name) for name in (tls.cert_file, tls.key_file, tls.client_ca_file) if name is not None]
        return files

    # Each file is fingerprinted before it is read, so a change while serve starts is a reload at the first poll.
    watch = FileWatch(watched, args.auto_reload_interval, initial=watched()) if args.auto_reload_interval else None
    intent = intent_from(args.intent)
    web_config = web_config_from(args.web_config)
    if watch is not None:
        watch.remember(watched())  # the certificates: read when the Gate below builds its TLS context
    listen: Listen = args.listen
    try:
        sockets = bind(listen)
    except OSError as error:
        raise UsageError(f"cannot listen on {listen}: {error.strerror or error}") from None
    log.info("Starting numawatch", extra=fields(version=__version__, host_root=str(paths.root),
                                                intent=intent.source, descriptor_limit=descriptor_limit))
    intent_path = args.intent
    loader = (lambda: load_intent(intent_path)) if intent_path is not None else None
    # Before the event loop's executor and NVML's worker start, so they inherit the affinity. The topology read runs
    # in a daemon thread with a deadline: a hung /proc or /sys (a stuck mount) must not stop serve from starting;
    # should it finish later, pin_to_housekeeping still moves every thread of the process.
    if not args.no_self_pin:
        pinning = threading.Thread(target=_pin, args=(paths,), name="numawatch-self-pin", daemon=True)
        pinning.start()
        pinning.join(timeout=2.0)
    contexts = []
    session = None
    if not args.no_nvml:
        from numawatch.nvml_session import NvmlSession

        session = NvmlSession()
        contexts.append(session.cleanup_ctx)
    libraries = _library_sessions()
    contexts.extend(library.cleanup_ctx for library in libraries.values())
    enabled = collectors.from_args(args)
    if enabled.disabled:
        log.info("Collectors turned off", extra=fields(collectors=",".join(sorted(enabled.disabled))))
    # The API session's reading task runs on serve's event loop; the kubernetes_api source reads its last answer.
    api = kubernetes_api(args, interval=args.api_interval)
    contexts.append(api.cleanup_ctx)
    # Without the gpu_holders collector nothing uses the holders' scheduling counters: they are not read.
    reader = HostReader(paths, stagger=args.stagger, nvml=session,
                        holder_scheduling="gpu_holders" in enabled.enabled, libraries=libraries,
                        kubernetes_api=api)  # fmt: skip
    from numawatch.hotplug import HotplugMonitor, invalidator

    # GPUs and CPUs coming and going refresh the inventory and topology without polling them every evaluation (and
    # make NVML enumerate again: its reader is the nvml source's, None without NVML).
    contexts.append(HotplugMonitor(invalidator(reader, reader.state("nvml"))).cleanup_ctx)
    sampler = server.Sampler(reader, intent, interval=args.interval, intent_loader=loader, collectors=enabled)
    limits = server.Limits(args.max_requests, args.read_timeout, args.write_timeout)
    gate = server.Gate(limits, web_config, args.web_config)
    app = server.make_app(sampler, gate=gate, contexts=contexts)

    # SIGHUP's default action ends the process; until the server installs its handler, a reload asked for too
    # early is ignored rather than fatal.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    tune_gc_for_serve()
    try:
        asyncio.run(server.serve(app, sockets, watch=watch))
    except OSError as error:
        raise UsageError(f"cannot listen on {listen}: {error.strerror or error}") from None
    finally:
        for sock in sockets:
            sock.close()
    return EXIT_CLEAN


def _npd_cannot_run(arguments: Sequence[str], message: str) -> None:
    """Under ``--format npd`` a run that cannot start still prints its one line on stdout: NPD shows stdout as the
    Unknown condition's message (stderr only reaches NPD's log)."""
    pairs = itertools.pairwise(arguments)
    if "--format=npd" in arguments or ("--format", "npd") in pairs:
        from numawatch.report import npd_line

        reason = message.partition("error: ")[2] or message
        print(npd_line(f"unknown: numawatch cannot run: {reason}"), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(arguments)
    except SystemExit as done:  # --help, --version and usage errors: argparse has already written its line
        if isinstance(done, _UsageExit):
            _npd_cannot_run(arguments, done.message)
        return done.code if isinstance(done.code, int) else EXIT_ERROR
    from numawatch import logformat

    logformat.configure(args.log_level, args.log_format, sys.stderr)
    try:
        return args.run(args)
    except UsageError as error:
        if args.command == "serve":  # a daemon's last words go where its logs go, in their format
            log.error("%s", error)
        else:
            print(f"numawatch: error: {error}", file=sys.stderr)
            _npd_cannot_run(arguments, str(error))
        return EXIT_ERROR
    except KeyboardInterrupt as stopped:
        # Ctrl-C, or a stopping signal during check --from (capture.Interrupted, which says which): the shell's code.
        return 128 + getattr(stopped, "signum", signal.SIGINT)


__all__ = ["DEFAULT_LISTEN", "Listen", "main", "parse_listen", "redact"]
