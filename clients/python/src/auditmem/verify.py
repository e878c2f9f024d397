"""Offline verification of what the service hands out, without calling it: inclusion proofs,
erasure receipts, consistency proofs, C2SP checkpoints and witness cosignatures, export
proofs and export manifests.

A port of `auditmem verify`'s checks (docs/VERIFYING.md), in the same order. Each failure
raises `VerificationError` whose message is the one `auditmem verify` prints after `FAILED:`
("bad signature: ...", "the record does not match its hash: ...", "wrong root: ...") and
whose `kind` names the failure for programs. Names follow Go's sumdb/tlog and the C2SP specs:
tree size, record hash, checkpoint, cosignature.

Formats:
- a checkpoint is a C2SP signed note (`<origin>\\n<size>\\n<base64 root>\\n`, a blank line, then
  `— <key name> <base64(key ID || signature)>` lines), the log's signature Ed25519 (type 0x01)
  and each witness's a `cosignature/v1` (type 0x04) over `cosignature/v1\\ntime <T>\\n<text>`;
- a record is the msgpack array `[seq, ts_micros, prev, hash, event]` with
  `hash = blake3("auditmem/log/v1" || prev || seq (8 BE) || ts_micros (8 BE) || event)`;
- a leaf is `seq (8 BE) || record hash`, hashed as RFC 6962 (`SHA-256(0x00 || leaf)`, nodes
  `SHA-256(0x01 || left || right)`).
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import json
import math
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import blake3
import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import VerificationError

RECORD_DOMAIN = b"auditmem/log/v1"
ALG_ED25519 = 0x01
COSIGNATURE_V1 = 0x04
MANIFEST_VERSION = "auditmem/export-manifest/v1"
_SIG_PREFIX = "\u2014 "


def _fail(kind: str, message: str) -> VerificationError:
    return VerificationError(message, kind)


def _malformed(why: str) -> VerificationError:
    return _fail("malformed", f"the proof file is malformed: {why}")


# Keys and notes.


@dataclass(frozen=True)
class _Verifier:
    name: str
    key_id: int
    alg: int
    key: Ed25519PublicKey

    def verify(self, text: bytes, sig: bytes) -> bool:
        if self.alg == ALG_ED25519:
            msg, raw = text, sig
        else:
            if len(sig) != 8 + 64:
                return False
            (t,) = struct.unpack(">Q", sig[:8])
            if t > 2**63 - 1:
                return False
            msg, raw = b"cosignature/v1\ntime %d\n" % t + text, sig[8:]
        try:
            self.key.verify(raw, msg)
            return True
        except InvalidSignature:
            return False


def _key_id(name: str, encoded: bytes) -> int:
    (kid,) = struct.unpack(
        ">I", hashlib.sha256(name.encode() + b"\n" + encoded).digest()[:4]
    )
    return kid


def _name_is_valid(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def parse_verifier_key(vkey: str, alg: int = ALG_ED25519) -> _Verifier:
    """A signed-note verifier key `<name>+<key ID hex>+<base64(type || public key)>`, of the
    log (type 0x01) or of a witness (`alg=COSIGNATURE_V1`)."""
    parts = vkey.strip().split("+", 2)
    what = "log key" if alg == ALG_ED25519 else "witness key"
    if len(parts) != 3 or not _name_is_valid(parts[0]) or len(parts[1]) != 8:
        raise _fail("bad_key", f"bad key: {what} {vkey!r}: malformed verifier key")
    name, id_hex, b64 = parts
    try:
        kid = int(id_hex, 16)
        encoded = base64.b64decode(b64, validate=True)
    except (ValueError, binascii.Error):
        raise _fail(
            "bad_key", f"bad key: {what} {vkey!r}: malformed verifier key"
        ) from None
    if len(encoded) != 33 or encoded[0] != alg:
        raise _fail(
            "bad_key", f"bad key: {what} {vkey!r}: not a key of type {alg:#04x}"
        )
    if _key_id(name, encoded) != kid:
        raise _fail("bad_key", f"bad key: {what} {vkey!r}: the key ID does not match")
    return _Verifier(name, kid, alg, Ed25519PublicKey.from_public_bytes(encoded[1:]))


def log_verifier_key(pubkey: str, note: str) -> str:
    """`pubkey` as `auditmem verify --pubkey` takes it: a verifier key as given, or a hex
    Ed25519 public key, named by the note's origin (its first line)."""
    key = pubkey.strip()
    if len(key) == 64 and all(c in "0123456789abcdefABCDEF" for c in key):
        origin = note.split("\n", 1)[0]
        encoded = bytes([ALG_ED25519]) + bytes.fromhex(key)
        return f"{origin}+{_key_id(origin, encoded):08x}+{base64.b64encode(encoded).decode()}"
    return key


