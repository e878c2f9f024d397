"""PostgreSQL peer of the load driver's `ingest` and `list` scenarios (benches/load/).

A throwaway PostgreSQL 15 cluster (Debian's package) on a loopback port, created under
target/peers/pg for each run and deleted after it (--keep leaves it):

- seed: 1,000,000 audit entries in one tenant, the driver's gateway entries (five actions,
  created_at spread over the 20 days before seeding), generated server-side by INSERT ...
  SELECT over generate_series in chunks (the fastest load path; it is not measured), then the
  indexes, VACUUM (ANALYZE) and a CHECKPOINT;
- list: the driver's four `GET /v1/audit/logs` variants (no filter, action, 7-day window ending
  3 days before now, both), each as the first page of the newest entries plus COUNT(*) of the
  matches, in one REPEATABLE READ READ ONLY transaction (the API's page and total come from one
  snapshot), at 1, 8 and 64 clients;
- ingest: 64 clients, each call one INSERT of 100 literal rows (like one admin ingestion body)
  into another tenant, committed durably (synchronous_commit = on, fsync = on).

The load comes from pgbench (C, 2 threads): a Python client would measure the GIL. Latencies
come from pgbench's per-transaction log; like the driver, only calls that start after the
warm-up and end before the measured window closes count. Prints one JSON object on stdout
(run.sh collects it); progress goes to stderr.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ACTIONS = ["gateway.chat", "gateway.embeddings", "rag.query", "gateway.completion",
           "gateway.chat.stream"]
DAY_US = 86_400_000_000
SEED_SPAN_DAYS = 20
# Fixed tenant ids, so a reused cluster is recognised.
LIST_TENANT = "0190aaaa-0000-7000-8000-000000000001"
INGEST_TENANT = "0190aaaa-0000-7000-8000-000000000002"
DB = "auditmem_peer"

# Why each setting: a durable, ordinary configuration sized like auditmem's own footprint (its
# RSS is 0.8-1.1 GiB with 1,000,000 entries), loopback TCP only, no socket file.
# jit = off: PG 15 JIT-compiles any plan costed over 100,000 (every COUNT(*) here), tens of ms of
# LLVM per query that OLTP setups turn off. max_wal_size: no forced checkpoint inside 20 s of
# ingestion. synchronous_commit and fsync are the defaults, spelled out because they are the
# point of the comparison (auditmem answers after flush + fdatasync).
SERVER_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
max_connections = 100
shared_buffers = 1GB
max_wal_size = 8GB
jit = off
synchronous_commit = on
fsync = on
logging_collector = off
"""

SCHEMA = """
CREATE TABLE audit_entries (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL,
    action text NOT NULL,
    model_id text,
    project_id text,
    gateway_id text,
    ip_address text,
    user_agent text,
    http_status integer NOT NULL,
    is_success boolean NOT NULL,
    is_cache_hit boolean NOT NULL DEFAULT false,
    error_code bigint,
    error_msg text,
    duration double precision,
    credits_consumed double precision NOT NULL DEFAULT 0,
    balance_consumed_usd double precision NOT NULL DEFAULT 0,
    tokens jsonb,
    metadata jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
"""

# After seeding: the primary key (auditmem looks entries up by id too) and the two indexes
# the issue names, built once over the loaded table rather than maintained row by row.
INDEXES = """
ALTER TABLE audit_entries ADD PRIMARY KEY (id);
CREATE INDEX audit_tenant_time ON audit_entries (tenant_id, created_at);
CREATE INDEX audit_tenant_action_time ON audit_entries (tenant_id, action, created_at);
"""

