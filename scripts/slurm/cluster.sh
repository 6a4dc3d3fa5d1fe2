#!/usr/bin/env bash
# A throwaway single-node Slurm cluster on this machine, for running the workflow's Slurm
# profile end to end (tests/test_slurm_cluster.py, README "Running on a cluster").
#
#   scripts/slurm/cluster.sh up      # start munged (if needed), slurmctld and slurmd; idempotent
#   scripts/slurm/cluster.sh env     # the exports that point Slurm commands and the profile at it
#   scripts/slurm/cluster.sh status  # exit 0 when the node is up and accepting jobs
#   scripts/slurm/cluster.sh down    # cancel its jobs, stop what `up` started, remove its state
#
# Needs root and Debian's slurm-wlm and munge packages. Every daemon talks on 127.0.0.1;
# state and logs live in $REARRIVAL_SLURM_STATE (default /tmp/rearrival-slurm). The
# generated slurm.conf and gres.conf go to /etc/slurm, the one place every Slurm command
# finds them (the executor plugin drops SLURM_CONF from a job's environment before its
# inner srun); `up` refuses to overwrite a slurm.conf it did not write, `down` removes it.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${REARRIVAL_SLURM_STATE:-/tmp/rearrival-slurm}"
PARTITION="${REARRIVAL_TEST_PARTITION:-rearrival}"
CTLD_PORT="${REARRIVAL_SLURMCTLD_PORT:-6817}"
SLURMD_PORT="${REARRIVAL_SLURMD_PORT:-6818}"
CONF_DIR=/etc/slurm
export SLURM_CONF="$CONF_DIR/slurm.conf"
MARKER="# rearrival throwaway test cluster"

die() { echo "cluster.sh: $*" >&2; exit 1; }

need_tools() {
  local tool
  for tool in munged munge slurmctld slurmd sinfo sbatch squeue scancel scontrol; do
    command -v "$tool" >/dev/null 2>&1 \
      || die "Slurm is not installed ($tool not on PATH): apt-get install slurm-wlm munge"
  done
  [ "$(id -u)" = 0 ] || die "the test cluster runs its daemons as root; run as root"
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_works; then
    return
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  [ -s /etc/munge/munge.key ] || die "no /etc/munge/munge.key (reinstall the munge package)"
  runuser -u munge -- munged
  cp /run/munge/munged.pid "$STATE/munged.pid"   # `down` stops only a munged it started
  for _ in $(seq 50); do munge_works && return; sleep 0.1; done
  die "munged did not start (see /var/log/munge/munged.log)"
}

node_state() { sinfo -h -n "$(hostname -s)" -o %T 2>/dev/null | head -n 1; }

is_up() {
  [ -d "$STATE" ] && ours "$SLURM_CONF" && [ -s "$SLURM_CONF" ] && pid_alive "$STATE/slurmctld.pid" && pid_alive "$STATE/slurmd.pid" \
    && case "$(node_state)" in idle*|mixed*|alloc*) true ;; *) false ;; esac
}

write_config() {
  local host cpus mem
  host="$(hostname -s)"
  # slurmd -C reports what the node really has; the node line must not claim more.
  cpus="$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -n 1)"
  mem="$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n 1)"
  [ -n "$cpus" ] && [ -n "$mem" ] || die "slurmd -C did not report CPUs and RealMemory"
  mkdir -p "$STATE/ctld" "$STATE/slurmd" "$CONF_DIR"
  local template
  for template in slurm.conf gres.conf; do
    { echo "$MARKER (scripts/slurm/cluster.sh; removed by its down)"
      sed -e "s|@HOST@|$host|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEM_MB@|$mem|g" \
          -e "s|@STATE@|$STATE|g" -e "s|@PARTITION@|$PARTITION|g" \
          -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" \
          "$HERE/$template.in"; } > "$CONF_DIR/$template"
  done
}

ours() { [ ! -e "$1" ] || head -n 1 "$1" | grep -qF "$MARKER"; }

up() {
  need_tools
  ours "$SLURM_CONF" && ours "$CONF_DIR/gres.conf" \
    || die "$CONF_DIR holds a Slurm configuration this script did not write; not touching it"
  if is_up; then
    echo "cluster.sh: already up (SLURM_CONF=$SLURM_CONF)"
    return
  fi
  down_daemons   # a half-started cluster from an earlier attempt is cleared first
  mkdir -p "$STATE"
  write_config
  start_munge
  slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (see $STATE/slurmctld.log)"
  slurmd -f "$SLURM_CONF" || die "slurmd did not start (see $STATE/slurmd.log)"
  for _ in $(seq 150); do
    if is_up; then
      echo "cluster.sh: up, partition $PARTITION (SLURM_CONF=$SLURM_CONF)"
      return
    fi
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 0.2
  done
  die "the node did not become idle (state: $(node_state); logs in $STATE)"
}

stop_pidfile() {
  local file="$1" pid
  pid_alive "$file" || { rm -f "$file"; return; }
  pid="$(cat "$file")"
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { rm -f "$file"; return; }; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

down_daemons() {
  [ -d "$STATE" ] || return 0
  if pid_alive "$STATE/slurmctld.pid"; then
    scancel --full --quiet --partition "$PARTITION" 2>/dev/null || true
    for _ in $(seq 100); do   # let slurmd reap the job steps before it goes away
      [ -z "$(squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  stop_pidfile "$STATE/slurmd.pid"
  stop_pidfile "$STATE/slurmctld.pid"
  stop_pidfile "$STATE/munged.pid"
}

down() {
  down_daemons
  rm -rf "$STATE"
  if ours "$SLURM_CONF" && ours "$CONF_DIR/gres.conf"; then
    rm -f "$SLURM_CONF" "$CONF_DIR/gres.conf"
  fi
  echo "cluster.sh: down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) is_up ;;
  env)
    echo "export REARRIVAL_SLURM_PARTITION=$PARTITION"
    echo "export REARRIVAL_SLURM_ACCOUNT="
    echo "export REARRIVAL_SLURM_DEVICE_GRES=rbln:1"
    ;;
  *) die "usage: cluster.sh up|down|status|env" ;;
esac
