#!/bin/bash
# Build a small REAL /proc + /sys capture from Debian's newest standard kernel (linux-image-6.12-amd64 in bookworm)
# booted under QEMU on an emulated 2-socket / 2-NUMA-node machine with SMT2 and a tuned host: isolcpus + nohz_full
# (rcu_nocbs left to the kernel, which offloads every nohz_full CPU), irqaffinity = housekeeping, THP madvise, NUMA
# balancing off, huge pages reserved per node on the command line (hugepages=0:16,1:16); a cgroup v2 tree laid out
# as the kubelet's "systemd" driver and containerd make it, three Guaranteed pods on exclusive whole cores and a
# Burstable pod on the shared pool. Then a whole core (CPUs 10-11, all of one Guaranteed container's exclusive
# CPUs) is taken offline: cgroup v2 then gives that container its parent's CPUs, i.e. every online CPU.
#
# Usage:  bash build.sh [DEST_DIR]        (default: the directory of this script)
# Env:    WORK=${TMPDIR:-/tmp}/rk-612-iso-build  scratch dir (kernel deb, initramfs, logs, the extracted tree)
#         KPKG=<package>                  kernel image package (default: what linux-image-6.12-amd64 depends on)
#         ACCEL=tcg|kvm                   default tcg
#         TCG_THREAD=single|multi         default single (multi-threaded TCG livelocked in realkernel-4node)
#         QEMU_TIMEOUT=1500               seconds before the guest is killed
#         OFFLINE_CPUS="10 11"            CPUs taken offline after the pods are placed (one after the other)
# Needs root (apt-get). Produces DEST_DIR/root.tar.gz (sorted names, mtime 0, owner 0) and DEST_DIR/console.log.
set -euo pipefail

DEST=${1:-$(cd "$(dirname "$0")" && pwd)}
WORK=${WORK:-${TMPDIR:-/tmp}/rk-612-iso-build}
ACCEL=${ACCEL:-tcg}
TCG_THREAD=${TCG_THREAD:-single}
QEMU_TIMEOUT=${QEMU_TIMEOUT:-1500}
OFFLINE_CPUS=${OFFLINE_CPUS:-10 11}
mkdir -p "$WORK" "$DEST"
DEST=$(cd "$DEST" && pwd)
cd "$WORK"

# ---------------------------------------------------------------- packages
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -x /bin/busybox ] || ! command -v cpio >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 busybox-static cpio >/dev/null
fi

