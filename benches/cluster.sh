#!/usr/bin/env bash
# Starts a 3-server JetStream cluster and 3 `auditmem serve --log nats://...` release nodes on
# loopback, runs the load driver against them with the arguments given, prints each node's
# cluster metrics, and stops everything. docs/PERFORMANCE.md ("Cluster") quotes its runs.
#
#   bash benches/cluster.sh DIR [--nodes 1|3] -- LOAD-DRIVER-ARGS...
#   e.g. bash benches/cluster.sh /tmp/c -- --scenarios ingest --audit-entries 0 --secs 20
#
# DIR holds the servers' stores, the nodes' mirrors and the driver's seeded tenants; reuse it to
# keep what was seeded (the stream and the mirrors persist), remove it for a fresh cluster.
# `--nodes 1` sends every request to the first node (the others still mirror and fold).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:?usage: bash benches/cluster.sh DIR [--nodes 1|3] -- LOAD-DRIVER-ARGS...}
shift
nodes=3
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "${1:-}" = "--" ] && shift
command -v nats-server >/dev/null || { echo "nats-server missing: bash .ci/setup-tests" >&2; exit 1; }

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
token=load-admin-token-2c41e9f07a3d5b86
client=(14222 14223 14224) route=(16222 16223 16224) mon=(18222 18223 18224)
api=(18301 18302 18303)
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
# Polls URL until it answers 2xx, for at most TRIES times 0.2 s.
wait_ok() {
  for _ in $(seq "$2"); do curl -fs "$1" >/dev/null && return; sleep 0.2; done
  echo "no answer from $1" >&2
  exit 1
}

routes=""
for i in 0 1 2; do routes+="nats-route://127.0.0.1:${route[$i]}, "; done
routes=${routes%, }
for i in 0 1 2; do
  n=n$((i + 1))
  mkdir -p "$dir/$n"
  # As the tests' cluster (tests/it/cluster/harness.rs): a group commit is one message.
  cat > "$dir/$n/nats.conf" <<EOF
server_name: $n
listen: 127.0.0.1:${client[$i]}
http: 127.0.0.1:${mon[$i]}
max_payload: 8MB
log_file: "$dir/$n/nats.log"
jetstream {
  store_dir: "$dir/$n/store"
  max_memory_store: 256MB
  max_file_store: 16GB
}
cluster {
  name: auditmem-bench
  listen: 127.0.0.1:${route[$i]}
  routes: [$routes]
}
EOF
  nats-server -c "$dir/$n/nats.conf" &
  pids+=($!)
done
for i in 0 1 2; do wait_ok "http://127.0.0.1:${mon[$i]}/healthz?js-enabled-only=true" 100; done

# The driver's bench build also builds the binary (the bench profile: release with line tables).
# The nodes run a copy, so a later build does not delete the file under them and a profiler
# still finds its symbols.
# AUDITMEM_BIN runs another build of the nodes instead (an A/B in the same hour).
cargo bench --bench load --no-run -q
cp "${AUDITMEM_BIN:-target/release/auditmem}" "$dir/auditmem"
log="nats://127.0.0.1:${client[0]},127.0.0.1:${client[1]},127.0.0.1:${client[2]}"
for i in 0 1 2; do
  mkdir -p "$dir/api$((i + 1))"
  AUDITMEM_ADMIN_TOKEN=$token "$dir/auditmem" serve --log "$log" \
    --data-dir "$dir/api$((i + 1))/data" --listen "127.0.0.1:${api[$i]}" \
    > "$dir/api$((i + 1))/serve.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do wait_ok "http://127.0.0.1:${api[$i]}/healthz" 300; done

also=()
if [ "$nodes" = 3 ]; then also=(--also-url "http://127.0.0.1:${api[1]},http://127.0.0.1:${api[2]}"); fi
cargo bench --bench load -- --url "http://127.0.0.1:${api[0]}" "${also[@]}" \
  --admin-token "$token" --dir "$dir/driver" "$@"

for i in 0 1 2; do
  echo "## node $((i + 1)) cluster metrics"
  curl -fs -H "Authorization: Bearer $token" "http://127.0.0.1:${api[$i]}/metrics" \
    | grep -E '^auditmem_cluster_(publish_seconds_(sum|count|bucket)|publish_conflicts_total|unavailable_total)' || true
done
