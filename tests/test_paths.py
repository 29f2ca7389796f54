"""Paths: where numawatch reads the host from, and symlink resolution confined to the host root."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from numawatch.paths import Paths


def test_from_root_hangs_every_location_off_the_root(tmp_path):
    paths = Paths.from_root(tmp_path)
    assert tmp_path / "proc" == paths.procfs
    assert tmp_path / "sys" == paths.sysfs
    assert tmp_path / "sys/fs/cgroup" == paths.cgroupfs
    assert tmp_path / "var/lib/kubelet" == paths.kubelet
    assert tmp_path / "etc/rancher/rke2" == paths.rke2
    assert tmp_path / "var/lib/rancher/rke2" == paths.rke2_data
    assert tmp_path / "run" == paths.run
    assert tmp_path / "var/log/pods" == paths.pod_logs
    assert tmp_path / "etc" == paths.etc


def test_overrides_move_procfs_and_sysfs_and_cgroups_follow_sysfs(tmp_path):
    paths = Paths.from_root(tmp_path, procfs="/elsewhere/proc", sysfs="/elsewhere/sys")
    assert Path("/elsewhere/proc") == paths.procfs
    assert Path("/elsewhere/sys/fs/cgroup") == paths.cgroupfs
    assert tmp_path / "var/lib/kubelet" == paths.kubelet


def test_host_path_maps_absolute_host_paths_under_the_root(tmp_path):
    paths = Paths.from_root(tmp_path)
    assert tmp_path / "var/lib/kubelet/cpu_manager_state" == paths.host_path("/var/lib/kubelet/cpu_manager_state")
    assert tmp_path / "etc/x" == paths.host_path("etc/x")


def test_host_path_folds_dotdot_at_the_root(tmp_path):
    """A path from file content (a kubelet config=) cannot climb out of the root: ``..`` stops there."""
    paths = Paths.from_root(tmp_path)
    assert tmp_path / "tmp/elsewhere/kc.yaml" == paths.host_path("/../../../../tmp/elsewhere/kc.yaml")
    assert tmp_path / "etc/kc.yaml" == paths.host_path("/var/lib/../../etc/./kc.yaml")
    assert tmp_path == paths.host_path("/..")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "host"
    (root / "sys/devices/pci0000:17/0000:18:00.0").mkdir(parents=True)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / "etc").mkdir()
    return root


def test_resolve_follows_relative_sysfs_links(tree):
    os.symlink("../../../devices/pci0000:17/0000:18:00.0", tree / "sys/bus/pci/devices/0000:18:00.0")
    paths = Paths.from_root(tree)
    assert tree / "sys/devices/pci0000:17/0000:18:00.0" == paths.resolve(tree / "sys/bus/pci/devices/0000:18:00.0")


def test_resolve_keeps_absolute_links_inside_the_root(tree):
    os.symlink("/sys/devices/pci0000:17/0000:18:00.0", tree / "sys/bus/pci/devices/0000:18:00.0")
    paths = Paths.from_root(tree)
    assert tree / "sys/devices/pci0000:17/0000:18:00.0" == paths.resolve(tree / "sys/bus/pci/devices/0000:18:00.0")


def test_resolve_maps_an_absolute_link_to_etc_into_the_roots_etc(tree):
    os.symlink("/etc/passwd", tree / "sys/bus/pci/devices/evil")
    paths = Paths.from_root(tree)
    assert tree / "etc/passwd" == paths.resolve(tree / "sys/bus/pci/devices/evil")


def test_resolve_stops_dotdot_in_a_link_at_the_root(tree):
    os.symlink("../../../../../../../../../../etc", tree / "sys/bus/pci/devices/up")
    paths = Paths.from_root(tree)
    assert tree / "etc" == paths.resolve(tree / "sys/bus/pci/devices/up")


def test_resolve_stops_dotdot_in_the_given_path_at_the_root(tree):
    """``<root>/../../etc`` is ``<root>/etc`` as in a chroot, not this machine's /etc."""
    paths = Paths.from_root(tree)
    assert tree / "etc" == paths.resolve(tree / ".." / ".." / ".." / "etc")


