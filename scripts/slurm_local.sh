#!/usr/bin/env bash
# A private SLURM cluster on this machine, for the launch tests (tests/launch) and for trying
# `nemo-lead submit` on one machine: one node on localhost, or several nodes, each a network namespace of
# its own on a bridge this script makes and removes.
#
#   scripts/slurm_local.sh start STATE_DIR [NODES]  # install (apt) when missing, configure, start; prints SLURM_CONF=...
#   scripts/slurm_local.sh stop STATE_DIR           # stop the daemons and remove the namespaces this state folder made
#   scripts/slurm_local.sh node-kill STATE_DIR NODE # a node lost: its link cut, then every process on it killed (-9)
#   scripts/slurm_local.sh node-start STATE_DIR NODE  # the lost node back: its link up, its slurmd started
#   scripts/slurm_local.sh watch STATE_DIR PID      # once process PID ends (a killed test run): stop, remove STATE_DIR
#
# Everything lives under STATE_DIR: slurm.conf (use it with `export SLURM_CONF=STATE_DIR/slurm.conf`),
# a munge key and socket of its own, spool and state folders, logs, pid files. Nothing is written to
# /etc/slurm, and a system SLURM or munge on the same machine is left alone (own ports, own socket).
# Needs root (slurmd runs jobs as their submitting user) and Debian's slurm-wlm + munge packages:
# `start` installs them with apt-get when slurmctld is missing.
#
# NODES=1 (the default): one node, `localhost`, at 127.0.0.1.
# NODES>=2: nodes node1..nodeN. Each node's slurmd, and so every job step on that node, runs in a network
# namespace of its own (address 198.18.K.(10+i) on a bridge whose host side, 198.18.K.1, is slurmctld's
# address; K is a /24 of the 198.18.0.0/15 benchmarking range that no interface or route of this machine
# uses), in a UTS namespace whose host name is the node's name, and in a mount namespace whose /etc/hosts
# (STATE_DIR/hosts) names every node. A job therefore sees distinct host names and addresses, SLURM_NODEID /
# SLURM_PROCID / SLURM_JOB_NODELIST as a cluster sets them, and reaches the first node of its allocation by
# name, over the bridge; the file system is shared, as a cluster's shared file system is. Traffic goes only
# between the namespaces and the bridge's host side. Debian's slurmd also runs several nodes on one address
# (multiple-slurmd: `slurmd -N NAME`, a port each), but those nodes share one host name and one network, so a
# job's rendezvous at its first node's name and a node that drops off the network could not be tried there.
# `node-kill` takes a node down as a power cut would: its link goes down first (no peer hears a connection
# close), then its slurmd, its job steps and their processes are killed; slurmctld declares it DOWN after
# SlurmdTimeout (10 s here) without an answer, and ReturnToService=2 takes it back once `node-start` runs.
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

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds; status 1 after SECONDS
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.2
    done
}

