"""A quiet tenant's webhook in a busy log: how long its next event takes to find and send.

    python3 benches/webhook_lookup.py SERVER-BINARY BUSY-RECORDS [PORT]
    e.g. python3 benches/webhook_lookup.py target/release/auditmem 300000

Starts the server on a fresh data dir, and a receiver (tests/python/webhook_receiver.py). A
quiet tenant's endpoint (`memory.created`) is created and disabled; a busy tenant ingests
BUSY-RECORDS audit entries; the quiet tenant creates a memory; the endpoint is enabled. Its
cursor is where it was created, so its lookup has every busy record past it. Prints, as one
JSON line, the seconds from enabling to the receiver logging the event (this includes up to
0.25 s of the worker's supervisor noticing the endpoint), then the same for a second memory
with nothing between. docs/PERFORMANCE.md ("Webhooks") quotes its runs.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(sys.argv[1])
N = int(sys.argv[2])
PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 18471
URL = f"http://127.0.0.1:{PORT}"
TOKEN = "load-admin-token-2c41e9f07a3d5b86"


def call(method, path, key, body=None):
    req = urllib.request.Request(
        URL + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"null")


def received(log):
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    d = tempfile.mkdtemp(prefix="webhook-lookup-")
    log = os.path.join(d, "received.jsonl")
    open(log, "w").close()
    recv = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/python/webhook_receiver.py"), log],
        stdout=subprocess.PIPE,
        text=True,
    )
    rport = int(recv.stdout.readline())
    env = dict(os.environ, AUDITMEM_ADMIN_TOKEN=TOKEN, AUDITMEM_LOG="warn")
    srv = subprocess.Popen(
        [BIN, "serve", "--data-dir", f"{d}/data", "--listen", f"127.0.0.1:{PORT}",
         "--signing-key", f"{d}/signing.key", "--checkpoints-file", f"{d}/checkpoints.ndjson",
         "--webhooks-allow-private-targets"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(f"{d}/server.err", "w"),
    )
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(URL + "/healthz", timeout=2)
                break
            except OSError:
                time.sleep(1)
        tenant = lambda: call("POST", "/admin/v1/tenants", TOKEN,
                              {"name": "t", "plan": "pro", "credits": 100})["data"]["id"]
        quiet, busy = tenant(), tenant()
        key = call("POST", f"/admin/v1/tenants/{quiet}/keys", TOKEN,
                   {"permissions": ["webhooks.manage", "memory.write"]})["data"]["api_key"]
        hook = call("POST", "/v1/webhooks", key, {"url": f"http://127.0.0.1:{rport}/ok/q",
                    "event_types": ["memory.created"]})["data"]["id"]
        call("PATCH", f"/v1/webhooks/{hook}", key, {"enabled": False})
        for i in range(0, N, 1000):
            entries = [{"tenant_id": busy, "action": "gateway.chat", "http_status": 200}
                       for _ in range(min(1000, N - i))]
            call("POST", "/admin/v1/audit/logs", TOKEN, {"entries": entries})
        memory = {"content": "a quiet fact", "memory_type": "fact", "user_id": "u1"}
        call("POST", "/v1/memories", key, memory)
        head = call("GET", "/healthz", TOKEN)["data"]["head_seq"]
        start = time.time()
        call("PATCH", f"/v1/webhooks/{hook}", key, {"enabled": True})
        while not received(log):
            if time.time() - start > 600:
                raise SystemExit("no delivery in 600 s")
            time.sleep(0.005)
        backlog = received(log)[0]["at"] - start
        call("POST", "/v1/memories", key, dict(memory, content="another quiet fact"))
        start = time.time()
        while len(received(log)) < 2:
            time.sleep(0.005)
        following = received(log)[1]["at"] - start
        print(json.dumps({"head": head, "backlog_delivery_s": round(backlog, 3),
                          "next_delivery_s": round(max(following, 0), 3)}))
    finally:
        srv.terminate()
        srv.wait()
        recv.kill()
        recv.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
