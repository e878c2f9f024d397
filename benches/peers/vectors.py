"""The vectors and queries of benches/vectors.rs, re-generated bit for bit in numpy.

benches/vectors.rs draws every value from one 64-bit LCG seeded with 42:

    x = x * 6364136223846793005 + 1442695040888963407   (mod 2**64)
    value = (x >> 40) as f32 / 2**24 - 0.5

384 values make a vector, normalised by the f32 square root of the f32 sum of squares taken
left to right. It draws the 100,000 stored rows first, then the one query criterion times, then
the 200 queries whose percentiles and recall it prints. Everything there is exact in f32 except
the sum, and Rust sums sequentially (no reassociation without fast-math), so numpy reproduces it
exactly when it sums sequentially too: `np.add.accumulate` (cumsum) does, `np.sum` (pairwise)
does not. The 38.5M LCG states are computed by doubling (the state k steps on is an affine map
of today's, composed with itself), so the whole thing takes a second, not minutes of Python.

`python vectors.py --check` prints a checksum of the rows' and of the queries' f32 bits (the sum
of bits(v_i) * (i + 1) mod 2**64 over the values in order: any changed bit or moved value shows)
and compares it with the one printed by a standalone copy of the Rust generator (the values in
CHECK below were taken that way, on 2026-11-23).
"""

import sys

import numpy as np

N = 100_000
DIM = 384
QUERIES = 200
SEED = 42
MUL = 6364136223846793005
INC = 1442695040888963407
MASK = (1 << 64) - 1

# Checksums printed by the Rust copy of the generator: rows = the 100,000 stored vectors;
# queries = criterion's query, then the 200 timed queries.
CHECK = {"rows": "f9d13314b6de6cf4", "queries": "56cc2b3ee82aa45a"}


def lcg_states(seed: int, count: int) -> np.ndarray:
    """States x_1 .. x_count of the LCG started at `seed` (x_0), as uint64."""
    s = np.array([(seed * MUL + INC) & MASK], dtype=np.uint64)
    a, c = MUL, INC  # the affine map of len(s) steps: x -> a*x + c
    while len(s) < count:
        # The next len(s) states are the current ones moved len(s) steps on.
        nxt = s * np.uint64(a) + np.uint64(c)  # uint64 arithmetic wraps mod 2**64
        s = np.concatenate([s, nxt])
        a, c = (a * a) & MASK, (a * c + c) & MASK
    return s[:count]


def unit_vectors(states: np.ndarray) -> np.ndarray:
    v = (states >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24) - np.float32(0.5)
    v = v.reshape(-1, DIM)
    norm = np.sqrt(np.cumsum(v * v, axis=1, dtype=np.float32)[:, -1])
    return v / norm[:, None]


def generate():
    """(rows [N, DIM], criterion_query [DIM], queries [QUERIES, DIM]), float32, as in Rust."""
    allv = unit_vectors(lcg_states(SEED, (N + 1 + QUERIES) * DIM))
    return allv[:N], allv[N], allv[N + 1 :]


def checksum(a: np.ndarray) -> str:
    bits = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    weights = np.arange(1, len(bits) + 1, dtype=np.uint64)
    return f"{int(np.sum(bits * weights, dtype=np.uint64)):016x}"  # wraps mod 2**64


def check() -> bool:
    rows, q, queries = generate()
    got = {"rows": checksum(rows), "queries": checksum(np.vstack([q[None, :], queries]))}
    print(f"rows checksum {got['rows']} (Rust {CHECK['rows']}), "
          f"queries checksum {got['queries']} (Rust {CHECK['queries']})", file=sys.stderr)
    return got == CHECK


if __name__ == "__main__":
    if "--check" in sys.argv:
        sys.exit(0 if check() else 1)
    rows, q, queries = generate()
    print(rows.shape, queries.shape, rows[0, :3])
