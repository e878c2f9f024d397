"""Offline verification against the service's real outputs and tampered copies of them: each
tamper kind is refused with the message `auditmem verify` prints for it (the CLI is run on the
same files where its message names no file)."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from auditmem import Client, VerificationError, verify

from .conftest import ORIGIN, WITNESS_NAME, Server, binary

WITNESS_LINE = f"\n\u2014 {WITNESS_NAME} "


@dataclass
class Outputs:
    proof: dict[str, Any]
    """An entry's proof whose checkpoint the witness cosigned."""
    receipt: dict[str, Any]
    old_note: str
    new_note: str
    consistency: dict[str, Any]
    export: bytes
    manifest: dict[str, Any]
    export_proofs: str


def cosigned_note(server: Server) -> str:
    """Signs a checkpoint now and waits (polling) until the witness's cosignature is on it."""
    r = server.admin("POST", "/admin/v1/log/checkpoint")
    assert r.status_code == 200, r.text
    size = r.json()["data"]["seq"]
    deadline = time.monotonic() + 60
    while True:
        note = httpx.get(server.url + "/log/checkpoint").text
        if note.split("\n")[1] == str(size) and WITNESS_LINE in note:
            return note
        assert time.monotonic() < deadline, f"never cosigned: {note}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def outputs(server: Server) -> Outputs:
    _, key = server.new_tenant("business")
    with Client(server.url, key) as c:
        c.create_memory("Carol is allergic to peanuts", "fact", user_id="carol")
        c.create_memory("Carol lives in Oslo", "fact", user_id="dave")
        entry = next(iter(c.audit_logs(action="memory.write")))
        old_note = cosigned_note(server)
        receipt = c.erase(user_id="carol").model_dump(mode="json", exclude_none=True)
        new_note = cosigned_note(server)
        size = int(new_note.split("\n")[1])
        proof = c.get_proof(str(entry.id), tree_size=size)
        assert proof["checkpoint"] == new_note
        consistency = c.get_consistency(int(old_note.split("\n")[1]), size)
        export = c.create_export(format="csv")
        c.wait_export(export.export_id)
        return Outputs(
            proof,
            receipt,
            old_note,
            new_note,
            consistency,
            c.download_export(export.export_id),
            c.get_export_manifest(export.export_id),
            c.get_export_proofs(export.export_id),
        )


def cli(*args: str) -> tuple[int, str]:
    r = subprocess.run([binary(), "verify", *args], capture_output=True, text=True)
    return r.returncode, r.stdout.strip()


def failure(f) -> VerificationError:
    with pytest.raises(VerificationError) as e:
        f()
    return e.value


def other_key() -> str:
    """A verifier key of the log's origin that is not the log's key."""
    raw = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    return verify.log_verifier_key(raw.hex(), ORIGIN + "\n")


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def flip_hash(h: str) -> str:
    raw = bytearray(base64.b64decode(h))
    raw[0] ^= 1
    return b64(bytes(raw))


def with_record(p: dict[str, Any], change) -> dict[str, Any]:
    rec = msgpack.unpackb(base64.b64decode(p["record"]), raw=False)
    change(rec)
    return {**p, "record": b64(msgpack.packb(rec, use_bin_type=True))}


def test_real_outputs_verify(server: Server, outputs: Outputs) -> None:
    ok = verify.inclusion_proof(outputs.proof, server.log_key, [server.witness_key], 1)
    size = int(outputs.new_note.split("\n")[1])
    assert (ok.seq, ok.tree_size, ok.origin, ok.witnesses) == (
        outputs.proof["seq"],
        size,
        ORIGIN,
        [WITNESS_NAME],
    )
    assert ok.message == (
        f"audit entry {outputs.proof['audit_id']} is record {ok.seq} (leaf {ok.seq - 1}) of "
        f"the tree of size {size} signed by {ORIGIN}; cosigned by {WITNESS_NAME}"
    )
    # The hex public key works as a pin too, as with `verify --pubkey`.
    assert verify.inclusion_proof(outputs.proof, server.public_key).seq == ok.seq
    r = verify.erasure_receipt(outputs.receipt, server.log_key)
    assert (r.seq, r.message.split(" is record")[0]) == (
        outputs.receipt["seq"],
        f"erasure {outputs.receipt['erasure_id']}",
    )
    assert verify.inclusion_proof(outputs.receipt["proof"], server.log_key).seq == r.seq
    cp = verify.open_checkpoint(
        outputs.new_note, server.log_key, [server.witness_key], 1
    )
    assert (cp.size, cp.witnesses) == (size, [WITNESS_NAME])
    assert verify.consistency_proof(
        outputs.old_note, outputs.new_note, outputs.consistency, server.log_key
    ) == (
        f"the tree of size {outputs.consistency['from']} is a prefix of the tree of size "
        f"{size}, both signed by {ORIGIN}"
    )
    assert verify.export_proofs(
        outputs.export_proofs, server.log_key, outputs.export
    ).startswith(
        f"{outputs.manifest['records']} rows of export {outputs.manifest['export_id']}, the rows"
    )
    assert verify.export_manifest(
        outputs.export, outputs.manifest, server.public_key
    ).rows == (outputs.manifest["records"])


