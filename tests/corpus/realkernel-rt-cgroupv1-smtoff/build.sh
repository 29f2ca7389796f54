#!/bin/bash
# Build a small REAL /proc + /sys capture from Debian's PREEMPT_RT kernel (linux-image-rt-amd64) booted under QEMU
# on an emulated 2-socket / 2-NUMA-node machine with SMT2, consistent CPU isolation (isolcpus = nohz_full =
# rcu_nocbs, irqaffinity = housekeeping), cgroup v1 hierarchies laid out as the kubelet's "cgroupfs" driver and
# containerd make them, Guaranteed pods on whole isolated cores, a Burstable and a BestEffort pod on the shared pool;
# then, after the pods are placed, SMT switched off and one more CPU taken offline, so the kernel shrinks every
# cpuset. Captured after that.
#
# Usage:  bash build.sh [DEST_DIR]        (default: the directory of this script)
# Env:    WORK=${TMPDIR:-/tmp}/rk-rt-v1-build  scratch dir (kernel deb, initramfs, logs, the extracted tree)
#         KPKG=<package>                  kernel image package (default: what linux-image-rt-amd64 depends on)
#         ACCEL=tcg|kvm                   default tcg
#         TCG_THREAD=single|multi         default single (multi-threaded TCG livelocked in realkernel-4node)
#         QEMU_TIMEOUT=1500               seconds before the guest is killed
#         SMT_OFF=control|threads         control (default): echo off > /sys/devices/system/cpu/smt/control;
#                                         threads: offline every secondary thread one by one instead
#         OFFLINE_CPU=10                  the CPU taken offline after SMT is off
# Needs root (apt-get). Produces DEST_DIR/root.tar.gz (sorted names, mtime 0, owner 0) and DEST_DIR/console.log.
set -euo pipefail

DEST=${1:-$(cd "$(dirname "$0")" && pwd)}
WORK=${WORK:-${TMPDIR:-/tmp}/rk-rt-v1-build}
ACCEL=${ACCEL:-tcg}
TCG_THREAD=${TCG_THREAD:-single}
QEMU_TIMEOUT=${QEMU_TIMEOUT:-1500}
SMT_OFF=${SMT_OFF:-control}
OFFLINE_CPU=${OFFLINE_CPU:-10}
mkdir -p "$WORK" "$DEST"
DEST=$(cd "$DEST" && pwd)
cd "$WORK"

# ---------------------------------------------------------------- packages
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -x /bin/busybox ] || ! command -v cpio >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 busybox-static cpio >/dev/null
fi

