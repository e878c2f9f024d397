// "Verify in browser": the checks of `auditmem verify --proof` (docs/VERIFYING.md), run with
// the browser's own crypto. SHA-256 (the Merkle tree, RFC 6962) and Ed25519 (the checkpoint's
// C2SP signed note) are WebCrypto's; BLAKE3 (the record hash) is blake3.js. Nothing here
// trusts the server beyond the pinned verifier key the person supplies.

import { blake3 } from "./blake3.js";
import { decode } from "./msgpack.js";

const enc = new TextEncoder();
export const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
export const b64 = (s) => Uint8Array.from(atob(s.trim()), (c) => c.charCodeAt(0));
export const toB64 = (b) => btoa(String.fromCharCode(...b));
const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const cat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};
const sha256 = async (b) => new Uint8Array(await crypto.subtle.digest("SHA-256", b));

/** `<name>+<key id hex>+<base64(0x01 || public key)>` → {name, id, pub}; throws on malformed. */
export async function parseVerifierKey(text) {
  // The name holds no "+", the base64 key may: split at the first two only.
  const m = /^([^+\s]+)\+([0-9a-fA-F]{8})\+(\S+)$/.exec(String(text || "").trim());
  if (!m) throw new Error("a verifier key is <origin>+<key id>+<base64 key>");
  const [, name, idHex, keyB64] = m;
  let raw;
  try {
    raw = b64(keyB64);
  } catch {
    throw new Error("the verifier key's last part is not base64");
  }
  if (raw.length !== 33 || raw[0] !== 1) throw new Error("the verifier key is not an Ed25519 key (0x01 and 32 bytes)");
  const id = (await sha256(cat(enc.encode(name), enc.encode("\n"), raw))).subarray(0, 4);
  if (hex(id) !== idHex.toLowerCase()) throw new Error("the verifier key's id does not match its key");
  return { name, id, pub: raw.subarray(1), text: String(text).trim() };
}

/** A C2SP signed note → {body, origin, size, root, sigs: [{name, bytes}]}. */
export function parseNote(note) {
  const at = note.indexOf("\n\n");
  if (at < 0) throw new Error("the checkpoint is not a signed note (no blank line)");
  const body = note.slice(0, at + 1);
  const lines = body.split("\n");
  const sigs = [];
  for (const line of note.slice(at + 2).split("\n")) {
    if (!line) continue;
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m) throw new Error(`malformed signature line: ${line.slice(0, 80)}`);
    sigs.push({ name: m[1], bytes: b64(m[2]) });
  }
  return { body, origin: lines[0], size: Number(lines[1]), root: lines[2], sigs };
}

