#!/usr/bin/env bash
# Real nodes on one machine, out of Linux namespaces (root only).
#
#   nodes.sh up NAME LAYOUT      a cluster NAME of as many nodes as LAYOUT has
#                                numbers (LAYOUT: ranks per node, e.g. 2,2 or 1,2,1)
#   nodes.sh down NAME           tear it down; safe to repeat; fails loudly when
#                                a namespace, interface, process or mount is left
#   nodes.sh exec NAME NODE CMD...  run CMD on node NODE (node1, node2, ...) or head
#   nodes.sh mpirun NAME MPI [--keep-going] [--env VAR=VALUE]... -- CMD...
#                                CMD on every rank of the layout under MPI (openmpi:
#                                Debian's mpirun.openmpi; mpich: the hydra mpiexec of
#                                the pip-only virtualenv), launched from the head
#   nodes.sh state NAME          the cluster's state directory
#
# Each node: a network namespace whose one interface (a veth) plugs into a
# bridge that lives in a namespace of its own, on the private subnet
# 10.213.0.0/24 (the head .1, node i .1i); and a holder process (holder.sh)
# in its own mount, UTS, IPC and PID namespaces: its hostname, a private
# /dev/shm and /tmp, an /etc/hosts naming every host. The head (network, UTS
# and mount namespaces, in the root PID namespace, so that it can reach every
# node's) runs the launcher, whose remote shell is rsh: nsenter into the
# node's holder. Nothing is added to the machine's own network namespace.
# State: $SHMTOPO_NODES_RUN/NAME (default /run/shmtopo-nodes), never under
# /tmp, which the nodes do not share.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHECKOUT=$(cd "$HERE/../.." && pwd)
RUN_DIR=${SHMTOPO_NODES_RUN:-/run/shmtopo-nodes}
PREFIX=10.213.0

die() { echo "nodes.sh: $*" >&2; exit 1; }

check_name() {
    # "$1-n9", a veth's name in the bridge's namespace, must fit in 15 characters
    [[ $1 =~ ^[a-z][a-z0-9]{0,11}$ ]] || die "cluster name '$1': a letter, then up to 11 letters or digits"
}

netns_of() { echo "shmtopo-$1-$2"; }   # NAME ROLE (bridge, head, node1, ...)

# The namespaces of cluster NAME that exist now, whatever the state says.
cluster_netns() { ip netns list | awk '{ print $1 }' | grep -E "^shmtopo-$1-(bridge|head|node[0-9]+)\$" || true; }

# Processes in any of the cluster's network namespaces: the holders, what
# runs on the nodes and the head (every process that entered them).
cluster_pids() {
    local ns
    for ns in $(cluster_netns "$1"); do ip netns pids "$ns" 2>/dev/null || true; done | sort -un
}

link_up() { ip -n "$1" -o link show eth0 | grep -q 'state UP'; }

no_pids() { [ -z "$(cluster_pids "$1")" ]; }

state_of() { echo "$RUN_DIR/$1"; }

wait_for() {  # SECONDS CMD...: until CMD succeeds; fails after SECONDS
    local limit=$(($1 * 10)) i=0
    shift
    until "$@"; do
        i=$((i + 1))
        [ "$i" -lt "$limit" ] || return 1
        sleep 0.1
    done
}

