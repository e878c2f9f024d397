"""sentence-transformers peer of the load driver's `embed` scenario: all-MiniLM-L6-v2 on CPU,
batches of 32 of the sentences `embed` (and `create`) send, for a fixed time, at 1 thread and
at all threads.

The model is the repo's own copy (models/all-MiniLM-L6-v2: config.json, tokenizer.json,
model.safetensors, from `bash .ci/setup`); there is no Hugging Face hub here, so the
SentenceTransformer is assembled from local modules the way the published model is configured
(Transformer with max_seq_length 256, mean pooling, L2 normalisation). transformers wants a
tokenizer_config.json beside tokenizer.json, so the files are linked into a temp dir with a
minimal one (uncased BERT, as the published model's).

Prints one JSON object on stdout (run.sh collects it); progress goes to stderr.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import sentence_transformers
import transformers
from sentence_transformers import SentenceTransformer

try:  # the modules' home since sentence-transformers 6; `models` is its deprecated alias
    from sentence_transformers.sentence_transformer import modules as models
except ImportError:
    from sentence_transformers import models

MODEL_FILES = ("config.json", "tokenizer.json", "model.safetensors")

WHO = ["The user", "Our customer", "The team lead", "The on-call engineer", "The analyst",
       "The project owner", "The designer", "The support agent"]
WHAT = ["prefers concise answers with code examples", "works mostly with Rust and PostgreSQL",
        "wants weekly summaries of open incidents", "is based in Berlin and works in CET",
        "deploys to Kubernetes on Fridays only after review",
        "asked to never include personal data in reports", "uses dark mode and a large font",
        "is allergic to peanuts and avoids them at lunch",
        "tracks sprint velocity in a spreadsheet", "needs invoices in EUR with VAT shown",
        "reviews pull requests every morning", "likes hiking in the Alps on weekends"]
WHEN = ["since last spring", "for project {}", "according to ticket {}", "as noted in meeting {}",
        "per the onboarding form {}", "as of release {}"]


def memory_text(i: int) -> str:
    """benches/load/seed.rs's memory_text(i), line for line."""
    when = WHEN[i // 96 % 6].replace("{}", str(i // 576))
    return f"{WHO[i % 8]} {WHAT[i // 8 % 12]} {when}."


def embed_sentence(seeded: int, j: int) -> str:
    """The j-th sentence of the `embed` scenario on a dir holding `seeded` memories."""
    return f"{memory_text(seeded + j)} (load {j})"


def load_model(model_dir: str, tmp: str) -> SentenceTransformer:
    for f in MODEL_FILES:
        src = os.path.join(model_dir, f)
        if not os.path.isfile(src):
            sys.exit(f"{src} missing: run `bash .ci/setup` first")
        os.symlink(os.path.abspath(src), os.path.join(tmp, f))
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": True,
                   "model_max_length": 512}, fh)
    word = models.Transformer(tmp, max_seq_length=256)
    dim = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
    pool = models.Pooling(dim(), pooling_mode="mean")
    return SentenceTransformer(modules=[word, pool, models.Normalize()], device="cpu")


def pct(sorted_ms, p):
    i = min(max(int(np.ceil(len(sorted_ms) * p)), 1), len(sorted_ms)) - 1
    return float(sorted_ms[i])


def measure(model, threads: int, secs: float, batch: int, seeded: int) -> dict:
    torch.set_num_threads(threads)
    j = 0

    def next_batch():
        nonlocal j
        b = [embed_sentence(seeded, k) for k in range(j, j + batch)]
        j += batch
        return b

    for _ in range(2):  # warm-up: allocator, oneDNN primitives
        model.encode(next_batch(), batch_size=batch)
    ms, sentences = [], 0
    start = time.perf_counter()
    until = start + secs
    while time.perf_counter() < until:
        b = next_batch()  # built outside the timed call, as the driver does
        t0 = time.perf_counter()
        model.encode(b, batch_size=batch, convert_to_numpy=True)
        ms.append((time.perf_counter() - t0) * 1e3)
        sentences += len(b)
    elapsed = time.perf_counter() - start
    ms.sort()
    return {
        "threads": threads,
        "secs": elapsed,
        "batches": len(ms),
        "sentences_per_sec": sentences / elapsed,
        "batch_p50_ms": pct(ms, 0.50),
        "batch_p99_ms": pct(ms, 0.99),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--secs", type=float, default=20.0, help="measured seconds per thread count")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seeded", type=int, default=0,
                    help="memories in the load dir: the driver's sentences start at that index")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="peers-minilm-") as tmp:
        model = load_model(args.model_dir, tmp)
        # A sanity check that this is the model auditmem runs: unit vectors of 384, and a
        # paraphrase closer than an unrelated sentence.
        e = model.encode(["The user is allergic to peanuts", "Peanuts make the user ill",
                          "Deploys happen on Fridays"])
        sanity = {"dim": int(e.shape[1]), "norm": float(np.linalg.norm(e[0])),
                  "cos_paraphrase": float(e[0] @ e[1]), "cos_unrelated": float(e[0] @ e[2])}
        first = [embed_sentence(args.seeded, k) for k in range(args.batch)]
        tokens = (getattr(model, "preprocess", None) or model.tokenize)(first)
        runs = []
        for t in sorted({1, os.cpu_count() or 1}):
            r = measure(model, t, args.secs, args.batch, args.seeded)
            print(f"[st] {t} thread(s): {r['sentences_per_sec']:.1f} sentences/s, "
                  f"batch p50 {r['batch_p50_ms']:.0f} ms", file=sys.stderr)
            runs.append(r)
    print(json.dumps({
        "torch_version": torch.__version__,
        "sentence_transformers_version": sentence_transformers.__version__,
        "transformers_version": transformers.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "batch": args.batch,
        "first_sentence": embed_sentence(args.seeded, 0),
        "padded_tokens_per_sentence_first_batch": int(tokens["input_ids"].shape[1]),
        "sanity": sanity,
        "runs": runs,
    }))


if __name__ == "__main__":
    main()
