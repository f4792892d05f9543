#!/usr/bin/env bash
# A private one-node SLURM cluster on localhost, for the launch tests (tests/launch) and for trying
# `nemo-lead submit` on one machine.
#
#   scripts/slurm_local.sh start STATE_DIR   # install (apt) when missing, configure, start; prints SLURM_CONF=...
#   scripts/slurm_local.sh stop STATE_DIR    # stop the daemons this state folder started
#
# Everything lives under STATE_DIR: slurm.conf (use it with `export SLURM_CONF=STATE_DIR/slurm.conf`),
# a munge key and socket of its own, spool and state folders, logs, pid files. Nothing is written to
# /etc/slurm, and a system SLURM or munge on the same machine is left alone (own ports, own socket).
# Needs root (slurmd runs jobs as their submitting user) and Debian's slurm-wlm + munge packages:
# `start` installs them with apt-get when slurmctld is missing.
set -euo pipefail

die() { echo "slurm_local: $*" >&2; exit 1; }

install_packages() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
    [ "$(id -u)" = 0 ] || die "slurm-wlm and munge are missing and installing them needs root"
    command -v apt-get >/dev/null || die "slurm-wlm and munge are missing and there is no apt-get to install them"
    echo "slurm_local: installing slurm-wlm and munge with apt-get" >&2
    local log; log="$(mktemp)"
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            slurm-wlm munge; } >"$log" 2>&1; then
        tail -20 "$log" >&2; rm -f "$log"
        die "apt-get install slurm-wlm munge failed"
    fi
    rm -f "$log"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what="$2"; shift 2
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.2
    done
    [ -n "$what" ] || true
}

start() {
    local state="$1"
    install_packages
    mkdir -p "$state"
    state="$(cd "$state" && pwd)"
    [ ! -e "$state/slurmctld.pid" ] || die "$state already has a running cluster (stop it first)"
    mkdir -p "$state/munge" "$state/ctld" "$state/spool" "$state/log"
    # munge: its own key and socket; munged insists on an owner-only key and a socket folder it owns
    chown munge:munge "$state/munge" && chmod 0700 "$state/munge"
    dd if=/dev/urandom of="$state/munge/munge.key" bs=1024 count=1 status=none
    chown munge:munge "$state/munge/munge.key" && chmod 0400 "$state/munge/munge.key"
    chmod 0755 "$state"
    runuser -u munge -- munged --force --socket="$state/munge/munge.socket" \
        --key-file="$state/munge/munge.key" --pid-file="$state/munge/munged.pid" \
        --log-file="$state/munge/munged.log" --seed-file="$state/munge/munged.seed" \
        || die "munged did not start (see $state/munge/munged.log)"
    local cpus; cpus="$(nproc)"; [ "$cpus" -ge 4 ] || cpus=4  # room for two 2-task jobs on a 2-core machine
    cat >"$state/slurm.conf" <<EOF
# written by scripts/slurm_local.sh: a one-node cluster on localhost
ClusterName=nemolead
SlurmctldHost=localhost
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job becomes eligible again cred_expire + 1 s after the requeue (default 120 s)
AuthInfo=socket=$state/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
# the main scheduling pass every second (default 60 s): a requeued job restarts as soon as it is eligible
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    export SLURM_CONF="$state/slurm.conf"
    slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (see $state/log/slurmctld.log)"
    wait_for 30 "" scontrol ping || die "slurmctld does not answer (see $state/log/slurmctld.log)"
    slurmd -f "$SLURM_CONF" -N localhost || die "slurmd did not start (see $state/log/slurmd.log)"
    wait_for 30 "" bash -c 'sinfo -h -n localhost -o %t | grep -qE "^(idle|mix|alloc)"' \
        || die "node localhost did not become idle: $(sinfo -h -o '%t %E' 2>&1) (see $state/log/)"
    echo "SLURM_CONF=$SLURM_CONF"
}

stop_pid() {  # stop_pid PIDFILE: TERM, then KILL after 10 s
    local file="$1" pid
    [ -f "$file" ] || return 0
    pid="$(cat "$file" 2>/dev/null || true)"
    rm -f "$file"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
}

stop() {
    local state; state="$(cd "$1" 2>/dev/null && pwd)" || return 0
    if [ -f "$state/slurm.conf" ] && [ -f "$state/slurmctld.pid" ]; then
        # jobs first, so that no task outlives the cluster
        export SLURM_CONF="$state/slurm.conf"
        timeout 20 scancel --partition=debug 2>/dev/null || true
        for _ in $(seq 60); do
            [ -z "$(timeout 10 squeue -h -t RUNNING,COMPLETING,SUSPENDED 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    stop_pid "$state/slurmd.pid"
    stop_pid "$state/slurmctld.pid"
    stop_pid "$state/munge/munged.pid"
}

case "${1:-}" in
    start) [ $# -eq 2 ] || die "usage: $0 start STATE_DIR"; start "$2" ;;
    stop) [ $# -eq 2 ] || die "usage: $0 stop STATE_DIR"; stop "$2" ;;
    install) install_packages ;;
    *) die "usage: $0 start|stop STATE_DIR, or $0 install" ;;
esac
