#!/usr/bin/env bash
# Runs `dtrain train ARGS` across two emulated hosts on this machine: the network namespaces of
# ../shared/peers/scripts/netns_hosts.sh (nodeA and nodeB, joined by a veth pair limited to RATE
# with tc), N processes per host under mpirun over TCP (no shared memory between the hosts; the
# processes of one host talk over loopback TCP too, as the btl list says). Needs root.
#   scripts/two_hosts.sh RATE N -- ARGS...      e.g. scripts/two_hosts.sh 1gbit 4 -- \
#       --config examples/fashion_mlp.toml --epochs 1 --strategy decentralized
# COMMAND=sweep (default train) runs another subcommand the same way, e.g. `COMMAND=sweep
# scripts/two_hosts.sh 1gbit 1 -- --config ... --workers 1 --compression none,fp16,topk:0.01`.
# Ranks 0..N-1 run on nodeA and N..2N-1 on nodeB (--map-by slot fills a host first). The
# namespaces are removed at the end. PEERS (default ../shared/peers) locates the peers' scripts.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${PEERS:-$ROOT/../shared/peers}"
DTRAIN="${DTRAIN:-$ROOT/build/dtrain}"
RATE=$1
N=$2
shift 2
[[ "${1:-}" == "--" ]] && shift
NETNS="$PEERS/scripts/netns_hosts.sh"
[[ -x "$NETNS" || -f "$NETNS" ]] || { echo "error: $NETNS is missing (set PEERS)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'bash "$NETNS" down; rm -rf "$WORK"' EXIT
bash "$NETNS" up "$RATE"
printf 'nodeA slots=%s\nnodeB slots=%s\n' "$N" "$N" > "$WORK/hosts"
printf '#!/bin/sh\nexec bash %s rsh "$@"\n' "$NETNS" > "$WORK/agent"
chmod +x "$WORK/agent"
ARGS=$(printf '%q ' "$@")
ip netns exec dtA unshare --uts sh -c "hostname nodeA; cd $ROOT; mpirun --allow-run-as-root \
  --oversubscribe -np $((2 * N)) --hostfile $WORK/hosts --map-by slot --bind-to none \
  --mca plm_rsh_agent $WORK/agent --mca btl tcp,self --mca btl_tcp_if_include 10.201.0.0/24 \
  --mca oob_tcp_if_include 10.201.0.0/24 -x PATH $DTRAIN ${COMMAND:-train} $ARGS"