# The kernel image package is only downloaded and unpacked (not installed): the build host's /boot is left alone.
KPKG=${KPKG:-$(apt-cache depends linux-image-6.12-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
[ -n "$KPKG" ] || { echo "cannot resolve linux-image-6.12-amd64 dependency (run apt-get update)"; exit 1; }
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
# Core 0 of each socket is housekeeping (0-1,6-7); the other cores are isolated. No rcu_nocbs=: the kernel offloads
# RCU callbacks of every nohz_full CPU by itself.
ISOL=2-5,8-11
HK=0-1,6-7
KARGS="console=ttyS0 isolcpus=managed_irq,domain,$ISOL nohz_full=$ISOL irqaffinity=$HK transparent_hugepage=madvise numa_balancing=disable hugepagesz=2M hugepages=0:16,1:16 panic=-1"

# ---------------------------------------------------------------- initramfs
# Fixed identifiers (UUIDv4 pod UIDs, 64-hex containerd IDs) so the README can name every cgroup.
G1_UID=35cb9059-8248-4b49-a706-d1bb717b2a96   # Guaranteed, 2 CPUs: whole core 2-3 (node 0)
G2_UID=23a381a4-696b-4439-8934-f72a7cb1dd17   # Guaranteed, 2 CPUs: whole core 8-9 (node 1)
G3_UID=79a14ca1-7c15-4b6c-8e3b-3a5b47dc19c9   # Guaranteed, 2 CPUs: whole core 10-11 (node 1), which goes offline
BU_UID=699f5be9-d9fb-4227-89e0-7f9bf90d6423   # Burstable: shared pool
G1_SBX=fd2e8d04eaecc82b0f706af0164782a768852c71bd4f46b588ec05678f838ab6
G1_CTR=d46e1c06d5a26efd9d297fc58beefe00d42581676cbec692c431b946929ff6bf
G2_SBX=c463834a5884b9c1ed400c1667ad17da64147f98b1f6dae9b3c19a9432d3d1ab
G2_CTR=abd4adf35b5faa2f4e23836d2e81472f0178622beea0688af2b95ac27b04872b
G3_SBX=7124585b5088c85cfd5c8efa971838da63534b121bfb2e8bff9617b84dfa07c3
G3_CTR=07d6eee929d0cc7c748d5ff3ca084f4d4e3c8eb49a230750999c6d19ed72b72b
BU_SBX=324679e9032d3b80cba353b0fe3d07a69c0472b479ea67bec9c9806620618439
BU_CTR=ac106821621e442567f33417dc94e5270ffb62e10cd16f01f01b933d05b426c5

rm -rf initramfs && mkdir -p initramfs/{bin,sbin,proc,sys,dev,tmp,out}
cp /bin/busybox initramfs/bin/busybox

# joincg <cgroup path> <command...>: the process joins the container's scope (as runc does), then exec, so the PID
# stays the container's.
cat > initramfs/bin/joincg <<'EOF'
#!/bin/busybox sh
echo $$ > /sys/fs/cgroup/$1/cgroup.procs; shift
exec "$@"
EOF
chmod +x initramfs/bin/joincg

cat > initramfs/init <<INIT_EOF
#!/bin/busybox sh
G1_UID=$G1_UID; G2_UID=$G2_UID; G3_UID=$G3_UID; BU_UID=$BU_UID
G1_SBX=$G1_SBX; G1_CTR=$G1_CTR; G2_SBX=$G2_SBX; G2_CTR=$G2_CTR; G3_SBX=$G3_SBX; G3_CTR=$G3_CTR
BU_SBX=$BU_SBX; BU_CTR=$BU_CTR
OFFLINE_CPUS="$OFFLINE_CPUS"
INIT_EOF
cat >> initramfs/init <<'INIT_EOF'
export PATH=/bin:/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /out
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup
log() { echo "RK: $*"; }
up() { cut -d' ' -f1 /proc/uptime; }
log "kernel $(uname -r) userspace up at uptime $(up)s"
for n in /sys/devices/system/node/node[0-9]*; do log "${n##*/} cpulist=$(cat $n/cpulist) distance=$(cat $n/distance) mem=$(grep MemTotal $n/meminfo | awk '{print $4 $5}')"; done
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  t=$c/topology; log "${c##*/} pkg=$(cat $t/physical_package_id) core=$(cat $t/core_id) threads=$(cat $t/thread_siblings_list) node=$(ls -d $c/node* | sed 's/.*node//')"
done
log "isolated='$(cat /sys/devices/system/cpu/isolated)' nohz_full='$(cat /sys/devices/system/cpu/nohz_full)' smt/control=$(cat /sys/devices/system/cpu/smt/control)"
log "thp enabled=$(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag=$(cat /sys/kernel/mm/transparent_hugepage/defrag) numa_balancing=$(cat /proc/sys/kernel/numa_balancing) swappiness=$(cat /proc/sys/vm/swappiness)"
log "hugepages 2M per node: $(cat /sys/devices/system/node/node*/hugepages/hugepages-2048kB/nr_hugepages | tr '\n' ' ')"
# ---- sysctls of a tuned node
echo 0 > /proc/sys/vm/swappiness

irqs() { for d in /proc/irq/[0-9]*; do n=${d##*/}; nm=$(grep "^ *$n:" /proc/interrupts | awk '{print $NF}'); [ -n "$nm" ] && log "$1 irq $n aff=$(cat $d/smp_affinity_list) eff=$(cat $d/effective_affinity_list 2>/dev/null) mode=$(stat -c %a $d/smp_affinity) name=$nm"; done; }
irqs boot

# ---- cgroup v2 tree as systemd + the kubelet (systemd driver) + containerd make it
CG=/sys/fs/cgroup
CTRL="+cpuset +cpu +io +memory +hugetlb +pids"
w() { echo "$2" > "$1" || log "write '$2' > $1 failed"; }
mkdir $CG/init.scope $CG/system.slice
w $CG/init.scope/cgroup.procs 1
w $CG/cgroup.subtree_control "$CTRL"
u_() { echo "$1" | tr - _; }
KP=$CG/kubepods.slice; BUS=$KP/kubepods-burstable.slice; BES=$KP/kubepods-besteffort.slice
G1=kubepods.slice/kubepods-pod$(u_ $G1_UID).slice
G2=kubepods.slice/kubepods-pod$(u_ $G2_UID).slice
G3=kubepods.slice/kubepods-pod$(u_ $G3_UID).slice
BU=kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$(u_ $BU_UID).slice
for d in $KP $BUS $BES $CG/$G1 $CG/$G2 $CG/$G3 $CG/$BU; do mkdir $d && w $d/cgroup.subtree_control "$CTRL"; done
sc() { echo "$1/cri-containerd-$2.scope"; }
for p in "$G1 $G1_SBX" "$G1 $G1_CTR" "$G2 $G2_SBX" "$G2 $G2_CTR" "$G3 $G3_SBX" "$G3 $G3_CTR" "$BU $BU_SBX" "$BU $BU_CTR"; do
  mkdir $CG/$(sc $p)
done
# what the kubelet derives from requests (12 CPUs, 4 reserved: 8 allocatable -> 8192 shares -> cpu.weight 313)
w $KP/cpu.weight 313; w $BUS/cpu.weight 20; w $BES/cpu.weight 1
for g in $G1 $G2 $G3; do w $CG/$g/cpu.weight 79; w $CG/$g/cpu.max "200000 100000"; w $CG/$g/memory.max 268435456; done
w $CG/$BU/cpu.weight 20;  w $CG/$BU/memory.max 536870912
for s in "$G1 $G1_SBX" "$G2 $G2_SBX" "$G3 $G3_SBX" "$BU $BU_SBX"; do w $CG/$(sc $s)/cpu.weight 1; done
# pinned containers have no CFS quota (DisableCPUQuotaWithExclusiveCPUs)
for s in "$G1 $G1_CTR" "$G2 $G2_CTR" "$G3 $G3_CTR"; do
  w $CG/$(sc $s)/cpu.weight 79; w $CG/$(sc $s)/cpu.max "max 100000"; w $CG/$(sc $s)/memory.max 268435456
done
w $CG/$(sc $BU $BU_CTR)/cpu.weight 20;  w $CG/$(sc $BU $BU_CTR)/memory.max 536870912
# CPU Manager (static): exclusive whole cores for the Guaranteed containers, the shared pool (defaultCpuSet = all
# CPUs minus the exclusive ones) for the Burstable one. Memory Manager (Static): the Guaranteed containers' node.
w $CG/$(sc $G1 $G1_CTR)/cpuset.cpus 2-3;   w $CG/$(sc $G1 $G1_CTR)/cpuset.mems 0
w $CG/$(sc $G2 $G2_CTR)/cpuset.cpus 8-9;   w $CG/$(sc $G2 $G2_CTR)/cpuset.mems 1
w $CG/$(sc $G3 $G3_CTR)/cpuset.cpus 10-11; w $CG/$(sc $G3 $G3_CTR)/cpuset.mems 1
w $CG/$(sc $BU $BU_CTR)/cpuset.cpus 0-1,4-7

# sandboxes: a busybox sleep standing in for pause
for s in "$G1 $G1_SBX" "$G2 $G2_SBX" "$G3 $G3_SBX" "$BU $BU_SBX"; do joincg $(sc $s) sleep 100000 & done
# G1: allocates 6 MiB (kept in a shell variable), spins, then waits on sleep; G2, G3 keep 2 MiB each
joincg $(sc $G1 $G1_CTR) sh -c 'x=$(head -c $((6*1048576)) /dev/zero | tr "\000" x)
  i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 100000; echo ${#x}' &
joincg $(sc $G2 $G2_CTR) sh -c 'x=$(head -c $((2*1048576)) /dev/zero | tr "\000" y); sleep 100000; echo ${#x}' &
joincg $(sc $G3 $G3_CTR) sh -c 'x=$(head -c $((2*1048576)) /dev/zero | tr "\000" z); sleep 100000; echo ${#x}' &
joincg $(sc $BU $BU_CTR) sleep 100000 &
i=0; while [ $(pidof sleep | wc -w) -lt 8 ] && [ $i -lt 900 ]; do sleep 1; i=$((i+1)); done
log "workloads settled after $i s (now $(up))"
sleep 2
cgs() { for c in $(cd $CG && find kubepods.slice -type d | sort); do
  log "$1 $c: procs=$(cat $CG/$c/cgroup.procs | tr '\n' ' ')cpus=$(cat $CG/$c/cpuset.cpus) cpus.eff=$(cat $CG/$c/cpuset.cpus.effective) mems=$(cat $CG/$c/cpuset.mems) mems.eff=$(cat $CG/$c/cpuset.mems.effective)"
done; }
pids() { for p in $(cat $(find $KP -name cgroup.procs)); do log "$1 pid $p comm=$(cat /proc/$p/comm) cpu=$(awk '{print $39}' /proc/$p/stat) allowed=$(grep Cpus_allowed_list /proc/$p/status | awk '{print $2}') mems_allowed=$(grep Mems_allowed_list /proc/$p/status | awk '{print $2}') cg=$(cat /proc/$p/cgroup)"; done; }
cgs placed; pids placed

# ---- a whole core goes offline (both threads), which is all of G3's exclusive CPUs
for c in $OFFLINE_CPUS; do echo 0 > /sys/devices/system/cpu/cpu$c/online || log "offlining cpu$c failed"; done
log "after offline: online=$(cat /sys/devices/system/cpu/online) offline=$(cat /sys/devices/system/cpu/offline) node cpulists: $(cat /sys/devices/system/node/node*/cpulist | tr '\n' ' ') isolated=$(cat /sys/devices/system/cpu/isolated) nohz_full=$(cat /sys/devices/system/cpu/nohz_full)"
sleep 5
cgs final; pids final
irqs final

INIT_EOF
cat >> initramfs/init <<'INIT_EOF'
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
PIDS="1 $(cat $(find $CG/kubepods.slice -name cgroup.procs))"
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
[ -d /sys/kernel/mm/transparent_hugepage ] && cap $(find /sys/kernel/mm/transparent_hugepage -maxdepth 1 -type f) \
    /sys/kernel/mm/transparent_hugepage/khugepaged/defrag /sys/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan
for h in /sys/kernel/mm/hugepages/hugepages-*; do cap $h/nr_hugepages $h/free_hugepages $h/resv_hugepages $h/surplus_hugepages $h/nr_overcommit_hugepages; done
cap $(find /sys/devices/pci* -type f \( -name numa_node -o -name local_cpulist -o -name local_cpus -o -name vendor -o -name device \
        -o -name class -o -name irq -o -path '*/msi_irqs/*' -o -name subsystem_vendor -o -name subsystem_device \) 2>/dev/null)
caplink /sys/bus/pci/devices/* /sys/bus/event_source/devices/*
for e in /sys/bus/event_source/devices/*; do cap "$(readlink -f "$e")/type"; done
# cgroups: the root and the whole kubepods.slice tree
cap $CG/cgroup.controllers $CG/cgroup.subtree_control $CG/cgroup.procs $CG/cpuset.cpus.effective $CG/cpuset.mems.effective \
    $CG/cpu.stat $CG/memory.numa_stat
for d in $(find $CG/kubepods.slice -type d); do
  cap $d/cgroup.procs $d/cgroup.controllers $d/cgroup.subtree_control $d/cgroup.type $d/cpuset.cpus $d/cpuset.cpus.effective \
      $d/cpuset.cpus.partition $d/cpuset.mems $d/cpuset.mems.effective $d/memory.numa_stat $d/memory.current \
      $d/memory.max $d/cpu.stat $d/cpu.max $d/cpu.weight $d/pids.current
done
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
