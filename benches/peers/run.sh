#!/usr/bin/env bash
# Side-by-side peers of auditmem's benches (issue 5), run by hand, not in CI:
#
#   bash benches/peers/run.sh                    # all three
#   bash benches/peers/run.sh postgres faiss st  # any subset, in that order
#
# postgres  PostgreSQL 15 (Debian's package) on a throwaway loopback cluster: the load
#           driver's `ingest` (64 clients, 100 entries per durable INSERT) and `list` (the
#           four variants, first page + COUNT(*), 1,000,000 entries, at 1/8/64 clients).
#           pg_bench.py; ~2.5 min (seeding ~15 s, then 6 timed runs of 2+20 s).
# faiss     faiss-cpu IndexFlatIP over benches/vectors.rs's 100,000 x 384 vectors and its 200
#           queries, regenerated bit for bit in numpy (vectors.py explains how; gen_check.rs is
#           the Rust side of that check). faiss_bench.py; ~1.5 min.
# st        sentence-transformers (torch, CPU) on the load driver's `embed` sentences,
#           batches of 32, 1 thread and all threads. st_bench.py; ~1 min, plus a one-time
#           ~5.5 GB install of torch (see requirements-st.txt).
#
# Installs what it needs: postgresql-15 through apt (as root) when missing, a venv with the
# pinned requirements-*.txt under target/peers/venv (never into the repo or the system
# Python), the model through .ci/setup when missing. Writes each peer's JSON to
# target/peers/<peer>.json, the merged summary to target/peers/peers.json, and tables to stdout.
#
# Extra arguments per peer through the environment, e.g.
#   PG_ARGS="--secs 10 --list-clients 1 --fresh" FAISS_ARGS="--passes 2" ST_ARGS="--secs 10"
# (see each script's --help). Run it on an otherwise idle machine: these peers, like
# auditmem's benches, use both cores, and a compile beside them halves the figures.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."  # the repo root: every path below is relative to it
OUT=target/peers
VENV=$OUT/venv
PEERS_DIR=benches/peers
mkdir -p "$OUT"
# faiss_bench.py imports vectors.py from benches/peers: leave no __pycache__ in the repo.
export PYTHONDONTWRITEBYTECODE=1

peers=("$@")
[[ ${#peers[@]} -gt 0 ]] || peers=(postgres faiss st)
for p in "${peers[@]}"; do
  case $p in
    postgres | faiss | st) ;;
    *) echo "unknown peer '$p' (postgres, faiss, st)" >&2; exit 2 ;;
  esac
done

log() { echo "[peers] $*" >&2; }

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  log "apt-get install $*"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
  PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
  if [[ ! -x $PG_BINDIR/postgres || ! -x $PG_BINDIR/pgbench ]]; then
    # postgresql-15 brings the server, initdb, pg_ctl, psql and pgbench. Its postinst may
    # create a `main` cluster on 5432; the benchmark never uses it (it runs its own cluster).
    apt_install postgresql-15
  fi
  export PG_BINDIR
}

ensure_venv() {  # ensure_venv REQUIREMENTS-FILE
  if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$VENV"; }
  fi
  # pip is quick when everything is already there; the first torch install takes minutes.
  local t0=$SECONDS
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$1"
  log "venv ready for $(basename "$1") in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1) in $VENV)"
}

run_peer() {  # run_peer NAME TIMEOUT_SECS COMMAND...
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  log "running $name (at most ${limit} s)"
  # The load average around each peer goes into the summary: these figures are only as good
  # as the machine was quiet.
  cut -d' ' -f1-3 /proc/loadavg > "$OUT/$name.load"
  # JSON on stdout into the file, progress on stderr to the terminal.
  timeout "$limit" "$@" > "$OUT/$name.json.tmp"
  mv "$OUT/$name.json.tmp" "$OUT/$name.json"
  cut -d' ' -f1-3 /proc/loadavg >> "$OUT/$name.load"
  log "$name done in $((SECONDS - t0)) s"
}

machine=$OUT/machine.json
python3 - "$machine" <<'EOF'
import json, os, subprocess, sys, datetime
cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True,
           text=True).stdout.splitlines() if l.startswith("Model name")), "")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "cpu": cpu, "cores": os.cpu_count(), "commit": commit,
           "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
           "loadavg_before": open("/proc/loadavg").read().split()[:3]}, open(sys.argv[1], "w"))
EOF

args=()
for p in "${peers[@]}"; do
  case $p in
    postgres)
      ensure_postgres
      # pg_bench.py needs only the standard library; the system python3 runs it.
      # shellcheck disable=SC2086  # PG_ARGS is a list of words on purpose
      run_peer postgres 2400 python3 "$PEERS_DIR/pg_bench.py" --bindir "$PG_BINDIR" ${PG_ARGS:-}
      ;;
    faiss)
      ensure_venv "$PEERS_DIR/requirements-faiss.txt"
      # shellcheck disable=SC2086
      run_peer faiss 900 "$VENV/bin/python" "$PEERS_DIR/faiss_bench.py" ${FAISS_ARGS:-}
      ;;
    st)
      [[ -s models/all-MiniLM-L6-v2/model.safetensors ]] || bash .ci/setup
      ensure_venv "$PEERS_DIR/requirements-st.txt"
      # shellcheck disable=SC2086
      run_peer st 900 "$VENV/bin/python" "$PEERS_DIR/st_bench.py" ${ST_ARGS:-}
      ;;
  esac
  args+=("$p=$OUT/$p.json")
done

python3 - "$machine" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
json.dump(m, open(sys.argv[1], "w"))
EOF
python3 "$PEERS_DIR/summary.py" "$OUT/peers.json" "$machine" "${args[@]}"