/** RFC 6962 / RFC 9162 inclusion: the root the audit path leads to from `leaf` (a leaf hash). */
export async function rootFromInclusion(index, size, leaf, path) {
  if (index >= size) throw new Error("leaf index beyond the tree");
  let fn = index, sn = size - 1, r = leaf;
  for (const p of path) {
    if (sn === 0) throw new Error("the audit path is too long");
    if (fn % 2 === 1 || fn === sn) {
      r = await sha256(cat([1], p, r));
      if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      r = await sha256(cat([1], r, p));
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  if (sn !== 0) throw new Error("the audit path is too short");
  return r;
}

function uuidText(v) {
  if (typeof v === "string") return v.toLowerCase();
  if (v instanceof Uint8Array && v.length === 16) {
    const x = hex(v);
    return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
  }
  return null;
}

/** The audit entry id an event holds (`[version, {"AuditRecorded": [tenant, entry, ...]}]`). */
function auditIdOf(eventBytes) {
  const [, body] = decode(eventBytes).value;
  if (!(body instanceof Map) || !body.has("AuditRecorded")) return null;
  const rec = body.get("AuditRecorded");
  const entry = Array.isArray(rec) ? rec[1] : rec instanceof Map ? rec.get("entry") : null;
  if (Array.isArray(entry)) return uuidText(entry[0]);
  if (entry instanceof Map) return uuidText(entry.get("id"));
  return null;
}

/**
 * Checks a proof (`GET /v1/audit/logs/{id}/proof`'s data) against the pinned verifier key.
 * Returns {ok, steps: [{name, ok, detail}], failure?, proven?}: the steps run in the CLI's order
 * and stop at the first failure, which is named.
 */
export async function verifyProof(proof, verifierKey) {
  const steps = [];
  const step = (name, ok, detail) => {
    steps.push({ name, ok, detail });
    if (!ok) throw Object.assign(new Error(detail), { step: name });
  };
  try {
    if (!crypto.subtle) step("WebCrypto", false, "this page is not a secure context, so WebCrypto is missing (use http://127.0.0.1 or https)");
    const key = await parseVerifierKey(verifierKey).catch((e) => step("pinned key", false, e.message));
    if (typeof proof.checkpoint !== "string") step("checkpoint", false, "the proof carries no checkpoint note");
    const note = parseNote(proof.checkpoint);
    // 1. the log's signature, by the pinned key
    const mine = note.sigs.find((s) => s.name === key.name && s.bytes.length === 68 && eq(s.bytes.subarray(0, 4), key.id));
    if (!mine) step("signature", false, `not signed by the pinned key ${key.name}`);
    const pub = await crypto.subtle.importKey("raw", key.pub, { name: "Ed25519" }, false, ["verify"]);
    const good = await crypto.subtle.verify({ name: "Ed25519" }, pub, mine.bytes.subarray(4), enc.encode(note.body));
    step("signature", good, good ? `the checkpoint is signed by the pinned key ${key.name}+${hex(key.id)} (Ed25519)` : "bad signature: the checkpoint's signature does not verify with the pinned key");
    const witnesses = note.sigs.filter((s) => s !== mine).map((s) => s.name);
    // 2. witnesses: listed, not checked (no witness key is pinned here)
    steps.push({ name: "cosignatures", ok: true, detail: witnesses.length ? `cosigned by ${witnesses.join(", ")} (not checked: no witness key is pinned in the console)` : "no witness cosignatures" });
    // 3. the note signs this tree
    const rootOk = note.size === Number(proof.tree_size) && note.root === String(proof.root_hash).trim();
    step("checkpoint", rootOk, rootOk ? `the checkpoint signs tree size ${note.size} and root ${note.root}` : `wrong root: the checkpoint signs size ${note.size} root ${note.root}, the proof says ${proof.tree_size} ${proof.root_hash}`);
    // 4-5. the record's bytes and its hash
    const rec = b64(proof.record);
    const { value: fields } = decode(rec);
    if (!Array.isArray(fields) || fields.length !== 5) step("record", false, "the record is not [seq, ts, prev, hash, event]");
    const [seq, ts, prev, hash, event] = fields;
    const seqBe = new Uint8Array(8), tsBe = new Uint8Array(8);
    new DataView(seqBe.buffer).setBigUint64(0, BigInt(seq));
    new DataView(tsBe.buffer).setBigInt64(0, BigInt(ts));
    const computed = blake3(cat(enc.encode("auditmem/log/v1"), prev, seqBe, tsBe, event));
    step("record hash", eq(computed, hash), eq(computed, hash) ? `the record's bytes hash to ${hex(computed)} (BLAKE3), the hash it carries` : "the record does not match its hash");
    const leafOk = hex(computed) === String(proof.record_hash).trim().toLowerCase();
    step("leaf", leafOk, leafOk ? "that hash is the proof's record_hash" : "the leaf does not match its record");
    // 6. its place
    const placeOk = Number(seq) === Number(proof.seq) && Number(proof.leaf_index) + 1 === Number(seq);
    step("place", placeOk, placeOk ? `the record is seq ${seq}, leaf ${proof.leaf_index}` : `the record is seq ${seq}, the proof says seq ${proof.seq} (leaf ${proof.leaf_index})`);
    // 7. the entry it holds
    const found = auditIdOf(event);
    const idOk = found === String(proof.audit_id).toLowerCase();
    step("entry", idOk, idOk ? `the record holds audit entry ${found}` : `the record holds audit entry ${found || "none"}, not ${proof.audit_id}`);
    // 8. the audit path
    const leaf = await sha256(cat([0], seqBe, computed));
    const path = (proof.inclusion || []).map(b64);
    let root;
    try {
      root = await rootFromInclusion(Number(proof.leaf_index), Number(proof.tree_size), leaf, path);
    } catch (e) {
      step("inclusion", false, `wrong root: ${e.message}`);
    }
    const pathOk = toB64(root) === note.root;
    step("inclusion", pathOk, pathOk ? `the ${path.length}-hash audit path from leaf ${proof.leaf_index} leads to the signed root (SHA-256, RFC 6962)` : `wrong root: the inclusion path from leaf ${proof.leaf_index} does not lead to the signed root`);
    const proven = `Proven: audit entry ${found}, with its exact content and time, is record ${seq} of the log ${note.origin}, whose tree of size ${note.size} (root ${note.root}) is signed by the pinned key. A log that later drops or changes this record cannot be consistent with this checkpoint.`;
    return { ok: true, steps, proven, witnesses };
  } catch (e) {
    if (!e.step) steps.push({ name: "malformed", ok: false, detail: e.message });
    return { ok: false, steps, failure: e.message };
  }
}

/** Checks a checkpoint note's signature alone: {ok, detail, note}. */
export async function verifyNote(noteText, verifierKey) {
  try {
    const key = await parseVerifierKey(verifierKey);
    const note = parseNote(noteText);
    const mine = note.sigs.find((s) => s.name === key.name && s.bytes.length === 68 && eq(s.bytes.subarray(0, 4), key.id));
    if (!mine) return { ok: false, detail: `not signed by the pinned key ${key.name}`, note };
    const pub = await crypto.subtle.importKey("raw", key.pub, { name: "Ed25519" }, false, ["verify"]);
    const ok = await crypto.subtle.verify({ name: "Ed25519" }, pub, mine.bytes.subarray(4), enc.encode(note.body));
    return { ok, detail: ok ? `signed by the pinned key ${key.name}+${hex(key.id)}` : "bad signature", note };
  } catch (e) {
    return { ok: false, detail: e.message, note: null };
  }
}
