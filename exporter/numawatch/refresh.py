"""How often each source reads its files again: one table, applied by the HostReader.

Every source is read at every evaluation unless this table says otherwise. A policy may say:

- ``on_change``: the source's files change only on events (a kubelet restart, hotplug). Its
  ``SourceSpec.fingerprint`` names them cheaply (stats, a small file); the HostReader reuses the last reading
  while the fingerprint, and the readings of the sources it needs, are the same.
- ``every``: the source's files change at every moment but what depends on them judges rates over minutes (the
  /proc/interrupts counters): with serve's ``--stagger K`` > 1 the source is read at one reading in ``every`` and
  the readings between hand its last snapshot out again (its generation stays, so nothing derived from it is made
  again); a change of a need's reading, or a whole reading asked for, reads it at once. With K = 1 it is read at
  every reading.
- ``rotating``: families of the source's objects whose files drift slowly (a container's memory placement, an
  IRQ's affinity, a cpufreq governor). With serve's ``--stagger K`` (HostReader's ``stagger``) a reading re-reads
  a family's files for a rotating 1/K of its objects and keeps the others' values of the previous reading, so a
  value may be K - 1 evaluations old. A family whose alerts wait much longer than K evaluations may be stretched
  (``Policy.stretch``: read over S x K readings, 1/(S K) of its objects per reading), so that its cost per
  evaluation follows what its alerts need rather than the fastest family's K; one whose staleness must not grow with
  K has a fixed round instead (``Policy.fixed``: read over N readings whatever K > 1). A family whose objects are
  read only at the turn of another family's object (a container's placement at its pod's turn) names it
  (``Policy.waits``). With K = 1 (``check``, ``capture``, ``check --from``) everything is read, stretched or not.

How stale a value may be follows from this table alone: ``numawatch explain`` (numawatch.dataflow) computes it for
every check and metric family from the inputs they declare, so no bound is written down anywhere else.

A source that reads incrementally (``SourceSpec.incremental``) is handed a ``Refresh`` at every reading: its share
and turn of the rotation, whether this reading must read everything (the first one, and the one after
``HostReader.invalidate``: SIGHUP, a CPU or device coming or going) and the ``memory`` its previous reading left
(``Carried``). The HostReader keeps that memory between readings; the source holds nothing. A family not named in
the source's policy is read in full at every reading whatever K is: the table, not the source, decides what
rotates.

A new source declares its policy here (a source missing from the table is read every evaluation, or on change
when its spec has a fingerprint); ``tests/test_refresh.py`` checks the table against the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Policy:
    """When a source reads its files again (see the module docstring)."""

    on_change: bool = False  # read again only when its fingerprint or a need's reading changed
    rotating: frozenset[str] = frozenset()  # families of objects read for 1/K of them per evaluation
    why: str = ""  # what makes the policy safe: what the staleness it allows costs
    # Rotating families read over ``stretch`` times K readings (1/(stretch K) of their objects per reading), for
    # families whose alerts wait long enough that a K-reading rotation would re-read them many times per wait.
    stretch: Mapping[str, int] = field(default_factory=dict, hash=False)
    # With K > 1, read at one reading in ``every`` (the others hand the last snapshot out again); 1: every reading.
    every: int = 1
    # Rotating families read over a fixed number of readings whatever K is (with K > 1; 1/N of their objects per
    # reading): a family whose changes must show within a bound that does not grow with serve's --stagger.
    fixed: Mapping[str, int] = field(default_factory=dict, hash=False)
    # Rotating families whose objects are read only at the first turn, after their own, of an object of the families
    # named (a container's placement at its pod's): their staleness adds the longest round of those (one reading for
    # a family the policy does not rotate).
    waits: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # Work a source does once in N readings whatever K is (K = 1 included: it is not a share of objects but one
    # costly look, such as a search of every process), by name: the source asks ``Refresh.period``.
    periodic: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.on_change and self.rotating:
            raise ValueError("a policy is on change or rotating, not both")
        if self.every < 1:
            raise ValueError(f"every must be a whole number >= 1, got {self.every}")
        if self.every > 1 and (self.on_change or self.rotating):
            raise ValueError("a policy read one reading in several is neither on change nor rotating")
        for family, times in self.stretch.items():
            if family not in self.rotating or times < 1:
                raise ValueError(f"stretch of {family!r} must be a whole number >= 1 of a rotating family")
        for family, readings in self.fixed.items():
            if family not in self.rotating or readings < 1 or family in self.stretch:
                raise ValueError(f"the fixed round of {family!r} must be a whole number >= 1 of a rotating family "
                                 "that is not stretched")
        for name, readings in self.periodic.items():
            if readings < 1 or name in self.rotating:
                raise ValueError(f"the period of {name!r} must be a whole number >= 1, not a rotating family's")
        for family, waited in self.waits.items():
            # A family that does not rotate (any more) is read at every reading: waiting on it costs one.
            if not waited or family in waited:
                raise ValueError(f"{family!r} must wait on other families of its source")


EVERY = Policy(why="changes at any moment, or is cheap to read")


def _rotating(
    *families: str,
    why: str,
    stretch: Mapping[str, int] | None = None,
    fixed: Mapping[str, int] | None = None,
    waits: Mapping[str, tuple[str, ...]] | None = None,
) -> Policy:
    return Policy(rotating=frozenset(families), why=why, stretch=dict(stretch or {}), fixed=dict(fixed or {}),
                  waits=dict(waits or {}))  # fmt: skip


def _on_change(why: str) -> Policy:
    return Policy(on_change=True, why=why)


# serve's --interval, seconds between evaluations (one reading each), and its --stagger K, the rotating families'
# share per evaluation (``check`` and ``capture`` read with K = 1).
DEFAULT_INTERVAL = 15.0
DEFAULT_STAGGER = 4

# Family names are what the sources ask ``Refresh.share_of`` and ``Refresh.due`` about.
PLACEMENT = "container memory placement"
SHARED_PODS = "shared pods"
GUARANTEED_PODS = "guaranteed pods"
GUARANTEED_CONTAINERS = "guaranteed containers"
AFFINITIES = "irq affinities"
REQUESTED_MASKS = "irq requested masks"
# irqbalance's periodic looks (``Policy.periodic``).
DAEMON_SEARCH = "irqbalance search"
SEARCH_WHILE_RUNNING = "irqbalance search while one runs"
FULL_PROCESS_SCAN = "irqbalance scan of every process"
GOVERNORS = "cpufreq governors"
IDLE_STATES = "idle state settings"
POD_USAGE = "pod usage"
BUNDLE_CONFIGS = "bundle configs"
POD_LOG_DIRS = "pod log directories"

# What each family's objects are and which of their files are read in their turn (``numawatch explain``).
FAMILIES: Mapping[str, str] = {
    PLACEMENT: "per container but a Guaranteed pod's (its sandbox's included): memory.numa_stat, "
    "cpuset.mems.effective and, once its sandbox verdict is settled, "
    "cgroup.procs",
    SHARED_PODS: "per Burstable or BestEffort pod: its directory listed and its containers' cpusets read",
    GUARANTEED_PODS: "per Guaranteed pod: its directory listed (a container started or restarted in it)",
    GUARANTEED_CONTAINERS: "per Guaranteed pod: its containers' (not the sandbox's) cpuset.cpus.effective, "
    "cpuset.mems.effective and memory.numa_stat",
    AFFINITIES: "per IRQ: effective_affinity_list",
    REQUESTED_MASKS: "per IRQ: smp_affinity_list, at those of its irq affinities turns that are its own (and at any "
    "turn where its effective affinity changed)",
    GOVERNORS: "per cpufreq policy: scaling_governor",
    IDLE_STATES: "per CPU: the idle states' disable files and the PM QoS resume latency limit",
    POD_USAGE: "per pod: cpu.stat and memory.current",
    BUNDLE_CONFIGS: "per known runtime bundle: its config.json stat'ed (parsed again when it moved)",
    POD_LOG_DIRS: "per known var/log/pods/<pod> directory: stat'ed (listed again when it moved)",
}

POLICIES: Mapping[str, Policy] = {
    "topology": _on_change("CPUs, nodes and isolation change on hotplug and reboot only"),
    "cgroups": _rotating(
        PLACEMENT,
        SHARED_PODS,
        GUARANTEED_PODS,
        GUARANTEED_CONTAINERS,
        why="a Guaranteed pod's containers are what the CPU and Memory Managers pin, and their drift is the point: "
        "their cpusets, cpuset.mems and memory.numa_stat have a fixed round whatever K is; its directory is listed (a "
        "container started or restarted in it) in its turn of the guaranteed pods, a container gone shows at its next "
        "read. Other containers' memory placement drifts over minutes (its alerts wait 30 minutes): a container's is "
        "read at its pod's first turn after its own (waits); shared containers' cpusets (of any pod: a Guaranteed "
        "pod's fractional sidecar too) move with the CPU Manager's shared pool, from whose change every pod with a "
        "container on it is listed and its cpusets read at every reading for K readings, and every pod likewise from "
        "a change of the online CPUs (a CPU offline or back moves the cpusets that held it), and otherwise only when "
        "someone else rewrites one, while the drift alerts wait 10-15 minutes",
        stretch={PLACEMENT: 8, SHARED_PODS: 2},
        fixed={GUARANTEED_CONTAINERS: 2},
        waits={PLACEMENT: (SHARED_PODS, GUARANTEED_PODS)},
    ),
    "names": _rotating(
        BUNDLE_CONFIGS,
        POD_LOG_DIRS,
        why="a bundle's config.json is written when its container is created and kept until it goes: a new bundle "
        "is parsed and a gone one dropped at the reading that lists it; only a config.json rewritten in place "
        "(nothing does that to a running container's bundle) waits for its turn. var/log/pods is listed at every "
        "reading, so a pod's log directory coming or going shows at once; one is stat'ed (and listed again when its "
        "mtime moved) in its turn: what it adds, a container's log directory, only names a container whose bundle "
        "does not",
        stretch={BUNDLE_CONFIGS: 4, POD_LOG_DIRS: 4},
    ),
    "kubelet_config": _on_change("the kubelet's configuration changes with a kubelet restart"),
    "kubelet_state": _on_change("the checkpoint files are rewritten when the managers' state changes"),
    "pod_resources": Policy(
        why="two round trips to the kubelet's socket (List, GetAllocatableResources, answered from the kubelet's "
        "memory) at every reading: the answer changes with every pod admitted or gone and nothing on disk announces "
        "it (the checkpoints that would are what it is compared with), so no fingerprint can stand in for it; an "
        "answer in the same bytes as the last is not decoded again and keeps the source's generation, and a changed "
        "one decodes only the pods whose messages changed (PodResourcesMemory)",
    ),
    "gpus_sysfs": _on_change("GPUs come and go with hotplug and driver binds"),
    "kernel": _rotating(
        GOVERNORS,
        why="a governor changes only when someone writes it, and the tuning alert waits 15 minutes",
        stretch={GOVERNORS: 4},
    ),
    "numastat": EVERY,
    "intersocket": EVERY,
    "interrupts": Policy(
        every=4,
        why="counters move at every reading, but their checks judge rates (interrupts per second on isolated CPUs, "
        "ticks on nohz_full CPUs) whose alerts wait 30 minutes, and their dashboards take rates over 5 minutes: read "
        "at one reading in several (every), each rate taken between the two last readings "
        "of the file (Interrupts.before); a change of the watched CPUs (topology, kubelet_state) reads it at once; "
        "unchanged rows are found from the previous reading",
    ),
    "irqs": _rotating(
        AFFINITIES,
        REQUESTED_MASKS,
        why="IRQ placement alerts wait 30 minutes, and an IRQ actually firing on an isolated CPU shows in the "
        "/proc/interrupts counters whatever its affinity files say; a new IRQ is read at once",
        # REQUESTED_MASKS' round must be a multiple of AFFINITIES': a requested mask is read in an IRQ's turn.
        stretch={AFFINITIES: 8, REQUESTED_MASKS: 16},
    ),
    "irqbalance": Policy(
        why="the daemon's PID is remembered and verified at every reading, and searched for at once when the "
        "listing of run/irqbalance changes or a daemon found stops; a daemon started without a socket file there "
        "waits for the next search, a second daemon beside a running one for the next search while one runs, and a "
        "process already seen that execs irqbalance (only looked for where the socket table cannot be read) for the "
        "next scan of every process",
        periodic={DAEMON_SEARCH: 20, SEARCH_WHILE_RUNNING: 200, FULL_PROCESS_SCAN: 200},
    ),
    "nvml": EVERY,
    "processes": EVERY,
    "amdsmi": EVERY,
    "hlml": EVERY,
    "cpuidle": _rotating(
        IDLE_STATES,
        why="someone must write a disable file or a PM QoS limit to change them; the idle-state alert waits 30 "
        "minutes",
        stretch={IDLE_STATES: 8},
    ),
    "pci_topology": _on_change("the PCI tree changes with hotplug only"),
    "pod_usage": _rotating(
        POD_USAGE,
        why="a rate per pod over the time since its last reading, for node_workload_not_isolated's message (its alert "
        "waits 30 minutes); a new pod is read at once",
        stretch={POD_USAGE: 4},
    ),
    # Reads no file: the session's last answer, which it keeps current on its own schedule (kubeapi.py).
    "kubernetes_api": Policy(why="the API session's last answer, held in memory: nothing to read"),
    "own_pod": _on_change("a process stays in its pod: read once per reader"),
}


@dataclass(frozen=True)
class Refresh:
    """What the HostReader hands an incremental source's reading (see the module docstring)."""

    share: int = 1  # this reading's K: 1 reads every object of every family
    stagger: int = 1  # the HostReader's K (``share`` is 1 at a whole reading whatever it is)
    turn: int = 0  # which of the K turns this reading is
    round: int = 0  # how many full rotations came before this reading (the reading counter divided by K)
    rotating: frozenset[str] = frozenset()  # the source's families that rotate (its policy's)
    whole: bool = True  # read everything, whatever the memory says (first reading, after an invalidation)
    memory: Any = None  # what the source's previous reading left (``Carried.memory``); None: nothing
    now: float = 0.0  # the HostReader's clock when this reading began (for rates)
    # The HostReader's reading number (from 1), stamped on the objects this reading makes (``generation`` in the
    # model); 0 for a one-off reading, whose objects are never reused.
    generation: int = 0
    stretch: Mapping[str, int] = field(default_factory=dict, hash=False)  # the policy's (``Policy.stretch``)
    fixed: Mapping[str, int] = field(default_factory=dict, hash=False)  # the policy's (``Policy.fixed``)
    periodic: Mapping[str, int] = field(default_factory=dict, hash=False)  # the policy's (``Policy.periodic``)
    readings: int = 0  # the HostReader's readings before this one (``turn`` and ``round`` are taken from it)

    def period(self, name: str, default: int) -> int:
        """Readings between two of the source's periodic looks ``name`` (``Policy.periodic``), ``default`` when its
        policy does not name it (a source read with a policy of its own, as tests do)."""
        return self.periodic.get(name, default)

    def share_of(self, family: str) -> int:
        """The rotation's share for ``family``: 1 (read all of it) unless the policy rotates it and K > 1; K times
        the family's stretch when it has one, its fixed round when it has one."""
        if family in self.rotating and self.share > 1:
            fixed = self.fixed.get(family)
            return fixed if fixed is not None else self.share * self.stretch.get(family, 1)
        return 1

    def rotation(self, family: str) -> tuple[int, int]:
        """(share, turn) of ``family`` at this reading: (1, 0) when it does not rotate (read all of it)."""
        share = self.share_of(family)
        if share <= 1:
            return 1, 0
        if share == self.share:
            return share, self.turn
        return share, self.readings % share

    def round_of(self, family: str) -> int:
        """How many full rotations of ``family`` came before this reading (``round`` for a family stretched)."""
        share = self.share_of(family)
        return self.round if share <= 1 or share == self.share else self.readings // share

    def due(self, family: str, key: int) -> bool:
        """Whether the object of ``family`` whose turn is decided by ``key`` (a number fixed for the object: an IRQ
        number, a CRC of a pod's UID) is read at this reading."""
        share, turn = self.rotation(family)
        return share <= 1 or key % share == turn


