#!/usr/bin/env bash
# local-slurm.sh: a throwaway SLURM "cluster" on this one machine, so the `slurm`-marked tests run real jobs.
#
#   scripts/local-slurm.sh up       start it (installs the Debian packages if missing); idempotent
#   scripts/local-slurm.sh status   print what runs; exit 0 only if every node answers and is usable
#   scripts/local-slurm.sh smoke    run a 2-node `srun hostname` job through it
#   scripts/local-slurm.sh down     stop what `up` started and undo its edits; nothing else
#
# What `up` builds: munge (authentication), one slurmctld (port 6817), and NODES slurmd daemons started as fake
# nodes n1..nN (`slurmd -N n1`, ports 17001..), all on 127.0.0.1, in one partition `debug`, CPUs only. The node
# names go into /etc/hosts because job scripts use the first node's name as the rendezvous host, as on a real
# cluster. Needs root, Debian/Ubuntu (apt-get), no systemd. Jobs run as the submitting user with its environment
# (sbatch's default), so they use the same Python as the tests.
#
# Tests: the `slurm`-marked ones in tests/test_slurm.py run under a plain `python -m pytest` once the cluster is
# up (`pytest -m slurm` runs only them) and skip, saying why, when no cluster answers. CI runs `up` before pytest
# and `down` after. A failing job: its log is in the test's message; `scontrol show job ID` and $W/log/ say more.
#
# Everything `up` creates is recorded under $W (default /tmp/local-slurm: config, state, logs, pid files), and
# `down` undoes only that: it signals the pids in its own pid files, stops munged only if `up` started it, removes
# only the /etc/hosts line and /etc/slurm/slurm.conf it wrote. It refuses to touch a slurm.conf it did not write,
# so it never clobbers a real cluster's config. Daemon logs: $W/log/*.log (printed when `up` fails).
#
#   env: NODES=2 (fake nodes), W=/tmp/local-slurm (work dir), UP_TIMEOUT_S=30 (wait for nodes to become idle)
set -euo pipefail
NODES=${NODES:-2}
W=${W:-/tmp/local-slurm}
UP_TIMEOUT_S=${UP_TIMEOUT_S:-30}
CONF=/etc/slurm/slurm.conf
MARK='# local-slurm'
PACKAGES=(slurmctld slurmd slurm-client munge)

log() { echo "[local-slurm $(date +%T)] $*" >&2; }
die() { log "error: $*"; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }  # alive PIDFILE: does that process still run?

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    && command -v sbatch >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || die "slurm is not installed and there is no apt-get to install it"
  log "installing ${PACKAGES[*]} (once, about 15 s)"
  # Keep the packages' maintainer scripts from starting daemons: `up` starts exactly what it will stop.
  local own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
  fi
  local ok=0
  for attempt in 1 2; do
    [ "$attempt" = 2 ] && { log "apt-get update"; apt-get update -q >/dev/null || true; }
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"$W/apt.log" 2>&1
    then ok=1; break; fi
  done
  [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
  [ "$ok" = 1 ] || { tail -n 20 "$W/apt.log" >&2; die "apt-get install ${PACKAGES[*]} failed"; }
}

munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  munge_works && return
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 755 /run/munge "$W/munge"  # munged runs as munge: its pid file must be writable
  su -s /bin/sh munge -c "/usr/sbin/munged --pid-file=$W/munge/munged.pid" || die "munged did not start"
  for _ in $(seq 50); do munge_works && return; sleep 0.1; done
  die "munged started but munge -n | unmunge still fails"
}

add_hosts() {
  grep -q "$MARK" /etc/hosts && return
  echo "127.0.0.1 $(seq -f 'n%g' -s ' ' 1 "$NODES") $MARK" >> /etc/hosts
}

write_conf() {
  if [ -e "$CONF" ] && ! grep -q "^$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script; refusing to overwrite a real cluster's config"
  fi
  local mem
  mem=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) * 9 / 10240 ))  # MiB, 90% of the machine
  mkdir -p /etc/slurm
  cat > "$CONF" <<EOF
$MARK: written by scripts/local-slurm.sh up, removed by down. Work dir: $W
ClusterName=localtest
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Quick turnaround for tests: a finished job frees its nodes at once and stays visible to scontrol for 10 minutes.
KillWait=5
MinJobAge=600
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/slurmd-%n
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd-%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd-%n.log
NodeName=n[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001-$((17000 + NODES)) CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start_daemons() {
  alive "$W/slurmctld.pid" || slurmctld -i
  for i in $(seq 1 "$NODES"); do
    mkdir -p "$W/spool/slurmd-n$i"
    alive "$W/slurmd-n$i.pid" || slurmd -N "n$i"
  done
}

# usable_nodes: how many nodes answer and can take jobs (idle, mixed or allocated; not down/drained/unknown).
usable_nodes() {
  timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc)$/ {print $1}' | sort -u | wc -l
}