# The driver's gateway_entry(i) as SQL over i: same actions, models, projects, ips, statuses,
# durations, credits and tokens; created_at spread like seed_audit's.
SEED_CHUNK = """
INSERT INTO audit_entries (tenant_id, action, model_id, project_id, ip_address, user_agent,
    http_status, is_success, duration, credits_consumed, tokens, created_at)
SELECT '{tenant}', (ARRAY{actions})[i % 5 + 1],
    CASE WHEN i % 3 = 0 THEN 'gpt-4o-mini' ELSE 'claude-sonnet' END,
    'proj-' || (i % 17), '10.0.' || (i / 256 % 256) || '.' || (i % 256), 'gateway/1.4',
    CASE WHEN i % 50 = 0 THEN 429 ELSE 200 END, i % 50 <> 0,
    (i % 900) + 12.5,
    ((50 + i * 7919 % 2000) + (10 + i * 104729 % 800)) / 1000.0,
    jsonb_build_object('prompt_tokens', 50 + i * 7919 % 2000,
                       'completion_tokens', 10 + i * 104729 % 800,
                       'total_tokens', (50 + i * 7919 % 2000) + (10 + i * 104729 % 800)),
    to_timestamp(({now_us} - ({want} - i) * {step_us}) / 1e6)
FROM generate_series({start}::bigint, {end}::bigint - 1) AS i;
"""


def log(msg):
    print(f"[postgres] {msg}", file=sys.stderr, flush=True)


