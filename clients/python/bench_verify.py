"""Proof verification throughput of `auditmem.verify`, on one core (CPython runs the checks on
one thread): `python bench_verify.py PROOF.json VERIFIER_KEY [SECONDS]`, PROOF.json the answer
of `GET /v1/audit/logs/{id}/proof`. Prints inclusion proofs checked a second, whole (checkpoint
signature, record hash, leaf, entry, audit path) and without the checkpoint's signature (the
rows of an export's proofs share one checkpoint, checked once)."""

from __future__ import annotations

import base64
import json
import sys
import time

from auditmem import verify


def rate(f, secs: float) -> float:
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < secs:
        for _ in range(100):
            f()
        n += 100
    return n / elapsed


def main() -> None:
    proof = json.load(open(sys.argv[1]))
    proof = proof.get("data", proof)
    key, secs = sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    verify.inclusion_proof(proof, key)  # a proof that does not verify measures nothing
    root = base64.b64decode(proof["root_hash"])
    whole = rate(lambda: verify.inclusion_proof(proof, key), secs)
    rows = rate(lambda: verify._check_entry(proof, root), secs)
    print(
        f"tree size {proof['tree_size']}, audit path of {len(proof['inclusion'])} hashes: "
        f"{whole:,.0f} proofs/s whole, {rows:,.0f} proofs/s against a checkpoint checked once"
    )


if __name__ == "__main__":
    main()