def test_resolve_applies_dotdot_after_following_a_link(tree):
    os.symlink("../../../devices/pci0000:17/0000:18:00.0", tree / "sys/bus/pci/devices/0000:18:00.0")
    paths = Paths.from_root(tree)
    assert tree / "sys/devices/pci0000:17" == paths.resolve(tree / "sys/bus/pci/devices/0000:18:00.0/..")


def test_resolve_follows_chains_of_links(tree):
    os.symlink("b", tree / "etc/a")
    os.symlink("/sys/devices", tree / "etc/b")
    paths = Paths.from_root(tree)
    assert tree / "sys/devices/pci0000:17" == paths.resolve(tree / "etc/a/pci0000:17")


def test_resolve_reports_a_link_loop_instead_of_hanging(tree):
    os.symlink("loop-b", tree / "etc/loop-a")
    os.symlink("loop-a", tree / "etc/loop-b")
    paths = Paths.from_root(tree)
    with pytest.raises(OSError) as raised:
        paths.resolve(tree / "etc/loop-a")
    assert raised.value.errno == errno.ELOOP


def test_resolve_reports_a_self_referencing_absolute_link(tree):
    os.symlink("/etc/self", tree / "etc/self")
    paths = Paths.from_root(tree)
    with pytest.raises(OSError):
        paths.resolve(tree / "etc/self/x")


def test_resolve_leaves_missing_paths_as_they_are(tree):
    paths = Paths.from_root(tree)
    assert tree / "sys/nothing/here" == paths.resolve(tree / "sys/nothing/here")


def test_resolve_confines_links_when_the_root_itself_is_reached_through_a_symlink(tree, tmp_path):
    """The result is spelled under the root as the caller spells it (through the link), and is the root's file."""
    os.symlink(tree, tmp_path / "root-link")
    os.symlink("/etc/passwd", tree / "sys/bus/pci/devices/evil")
    paths = Paths.from_root(tmp_path / "root-link")
    resolved = paths.resolve(tmp_path / "root-link/sys/bus/pci/devices/evil")
    assert tmp_path / "root-link/etc/passwd" == resolved
    (tree / "etc/passwd").write_text("the root's own\n")
    assert os.path.samefile(resolved, tree / "etc/passwd")


def test_resolve_accepts_paths_relative_to_the_working_directory(tree, monkeypatch):
    os.symlink("/sys/devices", tree / "etc/devices")
    monkeypatch.chdir(tree)
    paths = Paths.from_root(tree)
    assert tree / "sys/devices" == paths.resolve(Path("etc/devices"))


def test_resolve_of_an_override_outside_the_root_is_plain_resolution(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, tmp_path / "outside-link")
    paths = Paths.from_root(tree)
    assert outside == paths.resolve(tmp_path / "outside-link")


@pytest.mark.realhost
def test_resolve_on_the_real_root_matches_the_kernels_resolution():
    paths = Paths.from_root("/")
    devices = Path("/sys/bus/pci/devices")
    if not devices.is_dir() or not os.listdir(devices):
        pytest.skip("this machine has no PCI devices in sysfs")
    for name in sorted(os.listdir(devices))[:20]:
        assert Path(os.path.realpath(devices / name)) == paths.resolve(devices / name)


@pytest.mark.parametrize("base", ["/", "/host", "/host/", ".", "relative/dir", "//double", Path("/"), Path("/host")])
@pytest.mark.parametrize("relative", ["etc", "var/lib/containers/storage/overlay-containers"])
def test_joined_spells_what_pathlib_joins(base, relative):
    """The sources join paths with ``joined`` at every reading instead of building Paths; it must spell what
    ``Path(base) / relative`` spells, the root ``/`` and ``.`` included."""
    from numawatch.paths import joined

    assert joined(base, relative) == str(Path(base) / relative)