# The kernel image package is only downloaded and unpacked (not installed): the build host's /boot is left alone.
KPKG=${KPKG:-$(apt-cache depends linux-image-rt-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
[ -n "$KPKG" ] || { echo "cannot resolve linux-image-rt-amd64 dependency (run apt-get update)"; exit 1; }
if [ ! -d "kernel/$KPKG" ]; then
  rm -f "${KPKG}"_*.deb
  apt-get download "$KPKG"
  mkdir -p "kernel/$KPKG"
  dpkg-deb -x "${KPKG}"_*.deb "kernel/$KPKG"
fi
KROOT=$WORK/kernel/$KPKG
VMLINUZ=$(ls "$KROOT"/boot/vmlinuz-*)
KVER=${VMLINUZ##*/vmlinuz-}
echo "kernel: $KPKG $(dpkg-deb -f "$WORK/${KPKG}"_*.deb Version 2>/dev/null || true) ($KVER)"

# ---------------------------------------------------------------- topology
# QEMU numbers vCPUs socket-major: cpu = (socket*3 + core)*2 + thread.
#   socket 0 = NUMA node 0: cores {0,1} {2,3} {4,5}     socket 1 = NUMA node 1: cores {6,7} {8,9} {10,11}
# Core 0 of each socket is housekeeping (0-1,6-7); the other two cores of each socket are isolated.
ISOL=2-5,8-11
HK=0-1,6-7
KARGS="console=ttyS0 isolcpus=domain,managed_irq,$ISOL nohz_full=$ISOL rcu_nocbs=$ISOL irqaffinity=$HK panic=-1"

# ---------------------------------------------------------------- initramfs
# Fixed identifiers (UUIDv4 pod UIDs, 64-hex containerd IDs) so the README can name every cgroup.
G1_UID=7cbad7f2-498d-4efe-b2cb-4f06e7aef8d8   # Guaranteed, 2 CPUs: whole core 2-3 (node 0)
G2_UID=939877ba-5402-4c56-837e-9a8078ab1d08   # Guaranteed, 4 CPUs: whole cores 8-9 + 10-11 (node 1)
BU_UID=8e572f69-a1ea-4e02-9953-8e989b75d1c0   # Burstable: shared pool
BE_UID=f75d7464-e50e-4b9f-a089-650e7f12275e   # BestEffort: shared pool
G1_SBX=0e4f1c596b3afb7145ee2df0eb3a315520227281c86bcd2a26c9f507dda5b2de
G1_CTR=f2f93f61b4fb34018a0611fe2ccf40f3336ba4c90c0d56f4d41b27a4f48ae88a
G2_SBX=74229cf62efa2d95ffa595a92c2ff6740e3aa980388607aff97c1823bf14c47c
G2_CTR=31e11c2bd4069d5785c1df3c7b9cf5135fd224e2e67c21669cf9a0113bcdfd18
BU_SBX=9cff39f723a58604c11f17764a75f83c3e9c59579c2eb2189d527100f2f2b7ed
BU_CTR=c5e6ed7651a8a2fc8c3d4efbe31c796ebbb7f3e6fc14369a3a4b81b929fba728
BE_SBX=bbc7890b4733a42ded7b97083b334387b1a934bc330575a2f1586a5bd054f0be
BE_CTR=a1665f311566648aaa407bc3ecbccd360fe9422a2b0c352bdc6b6de083d052ee

rm -rf initramfs && mkdir -p initramfs/{bin,sbin,proc,sys,dev,tmp,out}
cp /bin/busybox initramfs/bin/busybox

# joincg <cgroup path relative to each hierarchy> <command...>: what runc does for a container with the cgroupfs
# driver (its PID into the same path of every v1 hierarchy), then exec, so the PID stays the container's.
cat > initramfs/bin/joincg <<'EOF'
#!/bin/busybox sh
cg=$1; shift
for h in $HIER; do echo $$ > /sys/fs/cgroup/$h/$cg/cgroup.procs; done
exec "$@"
EOF
chmod +x initramfs/bin/joincg

cat > initramfs/init <<INIT_EOF
#!/bin/busybox sh
G1_UID=$G1_UID; G2_UID=$G2_UID; BU_UID=$BU_UID; BE_UID=$BE_UID
G1_SBX=$G1_SBX; G1_CTR=$G1_CTR; G2_SBX=$G2_SBX; G2_CTR=$G2_CTR
BU_SBX=$BU_SBX; BU_CTR=$BU_CTR; BE_SBX=$BE_SBX; BE_CTR=$BE_CTR
SMT_OFF=$SMT_OFF; OFFLINE_CPU=$OFFLINE_CPU
INIT_EOF
cat >> initramfs/init <<'INIT_EOF'
export PATH=/bin:/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /out
log() { echo "RK: $*"; }
up() { cut -d' ' -f1 /proc/uptime; }
log "kernel $(uname -r) userspace up at uptime $(up)s"
for n in /sys/devices/system/node/node[0-9]*; do log "${n##*/} cpulist=$(cat $n/cpulist) distance=$(cat $n/distance) mem=$(grep MemTotal $n/meminfo | awk '{print $4 $5}')"; done
topo() { for c in /sys/devices/system/cpu/cpu[0-9]*; do
  t=$c/topology; [ -d $t ] || { log "$1 ${c##*/} online=$(cat $c/online 2>/dev/null) (no topology/)"; continue; }
  log "$1 ${c##*/} pkg=$(cat $t/physical_package_id) core=$(cat $t/core_id) threads=$(cat $t/thread_siblings_list) node=$(ls -d $c/node* | sed 's/.*node//')"
done; }
topo boot
log "isolated=$(cat /sys/devices/system/cpu/isolated) nohz_full=$(cat /sys/devices/system/cpu/nohz_full) smt/control=$(cat /sys/devices/system/cpu/smt/control) smt/active=$(cat /sys/devices/system/cpu/smt/active)"
log "thp: $(ls /sys/kernel/mm/transparent_hugepage 2>&1 | head -1); numa_balancing: $(cat /proc/sys/kernel/numa_balancing 2>&1)"
irqs() { for d in /proc/irq/[0-9]*; do n=${d##*/}; nm=$(grep "^ *$n:" /proc/interrupts | awk '{print $NF}'); [ -n "$nm" ] && log "$1 irq $n aff=$(cat $d/smp_affinity_list) eff=$(cat $d/effective_affinity_list 2>/dev/null) name=$nm"; done; }
irqs boot

# ---- sysctls of a tuned node
echo 0 > /proc/sys/vm/swappiness

# ---- cgroup v1 hierarchies as systemd mounts them on a Debian host in hybrid mode
CG=/sys/fs/cgroup
mount -t tmpfs -o mode=755 tmpfs $CG
for h in cpuset cpu,cpuacct memory pids hugetlb blkio devices freezer net_cls,net_prio perf_event; do
  mkdir $CG/$h && mount -t cgroup -o $h cgroup $CG/$h || log "mount cgroup $h failed"
done
ln -s cpu,cpuacct $CG/cpu; ln -s cpu,cpuacct $CG/cpuacct; ln -s net_cls,net_prio $CG/net_cls; ln -s net_cls,net_prio $CG/net_prio
mkdir $CG/systemd && mount -t cgroup -o none,name=systemd cgroup $CG/systemd
mkdir $CG/unified && mount -t cgroup2 cgroup2 $CG/unified
export HIER="cpuset cpu,cpuacct memory pids hugetlb blkio devices freezer net_cls,net_prio perf_event systemd"
w() { echo "$2" > "$1" || log "write '$2' > $1 failed"; }

# mkcg <path>: the kubelet's / runc's cgroupfs manager creates the path in every hierarchy; a new v1 cpuset starts
# empty, so (like libcontainer) it copies cpus and mems from the parent before any task can join.
mkcg() { for h in $HIER; do mkdir -p $CG/$h/$1; done
  parent=$CG/cpuset/$(dirname $1)
  w $CG/cpuset/$1/cpuset.cpus "$(cat $parent/cpuset.cpus)"; w $CG/cpuset/$1/cpuset.mems "$(cat $parent/cpuset.mems)"; }
G1=kubepods/pod$G1_UID; G2=kubepods/pod$G2_UID; BU=kubepods/burstable/pod$BU_UID; BE=kubepods/besteffort/pod$BE_UID
for d in kubepods kubepods/burstable kubepods/besteffort $G1 $G2 $BU $BE \
         $G1/$G1_SBX $G1/$G1_CTR $G2/$G2_SBX $G2/$G2_CTR $BU/$BU_SBX $BU/$BU_CTR $BE/$BE_SBX $BE/$BE_CTR; do mkcg $d; done
# what the kubelet derives from requests (12 CPUs, 4 reserved: 8 allocatable -> 8192 shares)
w $CG/cpu/kubepods/cpu.shares 8192; w $CG/cpu/kubepods/burstable/cpu.shares 512; w $CG/cpu/kubepods/besteffort/cpu.shares 2
w $CG/cpu/$G1/cpu.shares 2048; w $CG/cpu/$G1/cpu.cfs_quota_us 200000; w $CG/memory/$G1/memory.limit_in_bytes 268435456
w $CG/cpu/$G2/cpu.shares 4096; w $CG/cpu/$G2/cpu.cfs_quota_us 400000; w $CG/memory/$G2/memory.limit_in_bytes 268435456
w $CG/cpu/$BU/cpu.shares 512; w $CG/memory/$BU/memory.limit_in_bytes 536870912
w $CG/cpu/$BE/cpu.shares 2
for s in $G1/$G1_SBX $G2/$G2_SBX $BU/$BU_SBX $BE/$BE_SBX; do w $CG/cpu/$s/cpu.shares 2; done
w $CG/cpu/$G1/$G1_CTR/cpu.shares 2048; w $CG/memory/$G1/$G1_CTR/memory.limit_in_bytes 268435456
w $CG/cpu/$G2/$G2_CTR/cpu.shares 4096; w $CG/memory/$G2/$G2_CTR/memory.limit_in_bytes 268435456
w $CG/cpu/$BU/$BU_CTR/cpu.shares 512;  w $CG/memory/$BU/$BU_CTR/memory.limit_in_bytes 536870912
w $CG/cpu/$BE/$BE_CTR/cpu.shares 2
# CPU Manager (static): exclusive whole cores for the Guaranteed containers, the shared pool (defaultCpuSet =
# all CPUs minus the exclusive ones) for the others. Memory Manager (Static): the Guaranteed containers' node.
w $CG/cpuset/$G1/$G1_CTR/cpuset.cpus 2-3;      w $CG/cpuset/$G1/$G1_CTR/cpuset.mems 0
w $CG/cpuset/$G2/$G2_CTR/cpuset.cpus 8-11;     w $CG/cpuset/$G2/$G2_CTR/cpuset.mems 1
w $CG/cpuset/$BU/$BU_CTR/cpuset.cpus 0-1,4-7
w $CG/cpuset/$BE/$BE_CTR/cpuset.cpus 0-1,4-7

# sandboxes: a busybox sleep standing in for pause
for s in $G1/$G1_SBX $G2/$G2_SBX $BU/$BU_SBX $BE/$BE_SBX; do joincg $s sleep 100000 & done
# G1: allocates 6 MiB (kept in a shell variable), spins a little, then waits on sleep
joincg $G1/$G1_CTR sh -c 'x=$(head -c $((6*1048576)) /dev/zero | tr "\000" x)
  i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 100000; echo ${#x}' &
joincg $G2/$G2_CTR sh -c 'x=$(head -c $((2*1048576)) /dev/zero | tr "\000" y); sleep 100000; echo ${#x}' &
joincg $BU/$BU_CTR sleep 100000 &
joincg $BE/$BE_CTR sleep 100000 &
i=0; while [ $(pidof sleep | wc -w) -lt 8 ] && [ $i -lt 900 ]; do sleep 1; i=$((i+1)); done
log "workloads settled after $i s (now $(up))"
sleep 2
cgs() { for c in $(cd $CG/cpuset && find kubepods -type d | sort); do
  log "$1 cpuset/$c: procs=$(cat $CG/cpuset/$c/cgroup.procs | tr '\n' ' ')cpus=$(cat $CG/cpuset/$c/cpuset.cpus) effective_cpus=$(cat $CG/cpuset/$c/cpuset.effective_cpus) mems=$(cat $CG/cpuset/$c/cpuset.mems)"
done; }
pids() { for p in $(cat $(find $CG/cpuset/kubepods -name cgroup.procs)); do log "$1 pid $p comm=$(cat /proc/$p/comm) cpu=$(awk '{print $39}' /proc/$p/stat) allowed=$(grep Cpus_allowed_list /proc/$p/status | awk '{print $2}') mems_allowed=$(grep Mems_allowed_list /proc/$p/status | awk '{print $2}')"; done; }
cgs before; pids before

# ---- SMT off, then one more CPU offline
log "before smt off: online=$(cat /sys/devices/system/cpu/online) smt/control=$(cat /sys/devices/system/cpu/smt/control) node cpulists: $(cat /sys/devices/system/node/node*/cpulist | tr '\n' ' ')"
if [ "$SMT_OFF" = control ]; then
  echo off > /sys/devices/system/cpu/smt/control || log "echo off > smt/control failed"
else
  for c in /sys/devices/system/cpu/cpu[0-9]*; do
    t=$c/topology/thread_siblings_list; [ -f $t ] || continue
    first=$(cut -d, -f1 $t | cut -d- -f1); n=${c##*/cpu}
    [ "$n" != "$first" ] && { echo 0 > $c/online || log "offlining cpu$n failed"; log "offlined secondary thread cpu$n"; }
  done
fi
log "after smt off: online=$(cat /sys/devices/system/cpu/online) offline=$(cat /sys/devices/system/cpu/offline) smt/control=$(cat /sys/devices/system/cpu/smt/control) smt/active=$(cat /sys/devices/system/cpu/smt/active)"
cgs smt-off
echo 0 > /sys/devices/system/cpu/cpu$OFFLINE_CPU/online || log "offlining cpu$OFFLINE_CPU failed"
log "after cpu$OFFLINE_CPU offline: online=$(cat /sys/devices/system/cpu/online) offline=$(cat /sys/devices/system/cpu/offline) node cpulists: $(cat /sys/devices/system/node/node*/cpulist | tr '\n' ' ')"
sleep 5
topo final
cgs final; pids final
irqs final

# ---- capture: every file by cat SRC > DEST with the kernel's mode kept; symlinks re-created with their target
R=/out/root
cap() { for f in "$@"; do
  [ -f "$f" ] || continue
  mkdir -p "$R${f%/*}"
  if cat "$f" > "$R$f" 2>/dev/null; then chmod "$(stat -c %a "$f")" "$R$f"; else rm -f "$R$f"; echo "$f" >> /out/failed.txt; fi
done; }
caplink() { for l in "$@"; do [ -L "$l" ] || continue; mkdir -p "$R${l%/*}"; ln -s "$(readlink "$l")" "$R$l"; done; }
cap /proc/cmdline /proc/interrupts /proc/softirqs /proc/stat /proc/vmstat /proc/meminfo /proc/version \
    /proc/cpuinfo /proc/buddyinfo /proc/cgroups /proc/irq/default_smp_affinity /proc/1/mountinfo
for s in kernel/numa_balancing kernel/sched_autogroup_enabled kernel/watchdog kernel/watchdog_cpumask \
         kernel/nmi_watchdog kernel/timer_migration kernel/sched_rt_runtime_us kernel/sched_rt_period_us \
         kernel/perf_event_paranoid vm/swappiness vm/nr_hugepages vm/nr_overcommit_hugepages \
         vm/zone_reclaim_mode vm/stat_interval vm/min_free_kbytes vm/overcommit_memory; do cap /proc/sys/$s; done
for d in /proc/irq/[0-9]*; do cap $d/smp_affinity $d/smp_affinity_list $d/effective_affinity $d/effective_affinity_list $d/node $d/affinity_hint; done
PIDS="1 $(cat $(find $CG/cpuset/kubepods -name cgroup.procs))"
for p in $PIDS; do for f in status cgroup stat schedstat sched comm cmdline cpuset; do cap /proc/$p/$f; done; done
S=/sys/devices/system/cpu
cap $S/online $S/possible $S/present $S/offline $S/isolated $S/nohz_full $S/kernel_max $S/modalias $S/smt/active $S/smt/control
for c in $S/cpu[0-9]*; do
  cap $c/online $(find $c/topology -type f 2>/dev/null)
  for i in $c/cache/index*; do cap $i/level $i/type $i/size $i/shared_cpu_list $i/shared_cpu_map $i/coherency_line_size \
                                  $i/ways_of_associativity $i/number_of_sets $i/physical_line_partition $i/id; done
done
N=/sys/devices/system/node
cap $N/online $N/possible $N/has_cpu $N/has_memory $N/has_normal_memory
for n in $N/node[0-9]*; do
  cap $n/cpulist $n/cpumap $n/numastat $n/meminfo $n/distance $n/vmstat
  for h in $n/hugepages/hugepages-*; do cap $h/nr_hugepages $h/free_hugepages $h/surplus_hugepages; done
done
[ -d /sys/kernel/mm/transparent_hugepage ] && cap $(find /sys/kernel/mm/transparent_hugepage -type f)
for h in /sys/kernel/mm/hugepages/hugepages-*; do cap $h/nr_hugepages $h/free_hugepages $h/resv_hugepages $h/surplus_hugepages $h/nr_overcommit_hugepages; done
cap $(find /sys/devices/pci* -type f \( -name numa_node -o -name local_cpulist -o -name local_cpus -o -name vendor -o -name device \
        -o -name class -o -name irq -o -path '*/msi_irqs/*' -o -name subsystem_vendor -o -name subsystem_device \) 2>/dev/null)
caplink /sys/bus/pci/devices/* /sys/bus/event_source/devices/*
for e in /sys/bus/event_source/devices/*; do cap "$(readlink -f "$e")/type"; done
# cgroups: each hierarchy's root and the kubepods tree in cpuset, memory, cpu,cpuacct and pids
caplink $CG/cpu $CG/cpuacct
cap $CG/unified/cgroup.controllers $CG/unified/cgroup.subtree_control
for d in $CG/cpuset $(find $CG/cpuset/kubepods -type d); do
  cap $d/cgroup.procs $d/cpuset.cpus $d/cpuset.effective_cpus $d/cpuset.mems $d/cpuset.effective_mems \
      $d/cpuset.cpu_exclusive $d/cpuset.sched_load_balance $d/cgroup.clone_children
done
for d in $CG/memory $(find $CG/memory/kubepods -type d); do
  cap $d/cgroup.procs $d/memory.numa_stat $d/memory.usage_in_bytes $d/memory.limit_in_bytes; done
for d in $CG/cpu,cpuacct $(find $CG/cpu,cpuacct/kubepods -type d); do
  cap $d/cgroup.procs $d/cpu.shares $d/cpu.cfs_quota_us $d/cpu.cfs_period_us $d/cpuacct.usage; done
for d in $CG/pids $(find $CG/pids/kubepods -type d); do cap $d/cgroup.procs $d/pids.current $d/pids.max; done
log "captured $(find $R -type f | wc -l) files, $(find $R -type l | wc -l) links, $(du -sk $R | awk '{print $1}') KiB; failed reads: $(cat /out/failed.txt 2>/dev/null | wc -l)"
[ -f /out/failed.txt ] && sed 's/^/RK: read failed: /' /out/failed.txt
cd /out && tar czf /out/cap.tar.gz root
stty -F /dev/ttyS1 raw -echo 2>/dev/null
{ echo "==RK-BEGIN=="; base64 /out/cap.tar.gz; echo "==RK-END=="; } > /dev/ttyS1
log "sent $(wc -c < /out/cap.tar.gz) bytes at uptime $(up)s; powering off"
sync
poweroff -f
INIT_EOF
chmod +x initramfs/init
(cd initramfs && find . | cpio -o -H newc --quiet | gzip -9) > initrd.gz

# ---------------------------------------------------------------- boot
rm -f capture.b64
ACCEL_ARGS="-accel tcg,thread=$TCG_THREAD -cpu Skylake-Server-noTSX-IBRS"   # Intel model => SMT siblings are exposed
[ "$ACCEL" = kvm ] && ACCEL_ARGS="-enable-kvm -cpu host,-arch-capabilities"
QEMU=(qemu-system-x86_64 -machine pc $ACCEL_ARGS -m 2048 -smp 12,sockets=2,cores=3,threads=2
  -object memory-backend-ram,id=m0,size=1024M -object memory-backend-ram,id=m1,size=1024M
  -numa node,nodeid=0,cpus=0-5,memdev=m0 -numa node,nodeid=1,cpus=6-11,memdev=m1
  -numa dist,src=0,dst=1,val=21
  -nic none -display none -monitor none -serial stdio -serial file:capture.b64
  -kernel "$VMLINUZ" -initrd initrd.gz -no-reboot -append "$KARGS")
printf '%q ' "${QEMU[@]}" > qemu-cmdline.txt; echo >> qemu-cmdline.txt
echo "booting (timeout ${QEMU_TIMEOUT}s)..."
START=$(date +%s)
timeout "$QEMU_TIMEOUT" "${QEMU[@]}" < /dev/null > console.raw 2> qemu-stderr.log || echo "qemu exit status $?"
echo "qemu ran $(( $(date +%s) - START ))s" | tee qemu-time.txt

# ---------------------------------------------------------------- extract, repack deterministically
grep -q '^==RK-END==' capture.b64 || { echo "no capture found; see $WORK/console.raw"; exit 1; }
sed -n '/^==RK-BEGIN==/,/^==RK-END==/p' capture.b64 | sed '1d;$d' | tr -d '\r' | base64 -d > cap.tar.gz
rm -rf extract && mkdir extract
tar xzf cap.tar.gz -C extract --no-same-owner
tar -C extract --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - root | gzip -n -9 > "$DEST/root.tar.gz"
# console log (strip terminal control sequences from SeaBIOS)
sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' console.raw | tr -d '\r' > "$DEST/console.log"
echo "done: $(find extract/root -type f | wc -l) files, $(find extract/root -type l | wc -l) links; $(wc -c < "$DEST/root.tar.gz") bytes in $DEST/root.tar.gz"