def turn_since(share: int, key: int, readings: int, last: int) -> bool:
    """Whether the object whose turn is decided by ``key``, in a family turning over ``share`` readings, had its
    turn since reading ``last``, ``readings`` being this reading's number (``Refresh.readings``): at this reading or
    at one between, for a reader that visits the object at some readings only (a pod carried over between its own
    turns)."""
    if share <= 1:
        return True
    return last < readings - (readings - key % share) % share


FULL = Refresh()  # a one-off reading: everything, no memory


class Carried(NamedTuple):
    """An incremental source's reading: its snapshot and what the next reading is handed back as ``memory``."""

    snapshot: Any
    memory: Any
    # False: the memory says the source's fingerprint cannot be trusted until the next reading (a bundle seen
    # without its config.json yet): the HostReader reads it again next time whatever its fingerprint says.
    settled: bool = True
    # True: ``snapshot`` is the previous reading's, as nothing it was read from changed. The HostReader then keeps
    # the source's generation, so what was derived from it (the workloads join, metric rows) is reused.
    unchanged: bool = False


class Turns:
    """The HostReader's reading counter and pending whole readings: which turn each reading is for each source.

    One counter for every source: a reading is one evaluation, so every source's turn comes every K evaluations.
    A whole reading asked for (``read_everything_next``) is taken by the source's next reading, even when the
    request comes while a reading is under way (SIGHUP and udev events arrive on another thread).
    """

    def __init__(self, stagger: int = 1) -> None:
        if stagger < 1:
            raise ValueError(f"stagger must be at least 1, got {stagger}")
        self.stagger = stagger
        self.readings = 0
        self._asked: set[str] = set()
        self._asked_all = 0  # how many times every source was asked to read everything
        self._served_all: dict[str, int] = {}  # per source, how many of those its readings took

    def read_everything_next(self, name: str | None = None) -> None:
        """Make the next reading of source ``name`` (None: of every source) read everything."""
        if name is None:
            self._asked_all += 1
        else:
            self._asked.add(name)

    def whole_asked(self, name: str) -> bool:
        """Whether source ``name``'s next reading must read everything (a pending ``read_everything_next``)."""
        return name in self._asked or self._served_all.get(name, 0) < self._asked_all

    def served(self, name: str) -> None:
        """Source ``name`` read everything at this reading: a whole reading asked for before it is taken."""
        self._asked.discard(name)
        self._served_all[name] = self._asked_all

    def due(self, policy: Policy) -> bool:
        """Whether a source of ``policy`` reads its files at this reading (``Policy.every``; always with K = 1)."""
        return policy.every <= 1 or self.stagger <= 1 or self.readings % policy.every == 0

    def refresh(self, name: str, policy: Policy, memory: Any, now: float = 0.0) -> Refresh:
        """The Refresh for source ``name``'s reading in the current reading (taking a pending whole reading)."""
        whole = memory is None or self.whole_asked(name)
        self.served(name)
        # A whole reading after an invalidation reads every object; a first reading (no memory) reads every
        # object anyway, in the rotation's current turn.
        share = 1 if whole and memory is not None else self.stagger
        return Refresh(
            share=share,
            stagger=self.stagger,
            turn=self.readings % share,
            round=self.readings // share,
            rotating=policy.rotating,
            stretch=policy.stretch,
            fixed=policy.fixed,
            periodic=policy.periodic,
            readings=self.readings,
            whole=whole,
            memory=memory,
            now=now,
            generation=self.readings + 1,
        )

    def advance(self) -> None:
        """The current reading is over."""
        self.readings += 1


def policy_of(name: str, has_fingerprint: bool, table: Mapping[str, Policy] = POLICIES) -> Policy:
    """The table's policy for source ``name``; a source not in it: on change with a fingerprint, else every time."""
    found = table.get(name)
    if found is not None:
        return found
    return Policy(on_change=True) if has_fingerprint else EVERY


__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_STAGGER",
    "EVERY",
    "FAMILIES",
    "FULL",
    "POLICIES",
    "Carried",
    "Policy",
    "Refresh",
    "Turns",
    "policy_of",
]
