#!/usr/bin/env bash
# holder.sh ROLE HOSTNAME STATE CHECKOUT: the long-lived process that holds
# one node's (ROLE node) or the head's (ROLE head) namespaces open. Started
# by nodes.sh inside the node's network namespace under
#   unshare --mount --uts --ipc --pid --fork --mount-proc --propagation private
# (the head: --mount --uts only, in the root PID namespace), so each mount
# below is this namespace's alone. It names the host, gives a node its own
# /dev/shm and /tmp (each a fresh tmpfs), brings a checkout that lies under
# /tmp back in at the same path, names every host in /etc/hosts, says it is
# ready and then only waits, reaping the processes left to it (it is PID 1 of
# the node's PID namespace: when it ends, the kernel ends them all).
set -euo pipefail
role=$1 name=$2 state=$3 checkout=$4

hostname "$name"
mount --bind "$state/hosts" /etc/hosts
if [ "$role" = node ]; then
    mount -t tmpfs -o mode=1777 "shmtopo-$name-shm" /dev/shm
    case "$checkout/" in
        /tmp/*)
            # Hidden by the tmpfs below: held at a place outside /tmp first.
            stash=$state/stash-$name
            mkdir -p "$stash"
            mount --bind "$checkout" "$stash"
            mount -t tmpfs -o mode=1777 "shmtopo-$name-tmp" /tmp
            mkdir -p "$checkout"
            mount --bind "$stash" "$checkout"
            umount "$stash"
            rmdir "$stash"
            ;;
        *) mount -t tmpfs -o mode=1777 "shmtopo-$name-tmp" /tmp ;;
    esac
fi
: >"$state/$name.ready"

trap 'exit 0' TERM INT HUP
while :; do
    sleep 3600 &
    wait $! || true
done