up() {
    local name=$1 layout=$2 state nodes i ns br head_ns
    check_name "$name"
    [ "$(id -u)" -eq 0 ] || die "needs root (namespaces, mounts)"
    [[ $layout =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "layout '$layout': ranks per node, e.g. 2,2"
    IFS=, read -r -a counts <<<"$layout"
    nodes=${#counts[@]}
    [ "$nodes" -le 9 ] || die "at most 9 nodes"
    state=$(state_of "$name")
    case "$state/" in /tmp/*) die "state directory $state: the nodes do not share /tmp" ;; esac
    [ -z "$(cluster_netns "$name")" ] && [ ! -e "$state" ] || die "cluster $name exists: nodes.sh down $name first"
    mkdir -p "$state"
    echo "$layout" >"$state/layout"
    echo "$CHECKOUT" >"$state/checkout"
    {
        echo "127.0.0.1 localhost"
        echo "$PREFIX.1 head"
        for ((i = 1; i <= nodes; i++)); do echo "$PREFIX.$((10 + i)) node$i"; done
    } >"$state/hosts"
    chmod 0644 "$state/hosts"
    chmod 0755 "$RUN_DIR" "$state"
    # From here on any failure (or interruption) tears down what was made.
    trap 'status=$?; if [ $status -ne 0 ]; then
              echo "nodes.sh: bringing up $name failed; tearing it down" >&2; down "$name" || true; fi' EXIT
    trap 'exit 130' INT TERM

    br=$(netns_of "$name" bridge)
    ip netns add "$br"
    ip -n "$br" link set lo up
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 up

    plug() {  # ROLE ADDRESS: a network namespace for ROLE on the bridge
        local role=$1 address=$2 ns port
        ns=$(netns_of "$name" "$role")
        port=$name-${role/node/n}
        [ "$role" = head ] && port=$name-hd
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        # the veth is made inside the bridge's namespace, its peer moved straight into the node's
        ip -n "$br" link add "$port" type veth peer name eth0 netns "$ns"
        ip -n "$br" link set "$port" master br0 up
        ip -n "$ns" addr add "$address/24" dev eth0
        ip -n "$ns" link set eth0 up
    }

    hold() {  # ROLE HOSTNAME UNSHARE-OPTIONS...: start the holder, record its pid
        local role=$1 host=$2 outer pid
        shift 2
        ns=$(netns_of "$name" "$host")
        setsid nsenter --net="/run/netns/$ns" unshare "$@" --propagation private \
            bash "$HERE/holder.sh" "$role" "$host" "$state" "$CHECKOUT" </dev/null >"$state/$host.log" 2>&1 &
        outer=$!
        if ! wait_for 30 test -e "$state/$host.ready"; then
            cat "$state/$host.log" >&2
            die "$host's holder did not come up"
        fi
        if [ "$role" = node ]; then  # unshare --fork: the holder is its child, PID 1 inside
            pid=$(tr -d " " <"/proc/$outer/task/$outer/children")
        else
            pid=$outer
        fi
        [[ $pid =~ ^[0-9]+$ ]] || die "$host's holder: no single pid ($pid)"
        if [ "$role" = node ] && [ "$(readlink "/proc/$pid/ns/pid")" = "$(readlink /proc/self/ns/pid)" ]; then
            die "$host's holder (pid $pid) is not in a PID namespace of its own"
        fi
        echo "$pid" >"$state/$host.pid"
    }

    plug head "$PREFIX.1"
    hold head head --mount --uts
    for ((i = 1; i <= nodes; i++)); do
        plug "node$i" "$PREFIX.$((10 + i))"
        hold node "node$i" --mount --uts --ipc --pid --fork --mount-proc
    done
    # every link up at both ends
    for ns in $(cluster_netns "$name"); do
        [ "$ns" = "$br" ] && continue
        wait_for 10 link_up "$ns" || die "$ns: eth0 is not up"
    done
    echo "$nodes" >"$state/nodes"
    trap - EXIT INT TERM
}

down() {
    local name=$1 state pids ns left=()
    check_name "$name"
    state=$(state_of "$name")
    pids=$(cluster_pids "$name")
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        if ! wait_for 5 no_pids "$name"; then
            # shellcheck disable=SC2046
            kill -KILL $(cluster_pids "$name") 2>/dev/null || true
            wait_for 10 no_pids "$name" || true
        fi
    fi
    for ns in $(cluster_netns "$name"); do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$state"
    # checked, not assumed
    [ -z "$(cluster_netns "$name")" ] || left+=("namespaces: $(cluster_netns "$name" | tr '\n' ' ')")
    [ -z "$(cluster_pids "$name")" ] || left+=("processes: $(cluster_pids "$name" | tr '\n' ' ')")
    pids=$(ps -eo pid=,args= | grep -F "$HERE/holder.sh" | grep -F " $state " | grep -v grep || true)
    [ -z "$pids" ] || left+=("holders: $pids")
    local mounts
    mounts=$(findmnt -rn -o TARGET | grep -E "^(/run/netns/shmtopo-$name-|$state(/|\$))" || true)
    [ -z "$mounts" ] || left+=("mounts: $mounts")
    local links
    links=$(ip -o link show | grep -E ": $name-(n[0-9]+|hd)[@:]" || true)
    [ -z "$links" ] || left+=("interfaces in the machine's own namespace: $links")
    [ -e "$state" ] && left+=("state directory $state")
    if [ ${#left[@]} -gt 0 ]; then
        printf 'nodes.sh: cluster %s is not gone:\n' "$name" >&2
        printf '  %s\n' "${left[@]}" >&2
        return 1
    fi
    rmdir "$RUN_DIR" 2>/dev/null || true
}

need_cluster() {
    check_name "$1"
    [ -r "$(state_of "$1")/nodes" ] || die "no cluster $1 (nodes.sh up $1 LAYOUT)"
}

# The environment every command on the cluster starts from: nothing of the
# caller's but what is named here.
base_env() {
    local venv=$1
    local path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    [ -n "$venv" ] && path=$venv/bin:$path
    echo "PATH=$path" "HOME=$HOME" "LANG=${LANG:-C.UTF-8}" "TERM=${TERM:-dumb}"
}

do_exec() {
    local name=$1 host=$2 state pid
    shift 2
    need_cluster "$name"
    state=$(state_of "$name")
    [ -r "$state/$host.pid" ] || die "no host $host in cluster $name"
    [ $# -gt 0 ] || die "exec: no command"
    if [ "$host" = head ]; then
        pid=$(cat "$state/head.pid")
        exec nsenter -t "$pid" -n -m -u --wd="$PWD" -- "$@"
    fi
    SHMTOPO_NODES_STATE=$state exec "$HERE/rsh" "$host" "$(printf '%q ' "$@")"
}

venv_of() {  # MPI: the absolute virtualenv whose python runs on the nodes
    local venv
    venv=$(readlink -f "$CHECKOUT/.venv/$1") || true
    [ -x "$venv/bin/python" ] || die "no virtualenv .venv/$1 (./dev setup)"
    case "$venv/" in
        "$CHECKOUT"/*) ;;
        /tmp/*) die "$venv lies under /tmp, which the nodes do not share" ;;
    esac
    echo "$venv"
}

do_mpirun() {
    local name=$1 mpi=$2 keep=0 state layout venv total hosts="" i n env=() extra=()
    shift 2
    need_cluster "$name"
    while [ $# -gt 0 ]; do
        case $1 in
            --keep-going) keep=1; shift ;;
            --env) env+=("$2"); shift 2 ;;
            --) shift; break ;;
            *) die "mpirun: unknown option $1" ;;
        esac
    done
    [ $# -gt 0 ] || die "mpirun: no command"
    state=$(state_of "$name")
    layout=$(cat "$state/layout")
    venv=$(venv_of "$mpi")
    IFS=, read -r -a counts <<<"$layout"
    total=0
    for ((i = 0; i < ${#counts[@]}; i++)); do
        n=${counts[$i]}
        total=$((total + n))
        hosts+="${hosts:+,}node$((i + 1)):$n"
    done
    # shellcheck disable=SC2046
    local launch=(env -i $(base_env "$venv") "SHMTOPO_NODES_STATE=$state" "SHMTOPO_NODES_VENV=$venv")
    case $mpi in
        openmpi)
            launch+=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi
                     --host "$hosts" -n "$total" --map-by slot --bind-to none
                     --mca plm_rsh_agent "$HERE/rsh" --mca plm_rsh_no_tree_spawn 1
                     --mca oob_tcp_if_include "$PREFIX.0/24" --mca btl_tcp_if_include "$PREFIX.0/24"
                     --mca btl self,vader,tcp --mca pml ob1 --mca btl_vader_single_copy_mechanism none)
            [ "$keep" = 1 ] && launch+=(--mca orte_abort_on_non_zero_status 0)
            for i in "${env[@]}"; do extra+=(-x "$i"); done
            ;;
        mpich)
            launch+=("$venv/bin/mpiexec" -launcher ssh -launcher-exec "$HERE/rsh" -hosts "$hosts" -n "$total")
            [ "$keep" = 1 ] && launch+=(-disable-auto-cleanup)
            for i in "${env[@]}"; do extra+=(-genv "${i%%=*}" "${i#*=}"); done
            ;;
        *) die "mpirun: MPI is openmpi or mpich, not $mpi" ;;
    esac
    exec nsenter -t "$(cat "$state/head.pid")" -n -m -u --wd="$PWD" -- "${launch[@]}" "${extra[@]}" "$@"
}

cmd=${1:-}
case $cmd in
    up) [ $# -eq 3 ] || die "usage: nodes.sh up NAME LAYOUT"; up "$2" "$3" ;;
    down) [ $# -eq 2 ] || die "usage: nodes.sh down NAME"; down "$2" ;;
    exec) [ $# -ge 4 ] || die "usage: nodes.sh exec NAME NODE CMD..."; shift; do_exec "$@" ;;
    mpirun) [ $# -ge 4 ] || die "usage: nodes.sh mpirun NAME MPI [--keep-going] [--env VAR=VALUE]... -- CMD..."
        shift; do_mpirun "$@" ;;
    state) [ $# -eq 2 ] || die "usage: nodes.sh state NAME"; need_cluster "$2"; state_of "$2" ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
esac