wait_idle() {
  local tries=$(( UP_TIMEOUT_S * 10 ))
  for _ in $(seq "$tries"); do
    [ "$(usable_nodes)" -ge "$NODES" ] && return 0
    sleep 0.1
  done
  log "nodes did not become idle within ${UP_TIMEOUT_S}s"
  sinfo -N -l >&2 || true
  tail -n 20 "$W"/log/*.log >&2 || true
  return 1
}

up() {
  [ "$(id -u)" = 0 ] || die "run as root (it installs packages, starts daemons and edits /etc/hosts)"
  local start=$SECONDS
  mkdir -p "$W"/{state,spool,log}
  install_packages
  start_munge
  add_hosts
  write_conf
  start_daemons
  wait_idle
  log "cluster up in $(( SECONDS - start ))s: $(sinfo -h -o '%P %D nodes %t' | tr '\n' ' ')"
}

status() {
  local rc=0 name
  for name in slurmctld $(seq -f 'slurmd-n%g' 1 "$NODES"); do
    if alive "$W/$name.pid"; then echo "$name: running (pid $(cat "$W/$name.pid"))"; else echo "$name: not running"; rc=1; fi
  done
  if munge_works; then echo "munge: works"; else echo "munge: not working"; rc=1; fi
  if ! timeout 5 scontrol ping >/dev/null 2>&1; then echo "slurmctld: not answering"; return 1; fi
  timeout 5 sinfo -N -o '%N %P %t %C' || rc=1
  [ "$(usable_nodes)" -ge "$NODES" ] || { echo "fewer than $NODES usable nodes"; rc=1; }
  return $rc
}

# wait_job JOBID [TIMEOUT_S]: poll every 0.2 s until the job has ended; succeed iff it ended COMPLETED.
wait_job() {
  local jid=$1 tries=$(( ${2:-60} * 5 )) state=
  for _ in $(seq "$tries"); do
    state=$(scontrol -o show job "$jid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$state" in PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED|"") sleep 0.2 ;; *) break ;; esac
  done
  log "job $jid: ${state:-unknown}"
  [ "$state" = COMPLETED ]
}

smoke() {
  local jid start=$SECONDS
  jid=$(sbatch --parsable -N"$NODES" --ntasks-per-node=1 -o "$W/smoke-%j.out" --wrap 'srun hostname')
  wait_job "$jid" 60 || { cat "$W/smoke-$jid.out" >&2; return 1; }
  log "smoke job $jid done in $(( SECONDS - start ))s: $(sort "$W/smoke-$jid.out" | uniq -c | tr -s ' \n' ' ')"
}

stop_pidfile() {  # stop_pidfile FILE...: SIGTERM each recorded process, wait up to 10 s, then SIGKILL
  local f pids=()
  for f in "$@"; do alive "$f" && pids+=("$(cat "$f")"); done
  [ ${#pids[@]} -eq 0 ] && return
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local left=0 p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    [ $left = 0 ] && return; sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

down() {
  local start=$SECONDS
  if alive "$W/slurmctld.pid"; then  # every job of this cluster is ours: cancel them so no job step outlives it
    timeout 5 squeue -h -o %i 2>/dev/null | xargs -r timeout 5 scancel 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  # Each daemon takes about 2 s to notice SIGTERM; signalling them together keeps `down` at that.
  # munged.pid only exists if `up` started munged.
  stop_pidfile "$W"/slurmd-*.pid "$W/slurmctld.pid" "$W/munge/munged.pid"
  if grep -q "$MARK" /etc/hosts; then  # rewrite in place: /etc/hosts is often a bind mount, so no sed -i
    grep -v "$MARK" /etc/hosts > "$W.hosts" || true
    cat "$W.hosts" > /etc/hosts && rm -f "$W.hosts"
  fi
  if [ -e "$CONF" ] && grep -q "^$MARK" "$CONF"; then rm -f "$CONF"; fi
  rm -rf "$W"
  log "torn down in $(( SECONDS - start ))s"
}

case "${1:-}" in
  up) up ;;
  status) status ;;
  smoke) smoke ;;
  down) down ;;
  *) echo "usage: $0 up|status|smoke|down   (see the comment at the top of this file)" >&2; exit 2 ;;
esac