def inclusion_tampers(
    o: Outputs, log_key: str
) -> dict[str, tuple[dict[str, Any], str, str]]:
    """kind -> (tampered proof, the pinned key, the message's start)."""
    p = o.proof
    lines = p["checkpoint"].split("\n")
    forged_size = "\n".join([lines[0], str(int(lines[1]) + 1), *lines[2:]])
    other_seq = with_record(p, lambda r: None)  # re-encoded, unchanged: still valid
    assert other_seq["record"]
    return {
        "bad_signature": (
            {**p, "checkpoint": forged_size},
            log_key,
            f"bad signature: the checkpoint's signature by {ORIGIN} does not verify",
        ),
        "not_signed": (
            p,
            other_key(),
            "the checkpoint is not signed by the pinned key",
        ),
        "checkpoint_mismatch": (
            {**p, "root_hash": flip_hash(p["root_hash"])},
            log_key,
            f"wrong root: the checkpoint signs tree size {p['tree_size']} with root {p['root_hash']}",
        ),
        "record_tampered": (
            with_record(p, lambda r: r.__setitem__(1, r[1] + 1)),
            log_key,
            "the record does not match its hash: its bytes hash to ",
        ),
        "leaf_mismatch": (
            {**p, "record_hash": "00" * 32},
            log_key,
            f"the leaf does not match its record: the proof names record hash {'00' * 32}, the record's is {p['record_hash']}",
        ),
        "wrong_place": (
            {**p, "seq": p["seq"] + 1, "leaf_index": p["leaf_index"] + 1},
            log_key,
            f"the record is seq {p['seq']}, the proof says seq {p['seq'] + 1} (leaf {p['leaf_index'] + 1})",
        ),
        "wrong_entry": (
            {**p, "audit_id": "01a21e64-3c19-72ac-aee9-bf8c8e2583ec"},
            log_key,
            f"the record holds audit entry {p['audit_id']}, not 01a21e64-3c19-72ac-aee9-bf8c8e2583ec",
        ),
        "inclusion_fails": (
            {**p, "inclusion": [flip_hash(p["inclusion"][0]), *p["inclusion"][1:]]},
            log_key,
            f"wrong root: the inclusion path from leaf {p['leaf_index']} does not lead to the root of tree size {p['tree_size']}",
        ),
        "no_checkpoint": (
            {k: v for k, v in p.items() if k != "checkpoint"},
            log_key,
            "the proof carries no signed checkpoint to check its root against",
        ),
    }


KINDS = [
    "bad_signature",
    "not_signed",
    "checkpoint_mismatch",
    "record_tampered",
    "leaf_mismatch",
    "wrong_place",
    "wrong_entry",
    "inclusion_fails",
    "no_checkpoint",
]


@pytest.mark.parametrize("kind", KINDS)
def test_each_inclusion_tamper_is_named_as_the_cli_names_it(
    kind: str, server: Server, outputs: Outputs, tmp_path: Path
) -> None:
    proof, key, start = inclusion_tampers(outputs, server.log_key)[kind]
    e = failure(lambda: verify.inclusion_proof(proof, key))
    assert e.kind == kind
    assert str(e).startswith(start), str(e)
    f = tmp_path / "proof.json"
    f.write_text(json.dumps(proof))
    assert cli("--proof", str(f), "--pubkey", key) == (1, f"FAILED: {e}")