class Cluster:
    def __init__(self, bindir, datadir, port):
        self.bindir, self.datadir, self.port = bindir, os.path.abspath(datadir), port
        # initdb and postgres refuse to run as root: as root, run them as the postgres user.
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def bin(self, name):
        return os.path.join(self.bindir, name)

    def owner_run(self, *cmd, **kw):
        return subprocess.run(self.as_owner + list(cmd), check=True, **kw)

    def initdb(self):
        if os.path.exists(self.datadir):
            self.stop()  # a cluster left running by an interrupted run
            shutil.rmtree(self.datadir)
        os.makedirs(self.datadir)
        if self.as_owner:
            shutil.chown(self.datadir, "postgres", "postgres")
        # trust auth: the cluster listens on 127.0.0.1 only and lives for the benchmark.
        self.owner_run(self.bin("initdb"), "-D", self.datadir, "-U", "postgres", "--auth=trust",
                       "-E", "UTF8", "--locale=C", stdout=subprocess.DEVNULL)
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write(SERVER_CONF.format(port=self.port))

    def start(self):
        logfile = os.path.join(self.datadir, "server.log")
        self.owner_run(self.bin("pg_ctl"), "-D", self.datadir, "-l", logfile, "-w", "-t", "120",
                       "start", stdout=subprocess.DEVNULL)

    def stop(self):
        subprocess.run(self.as_owner + [self.bin("pg_ctl"), "-D", self.datadir, "-m", "fast",
                                        "-w", "stop"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def conn_args(self, db=DB):
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db]

    def psql(self, sql, db=DB):
        """Runs SQL, returns the unaligned output (last statement's rows)."""
        r = subprocess.run([self.bin("psql"), *self.conn_args(db), "-X", "-q", "-A", "-t",
                            "-v", "ON_ERROR_STOP=1", "-c", sql],
                           check=True, capture_output=True, text=True)
        return r.stdout.strip()


def seed(c, want):
    c.psql(f"CREATE DATABASE {DB}", db="postgres")
    c.psql(SCHEMA)
    now_us = int(time.time() * 1e6)
    step_us = SEED_SPAN_DAYS * DAY_US // max(want, 1)
    actions = "[" + ",".join(f"'{a}'" for a in ACTIONS) + "]"
    chunk = 100_000
    t0 = time.time()
    for start in range(0, want, chunk):
        end = min(start + chunk, want)
        c.psql(SEED_CHUNK.format(tenant=LIST_TENANT, actions=actions, now_us=now_us, want=want,
                                 step_us=step_us, start=start, end=end))
        rate = end / (time.time() - t0)
        log(f"seeded {end:,}/{want:,} entries ({rate:,.0f}/s)")
    log("building the primary key and the two indexes")
    c.psql(INDEXES)
    log("VACUUM (ANALYZE) and CHECKPOINT")
    c.psql("VACUUM (ANALYZE) audit_entries")
    c.psql("CHECKPOINT")
    log(f"seeded in {time.time() - t0:.0f} s")
    return time.time() - t0


def gateway_values(i):
    """One VALUES row of the driver's gateway_entry(tenant, i, None): the server dates it."""
    prompt = 50 + (i * 7919) % 2000
    completion = 10 + (i * 104_729) % 800
    status = 429 if i % 50 == 0 else 200
    tokens = json.dumps({"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion})
    model = "gpt-4o-mini" if i % 3 == 0 else "claude-sonnet"
    return (f"('{INGEST_TENANT}', '{ACTIONS[i % 5]}', '{model}', 'proj-{i % 17}', "
            f"'10.0.{i // 256 % 256}.{i % 256}', 'gateway/1.4', {status}, {str(status < 400).lower()}, "
            f"{(i % 900) + 12.5}, {(prompt + completion) / 1000.0}, '{tokens}')")


def ingest_script(batch):
    # Like the driver's first ingestion body (entries b * 1000 + i for b = 0); the server gives
    # each row its id (gen_random_uuid) and time (now()), as auditmem does whatever the body.
    rows = ",\n".join(gateway_values(i) for i in range(batch))
    return ("INSERT INTO audit_entries (tenant_id, action, model_id, project_id, ip_address, "
            "user_agent, http_status, is_success, duration, credits_consumed, tokens) VALUES\n"
            + rows + ";\n")


LIST_VARIANTS = [
    ("audit list", False, False),
    ("audit list ?action", True, False),
    ("audit list ?start_time&end_time", False, True),
    ("audit list ?action&start_time&end_time", True, True),
]


def list_script(action, window, page_size):
    where = f"tenant_id = '{LIST_TENANT}'"
    head = ""
    if action:
        # The driver asks for ACTIONS[n % 3]: one of the first three, in turn.
        head = "\\set a random(1, 3)\n"
        where += " AND action = (ARRAY['gateway.chat', 'gateway.embeddings', 'rag.query'])[:a]"
    if window:
        where += " AND created_at >= to_timestamp(:start_s) AND created_at <= to_timestamp(:end_s)"
    return (head
            + "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n"
            + f"SELECT * FROM audit_entries WHERE {where} ORDER BY created_at DESC LIMIT {page_size};\n"
            + f"SELECT count(*) FROM audit_entries WHERE {where};\n"
            + "COMMIT;\n")


def literal(sql, defines):
    """A list statement with its pgbench variables replaced by values (action 1 of 3)."""
    for d in defines:
        name, value = d.split("=", 1)
        sql = sql.replace(f":{name}", value)
    return sql.replace("[:a]", "[1]").rstrip(";")


def pct(sorted_ms, p):
    # The driver's nearest-rank percentile: the ceil(n * p)-th smallest.
    import math
    if not sorted_ms:
        return 0.0
    i = min(max(math.ceil(len(sorted_ms) * p), 1), len(sorted_ms)) - 1
    return sorted_ms[i]


def pgbench(c, tmp, name, scripts, clients, warmup, secs, mode, defines=()):
    """Runs pgbench with the given {label: sql} scripts (equal weights) and returns one result
    per label, computed from the per-transaction log like the driver's run_workers."""
    files = []
    for k, (label, sql) in enumerate(scripts):
        path = os.path.join(tmp, f"{name}-{k}.sql")
        with open(path, "w") as f:
            f.write(sql)
        files += ["-f", f"{path}@1"]
    prefix = os.path.join(tmp, name)
    threads = min(2, clients)
    cmd = [c.bin("pgbench"), *c.conn_args(), "-n", "-c", str(clients), "-j", str(threads),
           "-T", str(warmup + secs + 1), "-M", mode, "--log", f"--log-prefix={prefix}", *files]
    for d in defines:
        cmd += ["-D", d]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pgbench failed: {r.stderr[-2000:]}")
    tx = []  # (script, start_s, end_s, latency_ms)
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                p = line.split()
                lat_us, script = int(p[2]), int(p[3])
                end = int(p[4]) + int(p[5]) / 1e6
                tx.append((script, end - lat_us / 1e6, end, lat_us / 1e3))
        os.remove(path)
    if not tx:
        raise RuntimeError(f"pgbench logged no transaction: {r.stderr[-2000:]}")
    first = min(t[1] for t in tx)
    lo, hi = first + warmup, first + warmup + secs
    def summary(label, keep):
        ms = sorted(t[3] for t in tx if keep(t[0]) and t[1] >= lo and t[2] <= hi)
        return {"op": label, "clients": clients, "requests": len(ms),
                "requests_per_sec": len(ms) / secs,
                "p50_ms": pct(ms, 0.5), "p90_ms": pct(ms, 0.9), "p99_ms": pct(ms, 0.99),
                "max_ms": ms[-1] if ms else 0.0}

    out = [summary(label, lambda s, k=k: s == k) for k, (label, _) in enumerate(scripts)]
    if len(scripts) > 1:  # the scenario as a whole, as the docs quote req/s per concurrency
        out.append(summary("all variants", lambda s: True))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", default=os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--datadir", default="target/peers/pg")
    ap.add_argument("--port", type=int, default=54329)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--secs", type=int, default=20, help="measured seconds per run")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--list-clients", default="1,8,64")
    ap.add_argument("--ingest-clients", type=int, default=64)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--page-size", type=int, default=50,
                    help="the API's default page, which the driver's list requests get")
    ap.add_argument("--modes", default="simple,prepared",
                    help="pgbench query modes for ingestion (simple: the 100 rows parsed per call)")
    ap.add_argument("--keep", action="store_true",
                    help="leave the cluster's data dir behind (it is deleted by default)")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: list,ingest")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    c = Cluster(args.bindir, args.datadir, args.port)
    result = {"entries": args.entries, "page_size": args.page_size, "server_conf":
              [l for l in SERVER_CONF.strip().splitlines() if "port" not in l]}
    # A new cluster every run (seeding takes well under a minute): every run starts alike.
    log(f"initdb {args.datadir}")
    c.initdb()
    c.start()
    try:
        result["seed_secs"] = seed(c, args.entries)
        result["postgres_version"] = c.psql("SHOW server_version")
        result["pgbench_version"] = subprocess.run([c.bin("pgbench"), "--version"],
                                                   capture_output=True, text=True).stdout.strip()
        result["table_bytes_before"] = int(c.psql("SELECT pg_total_relation_size('audit_entries')"))

        with tempfile.TemporaryDirectory(prefix="peers-pgbench-") as tmp:
            if "list" not in skip:
                # The driver's window: ends 3 days before the run starts, spans 7 days.
                end_s = time.time() - 3 * 86_400
                defines = [f"start_s={end_s - 7 * 86_400:.6f}", f"end_s={end_s:.6f}"]
                scripts = [(label, list_script(a, w, args.page_size))
                           for label, a, w in LIST_VARIANTS]
                # The plans (with literal values for the variables) and the totals, so the
                # report shows the indexes at work and the row counts each COUNT(*) walks.
                result["list_plans"] = {}
                for label, sql in scripts:
                    sel = [literal(q, defines) for q in sql.splitlines() if q.startswith("SELECT")]
                    result["list_plans"][label] = [
                        c.psql("EXPLAIN (COSTS OFF) " + q).replace("\n", " | ") for q in sel]
                    result["list_plans"][label].append("total = " + c.psql(sel[1]))
                result["list"] = []
                for n in [int(x) for x in args.list_clients.split(",")]:
                    log(f"list, {n} client(s), {args.warmup}+{args.secs} s")
                    # -M prepared: the action and the window are bound parameters of
                    # statements parsed once per connection, as an application's driver does.
                    result["list"] += pgbench(c, tmp, f"list{n}", scripts, n, args.warmup,
                                              args.secs, "prepared", defines)
            if "ingest" not in skip:
                result["ingest"] = []
                for mode in args.modes.split(","):
                    log(f"ingest, {args.ingest_clients} clients, batches of {args.batch}, "
                        f"-M {mode}, {args.warmup}+{args.secs} s")
                    r = pgbench(c, tmp, f"ingest-{mode}", [("ingest", ingest_script(args.batch))],
                                args.ingest_clients, args.warmup, args.secs, mode)[0]
                    r["mode"] = mode
                    r["entries_per_sec"] = r["requests_per_sec"] * args.batch
                    result["ingest"].append(r)
        result["table_bytes_after"] = int(c.psql("SELECT pg_total_relation_size('audit_entries')"))
        result["synchronous_commit"] = c.psql("SHOW synchronous_commit")
        result["fsync"] = c.psql("SHOW fsync")
        result["wal_sync_method"] = c.psql("SHOW wal_sync_method")
        result["data_dir_bytes"] = int(subprocess.run(["du", "-sb", c.datadir], capture_output=True,
                                                      text=True).stdout.split()[0])
    finally:
        c.stop()
        if not args.keep:
            shutil.rmtree(c.datadir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