@dataclass(frozen=True)
class _Sig:
    name: str
    key_id: int
    sig: bytes
    line: str


def _split_note(note: bytes) -> tuple[bytes, list[_Sig]]:
    def bad(why: str) -> VerificationError:
        return _fail(
            "malformed", f"the checkpoint is not a well-formed signed note: {why}"
        )

    try:
        note.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not UTF-8") from None
    split = note.rfind(b"\n\n")
    if split < 0:
        raise bad("malformed note")
    text, sigs = note[: split + 1], note[split + 2 :]
    if not sigs or not sigs.endswith(b"\n"):
        raise bad("malformed note")
    out = []
    for line in sigs[:-1].decode().split("\n"):
        if not line.startswith(_SIG_PREFIX):
            raise bad("malformed note")
        name, _, b64 = line[len(_SIG_PREFIX) :].partition(" ")
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error:
            raise bad("malformed note") from None
        if not _name_is_valid(name) or len(raw) < 5:
            raise bad("malformed note")
        out.append(_Sig(name, struct.unpack(">I", raw[:4])[0], raw[4:], line))
    return text, out


def _verified_by(
    text: bytes, sigs: list[_Sig], known: list[_Verifier]
) -> list[str] | None:
    """The names of `known` whose signatures verify (None when none of them signed); raises on
    a signature by a known key that does not verify, as Go's `note.Open` does."""
    by_key = {(v.name, v.key_id): v for v in known}
    seen: set[tuple[str, int]] = set()
    names: list[str] = []
    for s in sigs:
        v = by_key.get((s.name, s.key_id))
        if v is None or (s.name, s.key_id) in seen:
            continue
        seen.add((s.name, s.key_id))
        if not v.verify(text, s.sig):
            raise _BadSig(s.name)
        names.append(s.name)
    return names or None