def test_witness_cosignatures(server: Server, outputs: Outputs, tmp_path: Path) -> None:
    p = outputs.proof
    note = p["checkpoint"]
    bare = note[: note.index(WITNESS_LINE) + 1]
    line = note[note.index(WITNESS_LINE) + 1 :].rstrip("\n")
    name, sig = line.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(sig))
    raw[-1] ^= 1
    cases = {
        "missing_cosignatures": (
            {**p, "checkpoint": bare},
            "missing cosignatures: 0 valid witness cosignature(s), 1 required",
        ),
        "bad_cosignature": (
            {**p, "checkpoint": bare + f"{name} {b64(bytes(raw))}\n"},
            f"bad cosignature: the cosignature by {WITNESS_NAME} does not verify",
        ),
    }
    for kind, (proof, message) in cases.items():
        e = failure(
            lambda: verify.inclusion_proof(
                proof, server.log_key, [server.witness_key], 1
            )
        )
        assert (e.kind, str(e)) == (kind, message)
        f = tmp_path / f"{kind}.json"
        f.write_text(json.dumps(proof))
        assert cli(
            "--proof",
            str(f),
            "--pubkey",
            server.log_key,
            "--witness-key",
            server.witness_key,
            "--witnesses",
            "1",
        ) == (1, f"FAILED: {message}")
    # Without a quorum asked for, the log's signature alone is enough.
    assert (
        verify.inclusion_proof(
            cases["missing_cosignatures"][0], server.log_key
        ).witnesses
        == []
    )


def test_erasure_receipt_tampers(server: Server, outputs: Outputs) -> None:
    r = outputs.receipt
    wrong = copy.deepcopy(r)
    wrong["proof"]["erasure_id"] = "01a21e64-3c19-72ac-aee9-bf8c8e2583ec"
    e = failure(lambda: verify.erasure_receipt(wrong, server.log_key))
    assert (e.kind, str(e)) == (
        "wrong_erasure",
        f"the record holds erasure {r['erasure_id']}, not erasure 01a21e64-3c19-72ac-aee9-bf8c8e2583ec",
    )
    # An entry's proof passed off as an erasure's.
    as_erasure = {**outputs.proof, "erasure_id": r["erasure_id"]}
    as_erasure.pop("audit_id")
    e = failure(lambda: verify.erasure_receipt(as_erasure, server.log_key))
    assert (
        str(e)
        == f"the record holds a AuditRecorded event, not erasure {r['erasure_id']}"
    )
    tampered = copy.deepcopy(r)
    tampered["proof"] = with_record(
        r["proof"], lambda rec: rec.__setitem__(1, rec[1] - 1)
    )
    assert (
        failure(lambda: verify.erasure_receipt(tampered, server.log_key)).kind
        == "record_tampered"
    )


def test_consistency_tampers(server: Server, outputs: Outputs, tmp_path: Path) -> None:
    c = outputs.consistency
    assert c["proof"], "the sizes were chosen to need a proof"
    bad = {**c, "proof": [flip_hash(c["proof"][0]), *c["proof"][1:]]}
    message = (
        f"inconsistent checkpoints: the tree of size {c['from']} is not a prefix of the tree of "
        f"size {c['to']} (the consistency proof fails)"
    )
    e = failure(
        lambda: verify.consistency_proof(
            outputs.old_note, outputs.new_note, bad, server.log_key
        )
    )
    assert (e.kind, str(e)) == ("inconsistent", message)
    files = {n: tmp_path / n for n in ("old.note", "new.note", "c.json")}
    files["old.note"].write_text(outputs.old_note)
    files["new.note"].write_text(outputs.new_note)
    files["c.json"].write_text(json.dumps(bad))
    assert cli(
        "--consistency",
        str(files["old.note"]),
        str(files["new.note"]),
        "--consistency-proof",
        str(files["c.json"]),
        "--pubkey",
        server.log_key,
    ) == (1, f"FAILED: {message}")
    # Newer first: a larger tree is no prefix of a smaller one.
    e = failure(
        lambda: verify.consistency_proof(
            outputs.new_note, outputs.old_note, c, server.log_key
        )
    )
    assert e.kind == "inconsistent"
    e = failure(
        lambda: verify.consistency_proof(
            outputs.old_note, outputs.new_note, c, other_key()
        )
    )
    assert e.kind == "not_signed"


