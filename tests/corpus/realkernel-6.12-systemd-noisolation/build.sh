#!/bin/bash
# Build a small REAL /proc + /sys capture from Debian's newest standard kernel (linux-image-6.12-amd64 in bookworm)
# booted under QEMU on an emulated 2-socket / 2-NUMA-node machine with SMT2, WITHOUT any isolation parameter (no
# isolcpus, nohz_full, rcu_nocbs or irqaffinity) and with THP and NUMA balancing left at the kernel's defaults; an
# NVMe disk behind a PCI expander bridge on NUMA node 1; a cgroup v2 tree laid out as the kubelet's "systemd" driver
# and containerd make it (kubepods.slice/..., cri-containerd-<id>.scope), with two Guaranteed pods on exclusive
# whole cores, a Burstable and a BestEffort pod on the shared pool; then one Guaranteed container's cpuset is
# rewritten to all CPUs behind the kubelet's back (kubernetes/kubernetes#120230).
#
# Usage:  bash build.sh [DEST_DIR]        (default: the directory of this script)
# Env:    WORK=${TMPDIR:-/tmp}/rk-612-v2-build  scratch dir (kernel deb, initramfs, logs, the extracted tree)
#         KPKG=<package>                  kernel image package (default: what linux-image-6.12-amd64 depends on)
#         ACCEL=tcg|kvm                   default tcg
#         TCG_THREAD=single|multi         default single (multi-threaded TCG livelocked in realkernel-4node)
#         QEMU_TIMEOUT=1500               seconds before the guest is killed
# Needs root (apt-get). Produces DEST_DIR/root.tar.gz (sorted names, mtime 0, owner 0) and DEST_DIR/console.log.
set -euo pipefail

DEST=${1:-$(cd "$(dirname "$0")" && pwd)}
WORK=${WORK:-${TMPDIR:-/tmp}/rk-612-v2-build}
ACCEL=${ACCEL:-tcg}
TCG_THREAD=${TCG_THREAD:-single}
QEMU_TIMEOUT=${QEMU_TIMEOUT:-1500}
mkdir -p "$WORK" "$DEST"
DEST=$(cd "$DEST" && pwd)
cd "$WORK"

# ---------------------------------------------------------------- packages
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -x /bin/busybox ] || ! command -v cpio >/dev/null \
   || ! command -v xz >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 busybox-static cpio xz-utils >/dev/null
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
KMOD=$KROOT/lib/modules/$KVER/kernel
echo "kernel: $KPKG $(dpkg-deb -f "$WORK/${KPKG}"_*.deb Version 2>/dev/null || true) ($KVER)"

# ---------------------------------------------------------------- topology
# QEMU numbers vCPUs socket-major: cpu = (socket*3 + core)*2 + thread.
#   socket 0 = NUMA node 0: cores {0,1} {2,3} {4,5}     socket 1 = NUMA node 1: cores {6,7} {8,9} {10,11}
# No isolation at all: the kernel's defaults for THP (always) and NUMA balancing (on with more than one node).
KARGS="console=ttyS0 panic=-1"

# ---------------------------------------------------------------- initramfs
# Fixed identifiers (UUIDv4 pod UIDs, 64-hex containerd IDs) so the README can name every cgroup.
G1_UID=517cd77b-2f5a-491c-846b-ec3b1dfb41af   # Guaranteed, 2 CPUs: whole core 2-3 (node 0), correct
G2_UID=a0a1e3bc-58de-402c-a493-34e7b3c51b85   # Guaranteed, 4 CPUs: whole cores 8-11 (node 1), then widened
BU_UID=85ac0426-8062-41b0-bd4f-e8181320358c   # Burstable: shared pool
BE_UID=f22999cf-68fa-450f-bbf0-151c7520d982   # BestEffort: shared pool
G1_SBX=c8ebb5db5ab49b3bb3f6178cc060765492c152f16ada090453ba4134b8b4a8cd
G1_CTR=4ccdd78a0fd8474dba826e727bc7dd4c2a7743f1c30142686dcd3205d3c66897
G2_SBX=9def6295320ab9fe0f175fff4761d8033c6db89f6dcfe3c371849779066d3bd3
G2_CTR=41ae8319ce253ee9f836a708563bf748772f65584ad774b65a16d3bf00773f0a
BU_SBX=098d7dee8a516d58b0b7f8e9fbfdbea7fa31779ca3fc3b638079bb40580729e1
BU_CTR=44b567476c31739d60947627e3ba73540983019ea7db3d81193b0d22c96313b7
BE_SBX=f6e8ae18f36e6beb0fbcc5577b588b7d0675649205245c39eae6f34b2b3afae0
BE_CTR=1104b094426cb5fd37cb0f4b55df2c321e19059be5c805ca1ebdb5d02fd4ab21