class _BadSig(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint whose log signature (and the cosignatures asked for) verified."""

    origin: str
    size: int
    root: bytes
    witnesses: list[str] = field(default_factory=list)
    """The names of the witnesses whose cosignatures verified, sorted."""


def _parse_checkpoint(text: bytes) -> tuple[str, int, bytes]:
    def bad() -> VerificationError:
        return _fail(
            "malformed",
            "the checkpoint is not a well-formed signed note: malformed checkpoint",
        )

    lines = text.decode().split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise bad()
    origin, size_s, root_s = lines[0], lines[1], lines[2]
    if not origin or not size_s.isdigit() or (size_s != "0" and size_s.startswith("0")):
        raise bad()
    try:
        root = base64.b64decode(root_s, validate=True)
    except binascii.Error:
        raise bad() from None
    if len(root) != 32:
        raise bad()
    return origin, int(size_s), root


def open_checkpoint(
    note: str | bytes,
    log_key: str,
    witness_keys: Iterable[str] = (),
    quorum: int = 0,
) -> Checkpoint:
    """Opens a checkpoint note: it must be signed by `log_key` (a verifier key, or a hex public
    key under the note's origin) and, with `quorum` > 0, cosigned by at least `quorum` of
    `witness_keys` (witness verifier keys, `auditmem witness pubkey`)."""
    raw = note.encode() if isinstance(note, str) else note
    witnesses = [parse_verifier_key(k, COSIGNATURE_V1) for k in witness_keys]
    if quorum > len(witnesses):
        raise ValueError(
            f"quorum {quorum} asks for more cosignatures than the {len(witnesses)} witness keys given"
        )
    vkey = log_verifier_key(log_key, raw.decode("utf-8", "replace"))
    verifier = parse_verifier_key(vkey)
    text, sigs = _split_note(raw)
    try:
        signed = _verified_by(text, sigs, [verifier])
    except _BadSig as e:
        raise _fail(
            "bad_signature",
            f"bad signature: the checkpoint's signature by {e.name} does not verify",
        ) from None
    if signed is None:
        raise _fail(
            "not_signed",
            f"the checkpoint is not signed by the pinned key {vkey} (signed by another key?)",
        )
    origin, size, root = _parse_checkpoint(text)
    if origin != verifier.name:
        raise _fail(
            "wrong_origin",
            f"the checkpoint's origin {origin!r} is not the log key's name {verifier.name!r}",
        )
    cosigners: list[str] = []
    if witnesses:
        try:
            cosigners = sorted(set(_verified_by(text, sigs, witnesses) or []))
        except _BadSig as e:
            raise _fail(
                "bad_cosignature",
                f"bad cosignature: the cosignature by {e.name} does not verify",
            ) from None
    if len(cosigners) < quorum:
        raise _fail(
            "missing_cosignatures",
            f"missing cosignatures: {len(cosigners)} valid witness cosignature(s), {quorum} required",
        )
    return Checkpoint(origin, size, root, cosigners)


# The Merkle tree (RFC 6962 / RFC 9162).


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def leaf_hash(seq: int, record_hash: bytes) -> bytes:
    """The tree's leaf of record `seq`: `SHA-256(0x00 || seq (8 BE) || record hash)`."""
    return hashlib.sha256(b"\x00" + struct.pack(">Q", seq) + record_hash).digest()


def root_from_inclusion(
    index: int, size: int, leaf: bytes, path: list[bytes]
) -> bytes | None:
    """The root the audit path `path` leads to from leaf `index` of a tree of `size` leaves
    (RFC 9162, 2.1.3.2), or None when the path cannot be one of that tree."""
    if index >= size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def consistent(
    old_size: int, old_root: bytes, new_size: int, new_root: bytes, proof: list[bytes]
) -> bool:
    """Whether `proof` shows the tree of `old_size` leaves (`old_root`) to be a prefix of the
    tree of `new_size` (`new_root`) (RFC 9162, 2.1.4.2)."""
    if old_size > new_size:
        return False
    if old_size == 0:
        return not proof
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = _node(c, fr), _node(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = _node(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0


# Records and the proofs of them.


def record_hash(prev: bytes, seq: int, ts_micros: int, event: bytes) -> bytes:
    return blake3.blake3(
        RECORD_DOMAIN
        + prev
        + struct.pack(">Q", seq)
        + struct.pack(">q", ts_micros)
        + event
    ).digest()


def _hash(b64: str, what: str) -> bytes:
    try:
        h = base64.b64decode(b64.strip(), validate=True)
    except (binascii.Error, AttributeError) as e:
        raise _malformed(f"{what} is not base64: {e}") from None
    if len(h) != 32:
        raise _malformed(f"{what} is not 32 bytes")
    return h


def _uuid(v: Any) -> str | None:
    if isinstance(v, bytes) and len(v) == 16:
        return str(uuid.UUID(bytes=v))
    if isinstance(v, str):
        try:
            return str(uuid.UUID(v))
        except ValueError:
            return None
    return None


def _event(event: bytes) -> tuple[str, Any]:
    """The event's kind and payload: `[version, {Kind: payload}]`."""
    try:
        v = msgpack.unpackb(event, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types for bad input
        raise _malformed(f"record's event: {e}") from None
    if (
        not isinstance(v, list)
        or len(v) != 2
        or not isinstance(v[1], dict)
        or len(v[1]) != 1
    ):
        raise _malformed("record's event: not an event")
    ((kind, payload),) = v[1].items()
    return str(kind), payload


def _field(payload: Any, index: int, name: str) -> Any:
    """A field of an event payload, written as an array (v2) or a map of names (v1)."""
    if isinstance(payload, list):
        return payload[index] if len(payload) > index else None
    if isinstance(payload, dict):
        return payload.get(name)
    return None


def _audit_id_of(event: bytes) -> str | None:
    kind, payload = _event(event)
    if kind != "AuditRecorded":
        return None
    entry = _field(payload, 1, "entry")
    return _uuid(_field(entry, 0, "id"))


@dataclass(frozen=True)
class Included:
    """What a checked inclusion proof established."""

    seq: int
    tree_size: int
    origin: str
    witnesses: list[str]
    message: str
    """The line `auditmem verify` prints after `OK:`."""


def _check_leaf(p: Mapping[str, Any], root: bytes, event_is: Any) -> int:
    try:
        raw = base64.b64decode(str(p["record"]).strip(), validate=True)
    except binascii.Error as e:
        raise _malformed(f"record is not base64: {e}") from None
    try:
        r = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        seq, ts, prev, stored, event = r
        if not (
            isinstance(seq, int)
            and isinstance(ts, int)
            and all(isinstance(b, bytes) for b in (prev, stored, event))
        ):
            raise ValueError("not a record")
    except Exception as e:  # msgpack raises several types for bad input
        raise _malformed(f"record does not decode: {e}") from None
    computed = record_hash(prev, seq, ts, event)
    if stored != computed:
        raise _fail(
            "record_tampered",
            f"the record does not match its hash: its bytes hash to {computed.hex()}, it names {stored.hex()}",
        )
    claimed = str(p["record_hash"])
    if claimed.strip().lower() != computed.hex():
        raise _fail(
            "leaf_mismatch",
            f"the leaf does not match its record: the proof names record hash {claimed}, the record's is {computed.hex()}",
        )
    if seq != p["seq"] or p["leaf_index"] + 1 != seq:
        raise _fail(
            "wrong_place",
            f"the record is seq {seq}, the proof says seq {p['seq']} (leaf {p['leaf_index']})",
        )
    event_is(event)
    path = [_hash(h, f"inclusion hash {i}") for i, h in enumerate(p["inclusion"])]
    if (
        root_from_inclusion(
            p["leaf_index"], p["tree_size"], leaf_hash(seq, computed), path
        )
        != root
    ):
        raise _fail(
            "inclusion_fails",
            f"wrong root: the inclusion path from leaf {p['leaf_index']} does not lead to the root of tree size {p['tree_size']}",
        )
    return seq


def _check_entry(p: Mapping[str, Any], root: bytes) -> int:
    claimed = str(p["audit_id"])

    def event_is(event: bytes) -> None:
        found = _audit_id_of(event)
        if found != claimed:
            raise _fail(
                "wrong_entry",
                f"the record holds audit entry {found or 'no audit entry'}, not {claimed}",
            )

    return _check_leaf(p, root, event_is)


def _open_for(
    p: Mapping[str, Any], log_key: str, witness_keys: Iterable[str], quorum: int
) -> tuple[Checkpoint, bytes]:
    root = _hash(str(p["root_hash"]), "root_hash")
    note = p.get("checkpoint")
    if not note:
        raise _fail(
            "no_checkpoint",
            "the proof carries no signed checkpoint to check its root against",
        )
    cp = open_checkpoint(note, log_key, witness_keys, quorum)
    if cp.size != p["tree_size"] or cp.root != root:
        raise _fail(
            "checkpoint_mismatch",
            f"wrong root: the checkpoint signs tree size {cp.size} with root {base64.b64encode(cp.root).decode()}, the proof is for size {p['tree_size']} with root {p['root_hash']}",
        )
    return cp, root


def _as_dict(doc: Any) -> dict[str, Any]:
    """A proof as the API answered it: a dict, JSON text or bytes, a pydantic model, with or
    without its envelope."""
    if hasattr(doc, "model_dump"):
        doc = doc.model_dump(mode="json", exclude_none=True)
    if isinstance(doc, (str, bytes)):
        doc = json.loads(doc)
    if not isinstance(doc, dict):
        raise _malformed("not a JSON object")
    if isinstance(doc.get("data"), dict):
        doc = doc["data"]
    return doc


def _described(what: str, seq: int, size: int, cp: Checkpoint) -> str:
    cosigned = f"; cosigned by {', '.join(cp.witnesses)}" if cp.witnesses else ""
    return (
        f"{what} is record {seq} (leaf {seq - 1}) of the tree of size {size} "
        f"signed by {cp.origin}{cosigned}"
    )


def inclusion_proof(
    proof: Any, log_key: str, witness_keys: Iterable[str] = (), quorum: int = 0
) -> Included:
    """Checks `GET /v1/audit/logs/{id}/proof`'s answer, as `auditmem verify --proof`: the
    checkpoint's signature (and `quorum` witnesses), that it signs the proof's size and root,
    the record against its hash, the leaf, the record's place, the audit id, the path.
    """
    p = _as_dict(proof)
    if "erasure_id" in p or isinstance(p.get("proof"), dict):
        return erasure_receipt(p, log_key, witness_keys, quorum)
    try:
        cp, root = _open_for(p, log_key, witness_keys, quorum)
        seq = _check_entry(p, root)
    except KeyError as e:
        raise _malformed(f"missing field {e}") from None
    return Included(
        seq,
        cp.size,
        cp.origin,
        cp.witnesses,
        _described(f"audit entry {p['audit_id']}", seq, cp.size, cp),
    )


def erasure_receipt(
    receipt: Any, log_key: str, witness_keys: Iterable[str] = (), quorum: int = 0
) -> Included:
    """Checks an erasure receipt (`POST /v1/erasures`), or its `proof` alone: as an inclusion
    proof, the record holding the `SubjectsErased` event of `erasure_id`."""
    p = _as_dict(receipt)
    if isinstance(p.get("proof"), dict) and "erasure_id" in p["proof"]:
        p = p["proof"]
    claimed = str(p.get("erasure_id"))

    def event_is(event: bytes) -> None:
        kind, payload = _event(event)
        if kind != "SubjectsErased":
            found = f"a {kind} event"
        else:
            eid = _uuid(_field(payload, 0, "erasure_id"))
            if eid == claimed:
                return
            found = f"erasure {eid}"
        raise _fail("wrong_erasure", f"the record holds {found}, not erasure {claimed}")

    try:
        cp, root = _open_for(p, log_key, witness_keys, quorum)
        seq = _check_leaf(p, root, event_is)
    except KeyError as e:
        raise _malformed(f"missing field {e}") from None
    return Included(
        seq,
        cp.size,
        cp.origin,
        cp.witnesses,
        _described(f"erasure {claimed}", seq, cp.size, cp),
    )


def consistency_proof(
    old_note: str | bytes, new_note: str | bytes, proof: Any, log_key: str
) -> str:
    """Checks that the checkpoint `new_note` extends `old_note` by `proof` (the answer of
    `GET /v1/audit/consistency?from=OLD&to=NEW`), as `auditmem verify --consistency`; both
    notes must be signed by `log_key`. Returns the `OK:` line."""
    p = _as_dict(proof)
    new_text = new_note.decode() if isinstance(new_note, bytes) else new_note
    key = log_verifier_key(log_key, new_text)
    a = open_checkpoint(old_note, key)
    b = open_checkpoint(new_note, key)
    hashes = [
        _hash(h, f"consistency proof hash {i}")
        for i, h in enumerate(p.get("proof", []))
    ]
    if not consistent(a.size, a.root, b.size, b.root, hashes):
        raise _fail(
            "inconsistent",
            f"inconsistent checkpoints: the tree of size {a.size} is not a prefix of the tree of size {b.size} (the consistency proof fails)",
        )
    if (p.get("from"), p.get("to")) != (a.size, b.size):
        raise _malformed(
            f"the proof is from tree size {p.get('from')} to {p.get('to')}, the checkpoints are of sizes {a.size} and {b.size}"
        )
    return (
        f"the tree of size {a.size} is a prefix of the tree of size {b.size}, "
        f"both signed by {b.origin}"
    )


def export_proofs(
    ndjson: str | bytes,
    log_key: str,
    export: bytes | None = None,
    witness_keys: Iterable[str] = (),
    quorum: int = 0,
) -> str:
    """Checks `GET /v1/audit/logs/export/{id}/proofs` (NDJSON), as `auditmem verify
    --export-proofs`: the head's checkpoint, then each row's proof against it, the row count,
    and with `export` (the downloaded file) that its rows are the proofs' entries in order.
    """
    text = ndjson.decode() if isinstance(ndjson, bytes) else ndjson
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        raise _malformed("the export proofs are empty")
    head = json.loads(lines[0])
    cp = open_checkpoint(head["checkpoint"], log_key, witness_keys, quorum)
    if (
        cp.size != head["tree_size"]
        or base64.b64encode(cp.root).decode() != head["root_hash"]
    ):
        raise _fail(
            "checkpoint_mismatch",
            f"wrong root: the checkpoint signs tree size {cp.size} with root {base64.b64encode(cp.root).decode()}, the proof is for size {head['tree_size']} with root {head['root_hash']}",
        )
    ids = []
    for row, line in enumerate(lines[1:], start=1):
        p = json.loads(line)
        try:
            if p["tree_size"] != cp.size or p["root_hash"] != head["root_hash"]:
                raise _malformed(
                    f"its proof is for tree size {p['tree_size']}, the head's is {cp.size}"
                )
            _check_entry(p, cp.root)
        except VerificationError as why:
            raise VerificationError(
                f"row {row} (audit entry {p.get('audit_id')}): {why}", why.kind, row=row
            ) from None
        ids.append(str(p["audit_id"]))
    if len(ids) != head["rows"]:
        raise _fail(
            "rows_differ",
            f"the proofs are not the export file's rows: the head says {head['rows']} rows, {len(ids)} proofs follow",
        )
    of_file = ""
    if export is not None:
        rows = [str(r.get("id")) for r in parse_export_rows(export, True)]
        for i in range(max(len(rows), len(ids))):
            got = rows[i] if i < len(rows) else None
            want = ids[i] if i < len(ids) else None
            if got != want:
                raise _fail(
                    "rows_differ",
                    f"the proofs are not the export file's rows: row {i + 1} of the export is {got or 'missing'}, its proof is for {want or 'nothing'}",
                )
        of_file = ", the rows of the export in its order"
    cosigned = f"; cosigned by {', '.join(cp.witnesses)}" if cp.witnesses else ""
    return (
        f"{len(ids)} rows of export {head['export_id']}{of_file} are records of the tree "
        f"of size {cp.size} signed by {cp.origin}{cosigned}"
    )


# Export files and their signed manifests (`auditmem verify --export FILE --manifest M`).

# The CSV columns written as text (others are JSON literals): what `uncell` reads as strings.
TEXT_COLUMNS = frozenset(
    {
        "id",
        "action",
        "model_id",
        "project_id",
        "gateway_id",
        "ip_address",
        "user_agent",
        "error_msg",
        "created_at",
        "detail_hash",
        "prev_hash",
        "hash",
    }
)
PERSONAL_FIELDS = frozenset({"error_msg", "ip_address", "metadata", "user_agent"})
_CHAIN_DOMAINS = {
    1: b"auditmem/tenant-chain/v1",
    2: b"auditmem/tenant-chain/v2",
    3: b"auditmem/tenant-chain/v3",
}

# The tamper kinds of an export, worded as `auditmem verify` prints them.
DESCRIBE = {
    "hash_mismatch": "modified record (hash mismatch)",
    "missing": "deleted record (missing seq)",
    "out_of_order": "reordered record (out of order)",
    "broken_link": "broken link (a record was replaced with a recomputed hash)",
    "undecodable": "undecodable record",
    "bad_signature": "bad signature",
    "rows_missing_at_start": "rows missing at the start",
    "rows_missing_at_end": "rows missing at the end",
    "renumbered": "rows removed and the rest renumbered",
    "manifest_hash_mismatch": "hash mismatch against the manifest (rows rewritten, chain recomputed)",
    "row_count_mismatch": "row count differs from the manifest",
    "digest_mismatch": "file digest differs from the manifest",
    "manifest_mismatch": "not the export the manifest describes",
}


def parse_export_rows(data: bytes, formula_guard: bool = True) -> list[dict[str, Any]]:
    """An export file's rows (JSON or CSV, told apart by the first byte), each as the field
    map the chain hashes."""
    first = data.lstrip()[:1]
    if first == b"[":
        rows = json.loads(data)
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise _fail("undecodable", f"row {i + 1} is not an object")
        return rows
    reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
    header = next(reader, None)
    if header is None:
        return []
    out = []
    for i, rec in enumerate(reader, start=1):
        row: dict[str, Any] = {}
        for col, cell in zip(header, rec):
            if cell == "":
                row[col] = None
            elif col in TEXT_COLUMNS:
                row[col] = cell[1:] if formula_guard and cell.startswith("'") else cell
            else:
                try:
                    row[col] = json.loads(cell)
                except ValueError as e:
                    raise _fail("undecodable", f"row {i}: column {col}: {e}") from None
        out.append(row)
    return out


def _json_number(v: float) -> str:
    """A float as serde_json writes it (shortest round trip, `1e20`, `1.5e-7`)."""
    if not math.isfinite(v):
        return "null"
    r = repr(v)
    if "e" in r:
        mantissa, exp = r.split("e")
        return f"{mantissa}e{int(exp)}"
    return r


def _canonical(v: Any) -> str:
    if isinstance(v, dict):
        return (
            "{"
            + ",".join(
                json.dumps(k, ensure_ascii=False) + ":" + _canonical(v[k])
                for k in sorted(v)
            )
            + "}"
        )
    if isinstance(v, list):
        return "[" + ",".join(_canonical(x) for x in v) + "]"
    if isinstance(v, float):
        return _json_number(v)
    return json.dumps(v, ensure_ascii=False)


def chain_hash(prev: bytes, fields: Mapping[str, Any]) -> bytes:
    """A row's place in its tenant's chain (docs/API.md, "Per-tenant chain"), over the row
    without `chain_index`, `prev_hash` and `hash`."""
    if fields.get("sealed") is True:
        rule = 3
    elif fields.get("detail_hash") is None:
        rule = 1
    else:
        rule = 2

    def hashed(k: str) -> bool:
        if rule == 1:
            return k not in ("hash", "detail_hash", "sealed", "erased")
        if rule == 2:
            return k not in ("hash", "sealed", "erased")
        return k not in ("hash", "erased") and k not in PERSONAL_FIELDS

    kept = {k: v for k, v in fields.items() if hashed(k)}
    return blake3.blake3(
        _CHAIN_DOMAINS[rule] + prev + _canonical(kept).encode()
    ).digest()


@dataclass
class ExportFailure:
    row: int | None
    chain_index: int | None
    kind: str
    detail: str

    def __str__(self) -> str:
        place = f"row {self.row}" if self.row is not None else "file"
        return f"{place}: {DESCRIBE[self.kind]}: {self.detail}"


def _hex32(v: Any) -> bytes | None:
    try:
        b = bytes.fromhex(v) if isinstance(v, str) else None
    except ValueError:
        return None
    return b if b is not None and len(b) == 32 else None


def _chain_failures(rows: list[dict[str, Any]]) -> list[ExportFailure]:
    out: list[ExportFailure] = []
    prev: tuple[int, bytes] | None = None
    for row, r in enumerate(rows, start=1):
        fields = dict(r)
        h, ph, idx = (
            _hex32(fields.pop("hash", None)),
            _hex32(fields.pop("prev_hash", None)),
            fields.pop("chain_index", None),
        )
        if h is None or ph is None or not isinstance(idx, int):
            out.append(
                ExportFailure(row, None, "undecodable", "chain fields are malformed")
            )
            prev = None
            continue
        if chain_hash(ph, fields) != h:
            out.append(
                ExportFailure(
                    row,
                    idx,
                    "hash_mismatch",
                    "the row's contents do not match its hash",
                )
            )
        if prev is not None:
            p_idx, p_hash = prev
            if idx <= p_idx:
                out.append(
                    ExportFailure(
                        row,
                        idx,
                        "out_of_order",
                        f"chain position {idx} comes after position {p_idx}",
                    )
                )
            elif idx > p_idx + 1:
                detail = (
                    f"chain position {p_idx + 1} is missing before this row"
                    if idx == p_idx + 2
                    else f"chain positions {p_idx + 1}..{idx - 1} are missing before this row"
                )
                out.append(ExportFailure(row, idx, "missing", detail))
            elif ph != p_hash:
                out.append(
                    ExportFailure(
                        row,
                        idx,
                        "broken_link",
                        "prev_hash is not the previous row's hash",
                    )
                )
        prev = (idx, h)
    return out


def manifest_message(m: Mapping[str, Any]) -> str:
    """The text a manifest's signature covers: its version, then `name value` lines."""

    def dash(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    names = [
        "export_id",
        "tenant_id",
        "format",
        "start_time",
        "end_time",
        "request_seq",
        "requested_at",
        "completed_at",
        "records",
        "with_chain",
        "first_id",
        "first_chain_index",
        "first_hash",
        "last_id",
        "last_chain_index",
        "last_hash",
        "file_bytes",
        "file_blake3",
        "formula_guard",
    ]
    return "\n".join([str(m["version"])] + [f"{n} {dash(m.get(n))}" for n in names])


def _manifest_signature(m: Mapping[str, Any], pinned: str | None) -> str | None:
    """Why the manifest's signature fails, or None."""
    if m.get("version") != MANIFEST_VERSION:
        return f"the manifest is {m.get('version')}, not {MANIFEST_VERSION}"
    if pinned is not None and pinned.strip().lower() != str(m.get("public_key")):
        return "signed by a different key than the pinned public key"
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(m["public_key"])))
        sig = bytes.fromhex(str(m["signature"]))
    except ValueError as e:
        return f"the manifest's key or signature is malformed: {e}"
    try:
        key.verify(sig, manifest_message(m).encode())
    except InvalidSignature:
        return "signature does not verify"
    return None


def _ends(m: Mapping[str, Any], rows: list[dict[str, Any]]) -> list[ExportFailure]:
    out: list[ExportFailure] = []
    m_first, m_last = m.get("first_chain_index"), m.get("last_chain_index")
    if m_first is None or m_last is None:
        return out
    if not rows:
        return [
            ExportFailure(
                None,
                None,
                "rows_missing_at_end",
                f"the file has no rows; the manifest's run from chain position {m_first} to {m_last}",
            )
        ]
    n = len(rows)

    def end(r: dict[str, Any]) -> tuple[str | None, int | None, bytes | None]:
        idx = r.get("chain_index")
        return r.get("id"), idx if isinstance(idx, int) else None, _hex32(r.get("hash"))

    f_id, f_idx, f_hash = end(rows[0])
    f_at = f_idx or 0
    if f_id is not None and f_id == m.get("first_id"):
        if f_at != m_first:
            out.append(
                ExportFailure(
                    1,
                    f_idx,
                    "renumbered",
                    f"the manifest's first row {f_id} is at chain position {m_first}; the file has it at {f_at}",
                )
            )
        elif f_hash != _hex32(m.get("first_hash")):
            out.append(
                ExportFailure(
                    1,
                    f_idx,
                    "manifest_hash_mismatch",
                    f"the first row's hash is not the manifest's {m.get('first_hash') or '-'}: it was rewritten and its hash recomputed",
                )
            )
    elif f_at > m_first:
        out.append(
            ExportFailure(
                1,
                f_idx,
                "rows_missing_at_start",
                f"the file starts at chain position {f_at}; the manifest's first row {m.get('first_id') or '-'} is at {m_first}: {f_at - m_first} rows missing at the start",
            )
        )
    else:
        out.append(
            ExportFailure(
                1,
                f_idx,
                "manifest_mismatch",
                f"the file's first row {f_id or '-'} at chain position {f_at} is not the manifest's first row {m.get('first_id') or '-'} at {m_first}",
            )
        )
    l_id, l_idx, l_hash = end(rows[-1])
    l_at = l_idx or 0
    if l_id is not None and l_id == m.get("last_id"):
        if l_at != m_last:
            out.append(
                ExportFailure(
                    n,
                    l_idx,
                    "renumbered",
                    f"the manifest's last row {l_id} is at chain position {m_last}; the file has it at {l_at}: rows were removed before it (or added) and the rest renumbered",
                )
            )
        elif l_hash != _hex32(m.get("last_hash")):
            out.append(
                ExportFailure(
                    n,
                    l_idx,
                    "manifest_hash_mismatch",
                    f"the last row's hash is not the manifest's {m.get('last_hash') or '-'}: rows were rewritten and the chain recomputed",
                )
            )
    elif l_at < m_last:
        out.append(
            ExportFailure(
                n,
                l_idx,
                "rows_missing_at_end",
                f"the file ends at chain position {l_at}; the manifest's last row {m.get('last_id') or '-'} is at {m_last}: {m_last - l_at} rows missing at the end",
            )
        )
    else:
        out.append(
            ExportFailure(
                n,
                l_idx,
                "manifest_mismatch",
                f"the file's last row {l_id or '-'} at chain position {l_at} is not the manifest's last row {m.get('last_id') or '-'} at {m_last}",
            )
        )
    return out


@dataclass(frozen=True)
class ExportVerified:
    rows: int
    export_id: str
    tenant_id: str
    public_key: str
    key_pinned: bool


def export_manifest(
    data: bytes, manifest: Any, pubkey: str | None = None
) -> ExportVerified:
    """Checks an export file against its signed manifest, as `auditmem verify --export FILE
    --manifest M [--pubkey HEX]`: the signature (by `pubkey`, the service's hex public key,
    when given; else the manifest's own key is trusted), the file's size and blake3, its
    format, its row count, its first and last rows, and the tenant chain within it.

    Raises `VerificationError` naming the first failure (`row N: <kind>: <detail>` or
    `file: ...`) with every failure in its `failures`."""
    m = _as_dict(manifest)
    if isinstance(m.get("manifest"), dict):
        m = m["manifest"]
    failures: list[ExportFailure] = []
    why = _manifest_signature(m, pubkey)
    if why is not None:
        detail = (
            f"the manifest is signed by {m.get('public_key')}, not by the key given with --pubkey: refused"
            if pubkey is not None and "different key" in why
            else f"the manifest's signature: {why}"
        )
        failures.append(ExportFailure(None, None, "bad_signature", detail))
    digest = blake3.blake3(data).hexdigest()
    if m.get("file_blake3") != digest or m.get("file_bytes") != len(data):
        failures.append(
            ExportFailure(
                None,
                None,
                "digest_mismatch",
                f"the file's blake3 is {digest} ({len(data)} bytes); the manifest's is {m.get('file_blake3')} ({m.get('file_bytes')} bytes)",
            )
        )
    fmt = "json" if data.lstrip()[:1] == b"[" else "csv"
    if m.get("format") != fmt:
        failures.append(
            ExportFailure(
                None,
                None,
                "manifest_mismatch",
                f"the file is {fmt}; the manifest's export is {m.get('format')}",
            )
        )
    rows = parse_export_rows(data, bool(m.get("formula_guard", True)))
    with_chain = bool(m.get("with_chain"))
    has_chain = bool(rows) and "chain_index" in rows[0]
    row_failures: list[ExportFailure] = []
    if with_chain and (has_chain or not rows):
        row_failures = _chain_failures(rows)
    elif with_chain:
        failures.append(
            ExportFailure(
                None,
                None,
                "manifest_mismatch",
                "the manifest's export carries the tenant chain; the file's rows do not",
            )
        )
    if m.get("records") != len(rows):
        failures.append(
            ExportFailure(
                None,
                None,
                "row_count_mismatch",
                f"the file has {len(rows)} rows; the manifest states {m.get('records')}",
            )
        )
    if with_chain:
        failures.extend(_ends(m, rows))
    failures.extend(row_failures)
    if failures:
        raise VerificationError(str(failures[0]), failures[0].kind, failures)
    return ExportVerified(
        len(rows),
        str(m["export_id"]),
        str(m["tenant_id"]),
        str(m["public_key"]),
        pubkey is not None,
    )
