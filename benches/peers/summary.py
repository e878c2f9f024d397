"""Merges the peers' JSON outputs into one summary and prints it as tables.

    python summary.py OUT.json MACHINE.json [PEER=FILE.json ...]

MACHINE.json holds what run.sh recorded about the machine and the run; each PEER=FILE is one
peer's output (missing files are skipped, so a run of one peer keeps the others' last figures
out of the summary rather than mixing runs).
"""

import json
import os
import sys


def table(title, header, rows):
    print(f"\n## {title}")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "| " + " | ".join(str(x).rjust(w) for x, w in zip(r, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


def f(x, nd=2):
    return f"{x:,.{nd}f}"


def show_postgres(p):
    print(f"\nPostgreSQL {p.get('postgres_version')}, {p['entries']:,} entries seeded, page of "
          f"{p['page_size']}; synchronous_commit={p.get('synchronous_commit')}, "
          f"fsync={p.get('fsync')}, wal_sync_method={p.get('wal_sync_method')}")
    rows = [[r["mode"], r["clients"], f(r["entries_per_sec"], 0), f(r["requests_per_sec"], 0),
             f(r["p50_ms"]), f(r["p90_ms"]), f(r["p99_ms"]), f(r["max_ms"])]
            for r in p.get("ingest", [])]
    if rows:
        table("PostgreSQL ingest (INSERT of 100 rows per call, durable commit)",
              ["pgbench -M", "clients", "entries/s", "calls/s", "p50 ms", "p90 ms", "p99 ms",
               "max ms"], rows)
    rows = [[r["op"], r["clients"], f(r["requests_per_sec"], 0), f(r["p50_ms"]), f(r["p90_ms"]),
             f(r["p99_ms"]), f(r["max_ms"])] for r in p.get("list", [])]
    if rows:
        table("PostgreSQL list (first page + COUNT(*), one read-only snapshot)",
              ["variant", "clients", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms"], rows)
    for label, plan in p.get("list_plans", {}).items():
        print(f"  {label}: {plan[-1]}")


def show_faiss(x):
    print(f"\nfaiss {x['faiss_version']} ({x['faiss_compile_options'].strip()}), "
          f"IndexFlatIP {x['rows']:,} x {x['dim']}, {x['queries']} queries, top-{x['top_k']}; "
          f"vectors identical to benches/vectors.rs: {x['vectors_match_rust']}; "
          f"ids agreeing with a numpy exact scan: {x['ids_agreeing_with_numpy_exact']}")
    rows = [[t, r["samples"], f(r["mean_ms"]), f(r["p50_ms"]), f(r["p90_ms"]), f(r["p99_ms"]),
             f(r["max_ms"]), f(r["gb_per_s_at_p50"], 1)]
            for t, r in x["single_query_by_threads"].items()]
    table("FAISS exact top-5, one query per call",
          ["threads", "samples", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "GB/s @p50"],
          rows)
    print(f"  all 200 queries in one call: {x['batched_200_per_query_ms_best']:.2f} ms per query")


def show_st(x):
    print(f"\nsentence-transformers {x['sentence_transformers_version']}, torch "
          f"{x['torch_version']} ({x['torch_cpu_capability']}), transformers "
          f"{x['transformers_version']}; batch {x['batch']}, first sentence "
          f"{x['first_sentence']!r}, {x['padded_tokens_per_sentence_first_batch']} tokens "
          f"per sentence padded (first batch)")
    rows = [[r["threads"], f(r["secs"], 1), r["batches"], f(r["sentences_per_sec"], 1),
             f(r["batch_p50_ms"], 0), f(r["batch_p99_ms"], 0)] for r in x["runs"]]
    table("sentence-transformers all-MiniLM-L6-v2 on CPU, batches of 32",
          ["threads", "secs", "batches", "sentences/s", "batch p50 ms", "batch p99 ms"], rows)


SHOW = {"postgres": show_postgres, "faiss": show_faiss, "st": show_st}


def main():
    out, machine, *peers = sys.argv[1:]
    with open(machine) as fh:
        doc = json.load(fh)
    doc["peers"] = {}
    for arg in peers:
        name, path = arg.split("=", 1)
        if os.path.exists(path):
            with open(path) as fh:
                doc["peers"][name] = json.load(fh)
            load = path[: -len(".json")] + ".load"  # run.sh's load averages around the peer
            if os.path.exists(load):
                with open(load) as fh:
                    doc["peers"][name]["loadavg_before_after"] = fh.read().split("\n")[:2]
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=2)
    print(f"# Peers: {doc['date']}, {doc['cpu']} ({doc['cores']} cores), commit {doc['commit']}")
    print(f"load average before / after: {doc['loadavg_before']} / {doc.get('loadavg_after')}")
    for name, data in doc["peers"].items():
        SHOW[name](data)
        if "loadavg_before_after" in data:
            print(f"  load average (1/5/15 min) before / after: "
                  f"{' / '.join(data['loadavg_before_after'])}")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