def test_export_proofs_tampers(server: Server, outputs: Outputs) -> None:
    head, *rows = outputs.export_proofs.strip().split("\n")
    first = json.loads(rows[0])
    tampered = with_record(first, lambda r: r.__setitem__(1, r[1] + 1))
    text = "\n".join([head, json.dumps(tampered), *rows[1:]])
    e = failure(lambda: verify.export_proofs(text, server.log_key))
    assert e.kind == "record_tampered"
    assert str(e).startswith(
        f"row 1 (audit entry {first['audit_id']}): the record does not match its hash: "
    )
    fewer = "\n".join([head, *rows[1:]])
    e = failure(lambda: verify.export_proofs(fewer, server.log_key))
    h = json.loads(head)
    assert str(e) == (
        f"the proofs are not the export file's rows: the head says {h['rows']} rows, "
        f"{h['rows'] - 1} proofs follow"
    )
    # The file's rows in another order than the proofs'.
    header, *lines = outputs.export.decode().split("\n")
    swapped = "\n".join([header, lines[1], lines[0], *lines[2:]]).encode()
    ids = [json.loads(r)["audit_id"] for r in rows]
    e = failure(
        lambda: verify.export_proofs(outputs.export_proofs, server.log_key, swapped)
    )
    assert str(e) == (
        f"the proofs are not the export file's rows: row 1 of the export is {ids[1]}, "
        f"its proof is for {ids[0]}"
    )


def test_export_manifest_tampers(server: Server, outputs: Outputs) -> None:
    data, m = outputs.export, outputs.manifest
    rows = verify.parse_export_rows(data)
    assert len(rows) >= 3

    def kinds(
        file: bytes, manifest: dict[str, Any], pubkey: str | None = server.public_key
    ) -> dict[str, str]:
        e = failure(lambda: verify.export_manifest(file, manifest, pubkey))
        assert e.kind == e.failures[0].kind
        assert str(e) == str(e.failures[0])
        return {f.kind: str(f) for f in e.failures}

    def csv_of(rs: list[dict[str, Any]]) -> bytes:
        import csv
        import io

        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        header = list(rs[0].keys()) if rs else data.decode().split("\n")[0].split(",")
        w.writerow(header)
        for r in rs:
            w.writerow(
                [
                    (
                        ""
                        if r[k] is None
                        else (json.dumps(r[k]) if not isinstance(r[k], str) else r[k])
                    )
                    for k in header
                ]
            )
        return out.getvalue().encode()

    # The manifest changed: its signature breaks.
    k = kinds(data, {**m, "records": m["records"] + 1})
    assert (
        k["bad_signature"]
        == "file: bad signature: the manifest's signature: signature does not verify"
    )
    # Signed by the service, but not by the pinned key.
    k = kinds(
        data, m, Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex()
    )
    assert list(k) == ["bad_signature"]
    assert "not by the key given with --pubkey: refused" in k["bad_signature"]
    # A row's content changed: the digest and the row's hash.
    changed = [dict(r) for r in rows]
    changed[1]["http_status"] = 500
    k = kinds(csv_of(changed), m)
    assert k["digest_mismatch"].startswith(
        "file: file digest differs from the manifest: the file's blake3 is "
    )
    assert (
        k["hash_mismatch"]
        == "row 2: modified record (hash mismatch): the row's contents do not match its hash"
    )
    # The last row cut.
    k = kinds(csv_of(rows[:-1]), m)
    assert k["row_count_mismatch"] == (
        f"file: row count differs from the manifest: the file has {len(rows) - 1} rows; the manifest states {len(rows)}"
    )
    assert k["rows_missing_at_end"].startswith(
        f"row {len(rows) - 1}: rows missing at the end: the file ends at chain position "
    )
    # The first row cut.
    k = kinds(csv_of(rows[1:]), m)
    assert k["rows_missing_at_start"].startswith(
        "row 1: rows missing at the start: the file starts at chain position 2"
    )
    # A middle row cut: the chain has a hole.
    k = kinds(csv_of([rows[0], *rows[2:]]), m)
    assert (
        k["missing"]
        == "row 2: deleted record (missing seq): chain position 2 is missing before this row"
    )
    # A middle row cut and the rest renumbered with the chain recomputed: only the manifest sees it.
    renumbered, prev = [], bytes(32)
    for i, r in enumerate([rows[0], *rows[2:]], start=1):
        r = {**r, "chain_index": i, "prev_hash": prev.hex()}
        fields = {
            x: y for x, y in r.items() if x not in ("chain_index", "prev_hash", "hash")
        }
        prev = verify.chain_hash(prev, fields)
        renumbered.append({**r, "hash": prev.hex()})
    k = kinds(csv_of(renumbered), m)
    assert "hash_mismatch" not in k and "missing" not in k
    assert k["renumbered"].startswith(
        f"row {len(rows) - 1}: rows removed and the rest renumbered: the manifest's last row "
    )
    # Rows swapped.
    k = kinds(csv_of([rows[1], rows[0], *rows[2:]]), m)
    assert (
        k["out_of_order"]
        == "row 2: reordered record (out of order): chain position 1 comes after position 2"
    )
