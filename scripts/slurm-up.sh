#!/usr/bin/env bash
# slurm-up.sh - start a single-node SLURM (Debian 12, slurm-wlm 22.05) on this machine for tests:
# munged, slurmctld (controller) and slurmd (the one compute node), started directly (no systemd).
# Needs root and the packages munge slurmctld slurmd slurm-client (scripts/deps.sh installs them);
# it installs nothing. Exits 77 when they are absent, so a test can skip.
#   BS_SLURM_MEM_MB=N   memory the node advertises, MiB (default: slurmd -C's value minus 1024)
# Memory limits: with a writable cgroup-v1 memory controller, task/cgroup enforces --mem (a job over it
# ends OUT_OF_MEMORY, as on real clusters); otherwise JobAcctGatherParams=OverMemoryKill polls RSS every
# second. Writes the pids of the daemons it started to /run/boundsort-slurm.pids; slurm-down.sh stops
# exactly those (by pid, checking each process's name first) and nothing else.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root" >&2; exit 77; }
for c in munged slurmctld slurmd sbatch sinfo; do
  command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || { echo "slurm-up: $c is not installed" >&2; exit 77; }
done
PIDS=/run/boundsort-slurm.pids
# alive PIDFILE NAME: the pid file names a running process called NAME (pids are reused)
alive() { [ -s "$1" ] && [ "$(ps -o comm= -p "$(cat "$1")" 2>/dev/null)" = "$2" ]; }
if alive /run/slurmctld.pid slurmctld || alive /run/slurmd.pid slurmd; then
  echo "slurm-up: a SLURM is already running here; not touching it" >&2; exit 77
fi
: > "$PIDS"

# munge: the key from Debian's postinst, or a new one; munged runs as the munge user
install -d -o munge -g munge -m 0755 /run/munge
[ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
if ! alive /run/munge/munged.pid munged; then
  runuser -u munge -- /usr/sbin/munged
  echo "munged /run/munge/munged.pid" >> "$PIDS"
fi
for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n | unmunge >/dev/null

# configuration: the hardware as slurmd -C sees it (the node name must be hostname -s)
NODE=$(hostname -s)
HW=$(/usr/sbin/slurmd -C | head -1)
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$HW"; }
MEM=$(field RealMemory)
MEM=${BS_SLURM_MEM_MB:-$(( MEM > 2048 ? MEM - 1024 : MEM ))}
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] && [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] \
   && mkdir /sys/fs/cgroup/memory/bs_slurm_probe 2>/dev/null; then
  rmdir /sys/fs/cgroup/memory/bs_slurm_probe
  PROCTRACK=proctrack/cgroup; TASK=task/cgroup,task/affinity; KILL='#'
  printf '%s\n' CgroupPlugin=cgroup/v1 CgroupMountpoint=/sys/fs/cgroup ConstrainCores=yes \
    ConstrainRAMSpace=yes ConstrainSwapSpace=no > /etc/slurm/cgroup.conf
else
  PROCTRACK=proctrack/linuxproc; TASK=task/none; KILL=''
  rm -f /etc/slurm/cgroup.conf
fi
install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/log/slurm
install -d /var/lib/slurm/slurmd
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=bstest
SlurmctldHost=${NODE}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
MpiDefault=none
ProctrackType=${PROCTRACK}
TaskPlugin=${TASK}
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
${KILL}JobAcctGatherParams=OverMemoryKill
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=$(field CPUs) SocketsPerBoard=$(field SocketsPerBoard) CoresPerSocket=$(field CoresPerSocket) ThreadsPerCore=$(field ThreadsPerCore) RealMemory=${MEM} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

# daemons: both fork and write their pid files; -c forgets the jobs of an earlier run
/usr/sbin/slurmctld -c
echo "slurmctld /run/slurmctld.pid" >> "$PIDS"
/usr/sbin/slurmd
echo "slurmd /run/slurmd.pid" >> "$PIDS"
st=
for _ in $(seq 300); do
  st=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
  case "$st" in idle|mix|alloc) break ;; esac
  sleep 0.1
done
case "$st" in idle|mix|alloc) ;; *)
  echo "slurm-up: node not ready ('$st')" >&2
  tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
  exit 1 ;;
esac
echo "slurm-up: node $NODE idle ($(field CPUs) CPUs, ${MEM} MiB, ${PROCTRACK})"
