#!/usr/bin/env bash
# Measures dtrain's allreduce against Open MPI's on this machine in one run, for
# docs/PERFORMANCE.md (issue 3's speed targets):
#   - inproc (ranks are threads, bound to CPUs as mpirun binds processes), P = 2: ring,
#     halving-doubling, parameter-server, auto at 4 B, 4 MiB, 64 MiB; ring at 4 B also unbound
#     (--no-pin);
#   - the mpi transport under mpirun, np = 2 and 4: ring, halving-doubling, native at 4, 16, 64 MiB;
#   - Open MPI 4.1's MPI_Allreduce (../shared/peers/src/mpi_coll_bench.c) at the same sizes;
#   - 2-thread memcpy (../shared/peers/src/memcpy_bw.c), the bound's unit;
#   - the core-to-core cache-line round trip (build/bench/core_ping_pong_bench; the "time" column,
#     in us), which tells the VM's fast state (~0.12) from its slow one (~0.4-0.5).
# Rounds alternate the runs; the summary gives medians [min-max] of busbw (GB/s) and time.
# Usage: scripts/compare_collectives.sh [ROUNDS]   (default 3; needs build/dtrain)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${PEERS:-$ROOT/../shared/peers}"
DTRAIN="${DTRAIN:-$ROOT/build/dtrain}"
OUT="${OUT:-/tmp/dtrain-collectives}"
ROUNDS="${1:-3}"
mkdir -p "$OUT"
: > "$OUT/results.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O2 -o "$OUT/mpi_coll_bench" "$PEERS/src/mpi_coll_bench.c"
gcc -O2 -march=native -pthread -o "$OUT/memcpy_bw" "$PEERS/src/memcpy_bw.c"

rows() {  # rows LABEL < dtrain JSON  ->  "LABEL algorithm np size time_us busbw" lines
  python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(sys.argv[1], r["algorithm"], r["ranks"], r["size"], r["time_us"], r["busbw"])' "$1"
}

for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  "$DTRAIN" bench collectives --op allreduce --algorithm ring,halving-doubling,parameter-server,auto \
    --ranks 2 --sizes 4,4M,64M --json 2>/dev/null | rows inproc >> "$OUT/results.txt"
  "$DTRAIN" bench collectives --no-pin --op allreduce --algorithm ring --ranks 2 \
    --sizes 4 --json 2>/dev/null | rows inproc-unpinned >> "$OUT/results.txt"
  for np in 2 4; do
    mpirun --oversubscribe -np "$np" "$DTRAIN" bench collectives --op allreduce \
      --algorithm ring,halving-doubling,native --sizes 4M,16M,64M --json 2>/dev/null \
      | rows mpi >> "$OUT/results.txt"
    mpirun --oversubscribe -np "$np" "$OUT/mpi_coll_bench" allreduce 4,4194304,16777216,67108864 0.3 \
      | awk -F, '{print "openmpi MPI_Allreduce", $2, $3, $5, $7}' >> "$OUT/results.txt"
  done
  # The VM's state (docs/PERFORMANCE.md): one cache line's round trip between the first two CPUs.
  if [[ -x "$ROOT/build/bench/core_ping_pong_bench" ]]; then
    "$ROOT/build/bench/core_ping_pong_bench" --benchmark_format=csv 2>/dev/null \
      | awk -F, '/BM_CoreRoundTrip/ {print "probe core-round-trip 2 64", $3/1e3, 0}' \
      >> "$OUT/results.txt"
  fi
  "$OUT/memcpy_bw" 2 64 10 | sed 's/.*copy_GBps_median=\([0-9.]*\).*/memcpy 2-threads 2 67108864 0 \1/' \
    >> "$OUT/results.txt"
done

python3 - "$OUT/results.txt" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    who, alg, np, size, t, bw = line.split()
    d[(who, alg, int(np), int(size))].append((float(t), float(bw)))
print("| who | algorithm | P | size (B) | time (us) | busbw (GB/s) |")
print("|---|---|---|---|---|---|")
for (who, alg, np, size), v in sorted(d.items(), key=lambda kv: (kv[0][2], kv[0][3], kv[0][0], kv[0][1])):
    ts = sorted(x[0] for x in v); bws = sorted(x[1] for x in v)
    print(f"| {who} | {alg} | {np} | {size} | {statistics.median(ts):.2f} [{ts[0]:.2f}-{ts[-1]:.2f}] "
          f"| {statistics.median(bws):.3f} [{bws[0]:.3f}-{bws[-1]:.3f}] |")
PY