rm -rf initramfs && mkdir -p initramfs/{bin,sbin,lib/modules,proc,sys,dev,tmp,out}
cp /bin/busybox initramfs/bin/busybox
# Debian 6.12 ships modules xz-compressed; busybox insmod wants them plain.
for m in nvme-auth nvme-keyring nvme-core nvme; do
  f=$(find "$KMOD" -name "$m.ko*" | head -1)
  [ -n "$f" ] || { echo "warning: module $m not found"; continue; }
  case $f in *.xz) xz -dc "$f" > "initramfs/lib/modules/$m.ko" ;; *) cp "$f" "initramfs/lib/modules/$m.ko" ;; esac
done

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
G1_UID=$G1_UID; G2_UID=$G2_UID; BU_UID=$BU_UID; BE_UID=$BE_UID
G1_SBX=$G1_SBX; G1_CTR=$G1_CTR; G2_SBX=$G2_SBX; G2_CTR=$G2_CTR
BU_SBX=$BU_SBX; BU_CTR=$BU_CTR; BE_SBX=$BE_SBX; BE_CTR=$BE_CTR
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

# ---- NVMe behind the node-1 expander bridge; no IRQ is pinned by hand
for m in nvme-auth nvme-keyring nvme-core nvme; do insmod /lib/modules/$m.ko 2>/dev/null || log "insmod $m failed"; done
i=0; while [ $i -lt 60 ] && [ ! -e /dev/nvme0n1 ]; do sleep 1; i=$((i+1)); done
NVPCI=$(readlink -f /sys/class/nvme/nvme0/device); log "nvme0 pci=${NVPCI##*/} numa_node=$(cat $NVPCI/numa_node) local_cpulist=$(cat $NVPCI/local_cpulist)"
irqs() { for d in /proc/irq/[0-9]*; do n=${d##*/}; nm=$(grep "^ *$n:" /proc/interrupts | awk '{print $NF}'); [ -n "$nm" ] && log "$1 irq $n aff=$(cat $d/smp_affinity_list) eff=$(cat $d/effective_affinity_list 2>/dev/null) mode=$(stat -c %a $d/smp_affinity) name=$nm"; done; }
irqs boot
taskset -c 0 dd if=/dev/nvme0n1 of=/dev/null bs=4k count=256 2>/dev/null || log "nvme read cpu0 failed"
taskset -c 6 dd if=/dev/nvme0n1 of=/dev/null bs=4k count=256 skip=1024 2>/dev/null || log "nvme read cpu6 failed"

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
BU=kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$(u_ $BU_UID).slice
BE=kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod$(u_ $BE_UID).slice
for d in $KP $BUS $BES $CG/$G1 $CG/$G2 $CG/$BU $CG/$BE; do mkdir $d && w $d/cgroup.subtree_control "$CTRL"; done
sc() { echo "$1/cri-containerd-$2.scope"; }
for p in "$G1 $G1_SBX" "$G1 $G1_CTR" "$G2 $G2_SBX" "$G2 $G2_CTR" "$BU $BU_SBX" "$BU $BU_CTR" "$BE $BE_SBX" "$BE $BE_CTR"; do
  mkdir $CG/$(sc $p)
done
# what the kubelet derives from requests (12 CPUs, 4 reserved: 8 allocatable -> 8192 shares -> cpu.weight 313)
w $KP/cpu.weight 313; w $BUS/cpu.weight 20; w $BES/cpu.weight 1
w $CG/$G1/cpu.weight 79;  w $CG/$G1/cpu.max "200000 100000"; w $CG/$G1/memory.max 268435456
w $CG/$G2/cpu.weight 157; w $CG/$G2/cpu.max "400000 100000"; w $CG/$G2/memory.max 268435456
w $CG/$BU/cpu.weight 20;  w $CG/$BU/memory.max 536870912
w $CG/$BE/cpu.weight 1
for s in "$G1 $G1_SBX" "$G2 $G2_SBX" "$BU $BU_SBX" "$BE $BE_SBX"; do w $CG/$(sc $s)/cpu.weight 1; done
# pinned containers have no CFS quota (DisableCPUQuotaWithExclusiveCPUs)
w $CG/$(sc $G1 $G1_CTR)/cpu.weight 79;  w $CG/$(sc $G1 $G1_CTR)/cpu.max "max 100000"; w $CG/$(sc $G1 $G1_CTR)/memory.max 268435456
w $CG/$(sc $G2 $G2_CTR)/cpu.weight 157; w $CG/$(sc $G2 $G2_CTR)/cpu.max "max 100000"; w $CG/$(sc $G2 $G2_CTR)/memory.max 268435456
w $CG/$(sc $BU $BU_CTR)/cpu.weight 20;  w $CG/$(sc $BU $BU_CTR)/memory.max 536870912
w $CG/$(sc $BE $BE_CTR)/cpu.weight 1
# CPU Manager (static): exclusive whole cores for the Guaranteed containers, the shared pool (defaultCpuSet = all
# CPUs minus the exclusive ones) for the others. Memory Manager (Static): the Guaranteed containers' node.
w $CG/$(sc $G1 $G1_CTR)/cpuset.cpus 2-3;  w $CG/$(sc $G1 $G1_CTR)/cpuset.mems 0
w $CG/$(sc $G2 $G2_CTR)/cpuset.cpus 8-11; w $CG/$(sc $G2 $G2_CTR)/cpuset.mems 1
w $CG/$(sc $BU $BU_CTR)/cpuset.cpus 0-1,4-7
w $CG/$(sc $BE $BE_CTR)/cpuset.cpus 0-1,4-7

# sandboxes: a busybox sleep standing in for pause
for s in "$G1 $G1_SBX" "$G2 $G2_SBX" "$BU $BU_SBX" "$BE $BE_SBX"; do joincg $(sc $s) sleep 100000 & done
# G1: allocates 6 MiB (kept in a shell variable), reads 1 MiB from the NVMe disk, spins, then waits on sleep
joincg $(sc $G1 $G1_CTR) sh -c 'x=$(head -c $((6*1048576)) /dev/zero | tr "\000" x)
  dd if=/dev/nvme0n1 of=/dev/null bs=4k count=256 skip=4096 2>/dev/null
  i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 100000; echo ${#x}' &
joincg $(sc $G2 $G2_CTR) sh -c 'x=$(head -c $((2*1048576)) /dev/zero | tr "\000" y); sleep 100000; echo ${#x}' &
joincg $(sc $BU $BU_CTR) sleep 100000 &
joincg $(sc $BE $BE_CTR) sleep 100000 &
i=0; while [ $(pidof sleep | wc -w) -lt 8 ] && [ $i -lt 900 ]; do sleep 1; i=$((i+1)); done
log "workloads settled after $i s (now $(up))"
sleep 2
cgs() { for c in $(cd $CG && find kubepods.slice -type d | sort); do
  log "$1 $c: procs=$(cat $CG/$c/cgroup.procs | tr '\n' ' ')cpus=$(cat $CG/$c/cpuset.cpus) cpus.eff=$(cat $CG/$c/cpuset.cpus.effective) mems=$(cat $CG/$c/cpuset.mems) mems.eff=$(cat $CG/$c/cpuset.mems.effective)"
done; }
pids() { for p in $(cat $(find $KP -name cgroup.procs)); do log "$1 pid $p comm=$(cat /proc/$p/comm) cpu=$(awk '{print $39}' /proc/$p/stat) allowed=$(grep Cpus_allowed_list /proc/$p/status | awk '{print $2}') mems_allowed=$(grep Mems_allowed_list /proc/$p/status | awk '{print $2}') cg=$(cat /proc/$p/cgroup)"; done; }
cgs placed

# ---- G2's container cpuset is rewritten to every CPU behind the kubelet's back (kubernetes/kubernetes#120230: "cpuset
# changed for Guaranteed pod ... to all cpus"; the kubelet never reads cgroups back). An empty cpuset.cpus, which
# would also mean "all of the parent's", is refused by the kernel (ENOSPC) for a cgroup that has tasks.
w $CG/$(sc $G2 $G2_CTR)/cpuset.cpus 0-11
sleep 3
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
truncate -s 64M nvme.img
rm -f capture.b64
ACCEL_ARGS="-accel tcg,thread=$TCG_THREAD -cpu Skylake-Server-noTSX-IBRS"   # Intel model => SMT siblings are exposed
[ "$ACCEL" = kvm ] && ACCEL_ARGS="-enable-kvm -cpu host,-arch-capabilities"
QEMU=(qemu-system-x86_64 -machine pc $ACCEL_ARGS -m 2048 -smp 12,sockets=2,cores=3,threads=2
  -object memory-backend-ram,id=m0,size=1024M -object memory-backend-ram,id=m1,size=1024M
  -numa node,nodeid=0,cpus=0-5,memdev=m0 -numa node,nodeid=1,cpus=6-11,memdev=m1
  -numa dist,src=0,dst=1,val=21
  -device pxb,id=pxb1,bus_nr=32,numa_node=1,bus=pci.0
  -drive file=nvme.img,if=none,id=nvm0,format=raw -device nvme,drive=nvm0,serial=rk612n01,bus=pxb1,addr=0x1
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
