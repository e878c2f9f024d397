#!/usr/bin/env bash
# Schemathesis against a live auditmem (issue 6): no 5xx, every response matches the OpenAPI
# document the server serves at /openapi.json, every status is one the document lists.
#
# Builds the server, starts it on a throwaway data dir on a loopback port, creates a tenant
# (business plan: every audit route is allowed) and a key with every permission through the
# admin API, runs Schemathesis with the key on /v1 and the admin token on /admin/v1 (each
# operation gets the credential of its own security scheme, see schemathesis.toml), prints the
# summary and stops the server. Not part of CI: it takes minutes and needs PyPI.
#
# Env:
#   ST_MAX_EXAMPLES     test cases per operation and phase (default 75)
#   ST_SEED             Schemathesis seed (default: random; the summary prints the one used)
#   ST_SKIP_BUILD=1     use the binary already at target/schemathesis/auditmem
#   ST_EXTRA_ARGS       more arguments for `st run` (e.g. "--include-path-regex ^/v1/memories")
#   AUDITMEM_MODEL_DIR  the MiniLM model (default models/all-MiniLM-L6-v2; `bash .ci/setup`)
#   CARGO_TARGET_DIR    honoured by the build
#
# Exit status: Schemathesis's (0 when no check failed).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
HERE=tests/schemathesis
WORK=target/schemathesis
SCHEMATHESIS_VERSION=4.32.5
MAX_EXAMPLES="${ST_MAX_EXAMPLES:-75}"

log() { echo "[schemathesis] $*" >&2; }

mkdir -p "$WORK"

# 1. Schemathesis in a venv of its own (target/ is ignored by git).
if ! "$WORK/venv/bin/st" --version 2>/dev/null | grep -q " $SCHEMATHESIS_VERSION\$"; then
  log "installing schemathesis $SCHEMATHESIS_VERSION into $WORK/venv"
  python3 -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

# 2. The server binary. Copied out of the target dir because another build sharing that dir
#    may overwrite target/debug/auditmem while the run is going.
BIN="$WORK/auditmem"
if [[ "${ST_SKIP_BUILD:-0}" != 1 ]]; then
  log "building"
  cargo build --quiet --bin auditmem
  cp "${CARGO_TARGET_DIR:-target}/debug/auditmem" "$BIN"
fi
[[ -x "$BIN" ]] || { log "no binary at $BIN (unset ST_SKIP_BUILD)"; exit 2; }

MODEL_DIR="${AUDITMEM_MODEL_DIR:-models/all-MiniLM-L6-v2}"
[[ -f "$MODEL_DIR/model.safetensors" ]] || { log "no model in $MODEL_DIR: run bash .ci/setup"; exit 2; }

# 3. A server on a throwaway data dir; keys and checkpoints beside it, not inside it.
TMP=$(mktemp -d)
SERVER_PID=
stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || log "the server exited with status $?"
  fi
  rm -rf "$TMP"
}
trap stop_server EXIT

ADMIN_TOKEN="st-admin-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
AUDITMEM_ADMIN_TOKEN="$ADMIN_TOKEN" AUDITMEM_LOG="${AUDITMEM_LOG:-warn}" \
  "$BIN" serve --data-dir "$TMP/data" --listen 127.0.0.1:0 \
  --signing-key "$TMP/keys/signing.key" --checkpoints-file "$TMP/keys/checkpoints.ndjson" \
  --model-dir "$MODEL_DIR" >"$TMP/stdout" 2>"$WORK/server.log" &
SERVER_PID=$!

URL=
for _ in $(seq 1 600); do
  URL=$(sed -n 's/^auditmem listening on //p' "$TMP/stdout" | head -1)
  [[ -n "$URL" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { log "the server exited; see $WORK/server.log"; exit 2; }
  sleep 0.1
done
[[ -n "$URL" ]] || { log "the server did not start in 60 s"; exit 2; }
log "server at $URL (log: $WORK/server.log)"

# 4. A tenant and a key with every permission. Credits enough that extraction never runs out
#    (402 is documented, but a run that spends them all stops exercising extraction).
admin() { curl -sS --fail-with-body -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' "$@"; }
json_get() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
TENANT=$(admin -X POST "$URL/admin/v1/tenants" \
  -d '{"name":"schemathesis","plan":"business","credits":1000000000}' | json_get '["data"]["id"]')
API_KEY=$(admin -X POST "$URL/admin/v1/tenants/$TENANT/keys" \
  -d '{"permissions":["audit.read","audit.export","memory.read","memory.write"]}' | json_get '["data"]["api_key"]')

# 5. The run. The credentials reach schemathesis.toml through the environment.
SEED_ARGS=()
[[ -n "${ST_SEED:-}" ]] && SEED_ARGS=(--seed "$ST_SEED")
log "st run: $MAX_EXAMPLES examples per operation"
set +e
# shellcheck disable=SC2086 # ST_EXTRA_ARGS is a list of words on purpose
ST_API_KEY="$API_KEY" ST_ADMIN_TOKEN="$ADMIN_TOKEN" \
  "$WORK/venv/bin/st" --config-file "$HERE/schemathesis.toml" run "$URL/openapi.json" \
  --max-examples "$MAX_EXAMPLES" "${SEED_ARGS[@]}" \
  --report junit --report-dir "$WORK/report" \
  ${ST_EXTRA_ARGS:-}
STATUS=$?
set -e

# A 5xx that escaped the checks (or a crash) would show in the server's log.
if grep -q "internal error\|panicked" "$WORK/server.log"; then
  log "the server logged internal errors or panics: see $WORK/server.log"
  [[ $STATUS -eq 0 ]] && STATUS=1
fi
exit $STATUS
