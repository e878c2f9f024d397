"""FAISS peer of `cargo bench --bench vectors`: exact top-5 with IndexFlatIP over the same
100,000 x 384 normalised f32 vectors and the same 200 queries (regenerated bit for bit by
vectors.py), one query per call, timed per query like the Rust bench's percentile pass.

Prints one JSON object on stdout (run.sh collects it); progress goes to stderr.
"""

import argparse
import json
import sys
import time

import faiss
import numpy as np

import vectors


def pct(sorted_ms, p):
    # The same nearest-rank percentile as the Rust benches: ceil(n * p)-th smallest.
    i = min(max(int(np.ceil(len(sorted_ms) * p)), 1), len(sorted_ms)) - 1
    return float(sorted_ms[i])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=5, help="passes over the 200 queries per thread count")
    ap.add_argument("--threads", default="1,2", help="OpenMP thread counts to measure")
    args = ap.parse_args()

    t0 = time.perf_counter()
    rows, _, queries = vectors.generate()
    if not vectors.check():
        sys.exit("the regenerated vectors differ from benches/vectors.rs (see vectors.py)")
    print(f"[faiss] vectors generated and checked in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    index = faiss.IndexFlatIP(vectors.DIM)
    index.add(rows)

    # Exactness: FAISS's ids against a plain numpy scan (ties aside, they must agree).
    want = np.argsort(-(queries @ rows.T), axis=1)[:, :5]
    _, got = index.search(queries, 5)
    agree = int(sum(len(set(a) & set(b)) for a, b in zip(want, got)))

    single = {}
    for t in [int(x) for x in args.threads.split(",")]:
        faiss.omp_set_num_threads(t)
        for q in queries[:20]:  # warm-up: caches, OpenMP pool
            index.search(q[None, :], 5)
        ms = []
        for _ in range(args.passes):
            for q in queries:
                q1 = q[None, :]
                s = time.perf_counter()
                index.search(q1, 5)
                ms.append((time.perf_counter() - s) * 1e3)
        ms.sort()
        single[str(t)] = {
            "samples": len(ms),
            "mean_ms": float(np.mean(ms)),
            "p50_ms": pct(ms, 0.50),
            "p90_ms": pct(ms, 0.90),
            "p99_ms": pct(ms, 0.99),
            "max_ms": float(ms[-1]),
            "gb_per_s_at_p50": rows.nbytes / (pct(ms, 0.50) / 1e3) / 1e9,
        }
        print(f"[faiss] {t} thread(s): p50 {single[str(t)]['p50_ms']:.2f} ms, "
              f"p99 {single[str(t)]['p99_ms']:.2f} ms", file=sys.stderr)

    # Not what auditmem does (one query per request), but what FAISS is built for: all 200
    # queries in one call (a BLAS matrix product), per query.
    faiss.omp_set_num_threads(max(int(x) for x in args.threads.split(",")))
    batch = []
    for _ in range(3):
        s = time.perf_counter()
        index.search(queries, 5)
        batch.append((time.perf_counter() - s) * 1e3 / len(queries))

    print(json.dumps({
        "faiss_version": faiss.__version__,
        "numpy_version": np.__version__,
        "faiss_compile_options": faiss.get_compile_options(),
        "omp_max_threads": faiss.omp_get_max_threads(),
        "rows": int(index.ntotal),
        "dim": vectors.DIM,
        "queries": len(queries),
        "top_k": 5,
        "vectors_match_rust": True,
        "ids_agreeing_with_numpy_exact": f"{agree}/{want.size}",
        "single_query_by_threads": single,
        "batched_200_per_query_ms_best": min(batch),
    }))


if __name__ == "__main__":
    main()