start() {
    local state="$1" nodes="${2:-1}"
    [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "NODES must be a number from 1 to 99, got '$nodes'"
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
    local ctld_host=localhost node_lines partition_nodes slurmd_port i
    slurmd_port="$(free_port)"
    if [ "$nodes" = 1 ]; then
        node_lines="NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN"
        partition_nodes=localhost
    else
        make_network "$state" "$nodes"
        ctld_host="localhost($NET.1)"  # the nodes reach slurmctld at the bridge's host side
        node_lines=""
        for i in $(seq "$nodes"); do
            node_lines+="NodeName=node$i NodeHostname=node$i NodeAddr=$NET.$((10 + i)) CPUs=$cpus State=UNKNOWN"$'\n'
        done
        partition_nodes="node[1-$nodes]"
    fi
    cat >"$state/slurm.conf" <<EOF
# written by scripts/slurm_local.sh: a $nodes-node cluster on this machine
ClusterName=nemolead
SlurmctldHost=$ctld_host
SlurmctldPort=$(free_port)
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job becomes eligible again cred_expire + 1 s after the requeue (default 120 s)
AuthInfo=socket=$state/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd-%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd-%n.log
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
# a node that has not answered for 10 s is DOWN and its jobs end, requeued where they allow it (default 300 s)
SlurmdTimeout=10
MinJobAge=600
InactiveLimit=0
${node_lines%$'\n'}
PartitionName=debug Nodes=$partition_nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    export SLURM_CONF="$state/slurm.conf"
    slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (see $state/log/slurmctld.log)"
    wait_for 30 scontrol ping || die "slurmctld does not answer (see $state/log/slurmctld.log)"
    if [ "$nodes" = 1 ]; then
        mkdir -p "$state/spool/localhost"
        slurmd -f "$SLURM_CONF" -N localhost || die "slurmd did not start (see $state/log/slurmd-localhost.log)"
        wait_idle localhost || die "node localhost did not become idle: $(sinfo -h -o '%t %E' 2>&1) (see $state/log/)"
    else
        for i in $(seq "$nodes"); do start_node "$state" "node$i"; done
        for i in $(seq "$nodes"); do
            wait_idle "node$i" || die "node$i did not become idle: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';') (see $state/log/)"
        done
        # node to node over the bridge: a firewall on bridged traffic would stop a job's ranks, not slurmd's pings
        nsenter --net="/run/netns/$(ns_name node1)" timeout 5 bash -c "exec 3<>/dev/tcp/$NET.12/$slurmd_port" \
            || die "node1 cannot reach node2 over the bridge $BRIDGE (is bridged traffic filtered? see" \
                   "/proc/sys/net/bridge/bridge-nf-call-iptables)"
    fi
    echo "SLURM_CONF=$SLURM_CONF"
}

wait_idle() {  # wait_idle NODE: until slurmctld sees it idle (or mixed / allocated), 30 s at most
    wait_for 30 bash -c "sinfo -h -n '$1' -o %t | grep -qE '^(idle|mix|alloc)\$'"
}

# --- several nodes: network namespaces on a bridge --------------------------------------------------------
# STATE/network.env is written before anything is made, so that `stop` removes what a failed start left:
#   NET=198.18.K  BRIDGE=nlb<id>  NS_PREFIX=nemolead-<id>-  NODES=N   (<id>: 6 hex digits of the state path)

ns_name() { echo "${NS_PREFIX}$1"; }

make_network() {  # make_network STATE NODES (sets NET, BRIDGE, NS_PREFIX, NODES)
    local state="$1" nodes="$2" id k j net="" used ns i
    command -v ip >/dev/null && command -v unshare >/dev/null || die "several nodes need ip (iproute2) and unshare"
    id="$(printf %s "$state" | sha1sum | cut -c1-6)"
    # a /24 of 198.18.0.0/15 (RFC 2544: benchmarking) that no address or route of this machine touches
    used="$(ip -4 -o addr show; ip -4 route show table all)"
    for j in $(seq 0 255); do
        k=$(( (16#${id:0:2} + j) % 256 ))
        if ! grep -qE "198\.18\.$k\.|198\.1[89]\.0\.0/1[0-5]|198\.(16|18)\.0\.0/(1[0-5]|[0-9])( |$)" <<<"$used"; then
            net="198.18.$k"; break
        fi
    done
    [ -n "$net" ] || die "no free /24 in 198.18.0.0/16 for the nodes' bridge"
    printf 'NET=%s\nBRIDGE=%s\nNS_PREFIX=%s\nNODES=%s\n' "$net" "nlb$id" "nemolead-$id-" "$nodes" >"$state/network.env"
    load_network "$state"
    { cat /etc/hosts; echo "# the nodes of the SLURM cluster in $state"
      # the IPv4-mapped form too: a dual-stack listener (torch's rendezvous store) looks its peers up by it
      for i in $(seq "$nodes"); do echo "$NET.$((10 + i)) node$i"; echo "::ffff:$NET.$((10 + i)) node$i"; done
    } >"$state/hosts"
    ip link add "$BRIDGE" type bridge || die "cannot make the bridge $BRIDGE"
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(seq "$nodes"); do
        ns="$(ns_name "node$i")"
        ip netns add "$ns" || die "cannot make the network namespace $ns"
        ip link add "nlh$id-$i" type veth peer name "nlp$id-$i"
        ip link set "nlp$id-$i" netns "$ns"
        ip -n "$ns" link set "nlp$id-$i" name eth0
        ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        ip link set "nlh$id-$i" master "$BRIDGE"
        ip link set "nlh$id-$i" up
    done
}

start_node() {  # start_node STATE NODE: its slurmd in the node's namespaces (network, host name, /etc/hosts)
    local state="$1" node="$2"
    mkdir -p "$state/spool/$node"
    # nsenter, not `ip netns exec`, which remounts /sys (and so hides the cgroup mounts slurmd reads)
    nsenter --net="/run/netns/$(ns_name "$node")" unshare --uts --mount --propagation private \
        bash -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -f "$3" -N "$1"' \
        _ "$node" "$state/hosts" "$state/slurm.conf" \
        || die "slurmd of $node did not start (see $state/log/slurmd-$node.log)"
}

kill_namespace() {  # kill_namespace NS: SIGKILL every process in it until none is left (10 s at most)
    local pids
    for _ in $(seq 50); do
        pids="$(ip netns pids "$1" 2>/dev/null || true)"
        [ -n "$pids" ] || return 0
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.2
    done
    echo "slurm_local: processes left in $1: $(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')" >&2
}

load_network() {  # NET, BRIDGE, NS_PREFIX, NODES from STATE/network.env (a one-node cluster has none)
    [ -f "$1/network.env" ] || die "$1 holds no cluster of several nodes"
    # shellcheck source=/dev/null
    . "$1/network.env"
}

node_ns() {  # node_ns STATE NODE: the node's namespace, or die
    local ns
    ns="$(ns_name "$2")"
    ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no node $2 in $1"
    echo "$ns"
}

node_kill() {  # node_kill STATE NODE
    local state="$1" node="$2" ns count
    load_network "$state"
    ns="$(node_ns "$state" "$node")"
    ip -n "$ns" link set eth0 down  # first: no peer hears a connection close, as after a power cut
    count="$(ip netns pids "$ns" | wc -l)"
    kill_namespace "$ns"
    rm -f "$state/slurmd-$node.pid"
    echo "slurm_local: node $node lost: its link is down and its $count processes were killed"
}

node_start() {  # node_start STATE NODE
    local state="$1" node="$2" ns
    load_network "$state"
    ns="$(node_ns "$state" "$node")"
    [ -z "$(ip netns pids "$ns")" ] || die "node $node is running (node-kill it first)"
    ip -n "$ns" link set eth0 up
    export SLURM_CONF="$state/slurm.conf"
    start_node "$state" "$node"
    wait_idle "$node" || die "node $node did not come back: $(sinfo -h -n "$node" -o '%t %E' 2>&1)"
    echo "slurm_local: node $node is back"
}

remove_network() {  # remove_network STATE: every process left in the nodes' namespaces, the namespaces, the bridge
    local state="$1" ns
    [ -f "$state/network.env" ] || return 0
    load_network "$state"
    for ns in $(ip netns list | awk '{print $1}' | grep "^$NS_PREFIX" || true); do
        kill_namespace "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    rm -f "$state/network.env"
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
    local state pidfile; state="$(cd "$1" 2>/dev/null && pwd)" || return 0
    if [ -f "$state/slurm.conf" ] && [ -f "$state/slurmctld.pid" ]; then
        # jobs first, so that no task outlives the cluster
        export SLURM_CONF="$state/slurm.conf"
        timeout 20 scancel --partition=debug 2>/dev/null || true
        for _ in $(seq 60); do
            [ -z "$(timeout 10 squeue -h -t RUNNING,COMPLETING,SUSPENDED 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    for pidfile in "$state"/slurmd-*.pid; do stop_pid "$pidfile"; done
    remove_network "$state"  # what is left on the nodes: a lost node's processes, a step that would not end
    stop_pid "$state/slurmctld.pid"
    stop_pid "$state/munge/munged.pid"
}

watch() {  # watch STATE PID: once PID has ended, stop the cluster and remove STATE (unless its owner did)
    local state="$1" pid="$2"
    while kill -0 "$pid" 2>/dev/null; do
        [ -f "$state/slurm.conf" ] || return 0
        sleep 1
    done
    stop "$state"
    rm -rf "$state"
}

case "${1:-}" in
    start) [ $# -eq 2 ] || [ $# -eq 3 ] || die "usage: $0 start STATE_DIR [NODES]"; start "$2" "${3:-1}" ;;
    stop) [ $# -eq 2 ] || die "usage: $0 stop STATE_DIR"; stop "$2" ;;
    node-kill) [ $# -eq 3 ] || die "usage: $0 node-kill STATE_DIR NODE"; node_kill "$2" "$3" ;;
    node-start) [ $# -eq 3 ] || die "usage: $0 node-start STATE_DIR NODE"; node_start "$2" "$3" ;;
    watch) [ $# -eq 3 ] || die "usage: $0 watch STATE_DIR PID"; watch "$2" "$3" ;;
    install) install_packages ;;
    *) die "usage: $0 start STATE_DIR [NODES] | stop STATE_DIR | node-kill STATE_DIR NODE | node-start STATE_DIR NODE | watch STATE_DIR PID | install" ;;
esac
