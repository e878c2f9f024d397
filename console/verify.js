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
export function parseVerifierKey(text) {
  return parseKey(text, 0x01, "a verifier key is <origin>+<key id>+<base64 key>", "the verifier key is not an Ed25519 key (0x01 and 32 bytes)", "the verifier key");
}

/**
 * A witness's C2SP tlog-cosignature verifier key, `<name>+<key id hex>+<base64(0x04 || public
 * key)>` → {name, id, pub, text}; throws on malformed. As `CosignatureVerifier::new`
 * (src/tlog/cosignature.rs): the type byte must be 0x04 (cosignature/v1) and the key id must be
 * SHA-256(name || "\n" || 0x04 || key)[:4], recomputed here.
 */
export function parseWitnessKey(text) {
  return parseKey(text, 0x04, "a witness key is <name>+<key id>+<base64 key>", "the witness key is not a cosignature/v1 Ed25519 key (0x04 and 32 bytes)", "the witness key");
}

async function parseKey(text, type, format, kind, what) {
  // The name holds no "+", the base64 key may: split at the first two only.
  const m = /^([^+\s]+)\+([0-9a-fA-F]{8})\+(\S+)$/.exec(String(text || "").trim());
  if (!m) throw new Error(format);
  const [, name, idHex, keyB64] = m;
  let raw;
  try {
    raw = b64(keyB64);
  } catch {
    throw new Error(`${what}'s last part is not base64`);
  }
  if (raw.length !== 33 || raw[0] !== type) throw new Error(kind);
  const id = (await sha256(cat(enc.encode(name), enc.encode("\n"), raw))).subarray(0, 4);
  if (hex(id) !== idHex.toLowerCase()) throw new Error(`${what}'s id does not match its key`);
  return { name, id, pub: raw.subarray(1), text: String(text).trim() };
}

// The y coordinates (mod p) of the eight points of small order on edwards25519: the identity
// (1), the point of order 2 (p - 1), those of order 4 (0) and of order 8 (Y8, p - Y8).
const P = (1n << 255n) - 19n;
const Y8 = 2707385501144840649318225287225658788936804267575313519463743609750303402022n;
const SMALL_Y = [0n, 1n, P - 1n, Y8, P - Y8];
/** Whether a 32-byte point encoding (canonical or not) is of small order. */
export function smallOrder(bytes) {
  let y = 0n;
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(i === 31 ? bytes[i] & 0x7f : bytes[i]);
  return SMALL_Y.includes(y % P);
}

/** The message a cosignature/v1 signs at `time` (a BigInt) for the note text `body`. */
export const cosignedMessage = (time, body) => cat(enc.encode(`cosignature/v1\ntime ${time}\n`), enc.encode(body));
const MAX_TIME = (1n << 63n) - 1n;
/** A cosignature time (seconds) as RFC 3339, with the number itself beyond the Date range. */
export const fmtCosignTime = (t) => (t <= 8640000000000n ? new Date(Number(t) * 1000).toISOString().replace(/\.000Z$/, "Z") : `time ${t}`);

/**
 * One cosignature/v1 signature (its bytes after the key id) over the note text `body`, checked
 * as `CosignatureVerifier::verify` does: 8 bytes of big-endian time T (at most 2^63 - 1), then
 * an Ed25519 signature over `cosignature/v1\ntime T\n<body>`, verified strictly (ed25519-dalek's
 * verify_strict refuses a key or R point of small order, which WebCrypto alone would accept).
 * → the time (BigInt) when it verifies, else null.
 */
export async function verifyCosignature(key, body, sig) {
  if (sig.length !== 72) return null;
  const time = new DataView(sig.buffer, sig.byteOffset, 8).getBigUint64(0);
  if (time > MAX_TIME) return null;
  const ed = sig.subarray(8);
  if (smallOrder(key.pub) || smallOrder(ed.subarray(0, 32))) return null;
  const pub = await crypto.subtle.importKey("raw", key.pub, { name: "Ed25519" }, false, ["verify"]);
  const ok = await crypto.subtle.verify({ name: "Ed25519" }, pub, ed, cosignedMessage(time, body));
  return ok ? time : null;
}

/** The pinned witness keys, one a line (blank lines skipped) → keys; throws naming the line. */
export async function parseWitnessKeys(text) {
  const keys = [];
  const lines = String(text || "").split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (!lines[i].trim()) continue;
    try {
      keys.push(await parseWitnessKey(lines[i]));
    } catch (e) {
      throw new Error(`pinned witness key ${keys.length + 1} (line ${i + 1}): ${e.message}`);
    }
  }
  return keys;
}

/**
 * The witness cosignatures of a parsed note against the pinned witness keys and the quorum
 * (a number, or "" for all pinned), as `auditmem verify --witness-key … --witnesses K` checks
 * them (src/tlog/note.rs, `open`): a line whose name and key id are a pinned key's is checked;
 * one that does not verify is a bad cosignature, which fails whatever the quorum; at least K
 * distinct pinned witnesses must have verified. Lines of other names or key ids are listed as
 * not checked. `exclude` is the log's own signature line.
 * → {ok, detail, items: [{name, ok, text}], verified: [{name, time}], quorum}
 */
export async function checkCosignatures(note, witnessKeys, quorumText, exclude) {
  const others = note.sigs.filter((s) => s !== exclude);
  let keys;
  try {
    keys = Array.isArray(witnessKeys) ? witnessKeys : await parseWitnessKeys(witnessKeys);
  } catch (e) {
    return { ok: false, detail: e.message, items: [], verified: [], quorum: 0 };
  }
  const qt = String(quorumText ?? "").trim();
  const names = [...new Set(keys.map((k) => k.name))];
  if (qt && !/^\d+$/.test(qt)) return { ok: false, detail: `the quorum ${qt} is not a whole number`, items: [], verified: [], quorum: 0 };
  const quorum = qt ? Number(qt) : names.length;
  const matched = new Set();
  const items = [];
  const verified = [];
  let bad = null;
  for (const k of keys) {
    const label = `${k.name}+${hex(k.id)}`;
    const mine = others.filter((s) => s.name === k.name && s.bytes.length >= 4 && eq(s.bytes.subarray(0, 4), k.id));
    mine.forEach((s) => matched.add(s));
    if (!mine.length) {
      const elsewhere = others.filter((s) => s.name === k.name).map((s) => (s.bytes.length >= 4 ? hex(s.bytes.subarray(0, 4)) : "?"));
      items.push({ name: label, ok: false, text: `no cosignature from ${k.name} under this key${elsewhere.length ? ` (its line under key id ${elsewhere.join(", ")} is not this key's)` : ""}` });
      continue;
    }
    let time = null;
    for (const s of mine) {
      const t = await verifyCosignature(k, note.body, s.bytes.subarray(4));
      if (t === null) {
        bad = bad || k.name;
        time = null;
        break;
      }
      time = t;
    }
    if (time === null) {
      items.push({ name: label, ok: false, text: "bad cosignature: it does not verify with this key" });
    } else {
      items.push({ name: label, ok: true, text: `verified (cosigned at ${fmtCosignTime(time)})` });
      if (!verified.some((v) => v.name === k.name)) verified.push({ name: k.name, time });
    }
  }
  for (const s of others) if (!matched.has(s)) items.push({ name: s.name, ok: null, text: "not checked: no witness key of this name and key id is pinned" });
  if (bad) return { ok: false, detail: `bad cosignature: the cosignature by ${bad} does not verify`, items, verified, quorum };
  if (verified.length < quorum) {
    return { ok: false, detail: `missing cosignatures: ${verified.length} of the ${names.length} pinned witnesses verified, ${quorum} required`, items, verified, quorum };
  }
  let detail;
  if (!keys.length) {
    detail = others.length ? `cosigned by ${others.map((s) => s.name).join(", ")} (not checked: no witness key is pinned)` : "no witness cosignatures";
  } else {
    detail = `${verified.length} of the ${names.length} pinned witnesses verified, ${quorum} required`;
  }
  return { ok: true, detail, items, verified, quorum };
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
export async function verifyProof(proof, verifierKey, witnesses = {}) {
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
    // 2. witnesses: those pinned are checked, K of them must have cosigned; others are listed
    const co = await checkCosignatures(note, witnesses.keys || "", witnesses.quorum ?? "", mine);
    steps.push({ name: "cosignatures", ok: co.ok, detail: co.detail, items: co.items });
    if (!co.ok) throw Object.assign(new Error(co.detail), { step: "cosignatures" });
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
    const cosigned = co.verified.length
      ? ` It is cosigned by the pinned witness${co.verified.length > 1 ? "es" : ""} ${co.verified.map((v) => `${v.name} (at ${fmtCosignTime(v.time)})`).join(", ")}: each stated at that time that this tree head is consistent with every earlier one of this log it had cosigned.`
      : "";
    const proven = `Proven: audit entry ${found}, with its exact content and time, is record ${seq} of the log ${note.origin}, whose tree of size ${note.size} (root ${note.root}) is signed by the pinned key.${cosigned} A log that later drops or changes this record cannot be consistent with this checkpoint.`;
    return { ok: true, steps, proven, witnesses: co.verified };
  } catch (e) {
    if (!e.step) steps.push({ name: "malformed", ok: false, detail: e.message });
    return { ok: false, steps, failure: e.message };
  }
}

/**
 * Checks a checkpoint note's signature by the pinned key, then its witness cosignatures against
 * the pinned witness keys (`witnesses` {keys, quorum}): {ok, detail, note, cosignatures}, where
 * `cosignatures` is checkCosignatures' answer once the log's signature verified.
 */
export async function verifyNote(noteText, verifierKey, witnesses = {}) {
  try {
    const key = await parseVerifierKey(verifierKey);
    const note = parseNote(noteText);
    const mine = note.sigs.find((s) => s.name === key.name && s.bytes.length === 68 && eq(s.bytes.subarray(0, 4), key.id));
    if (!mine) return { ok: false, detail: `not signed by the pinned key ${key.name}`, note };
    const pub = await crypto.subtle.importKey("raw", key.pub, { name: "Ed25519" }, false, ["verify"]);
    const ok = await crypto.subtle.verify({ name: "Ed25519" }, pub, mine.bytes.subarray(4), enc.encode(note.body));
    if (!ok) return { ok, detail: "bad signature", note };
    const cosignatures = await checkCosignatures(note, witnesses.keys || "", witnesses.quorum ?? "", mine);
    return { ok, detail: `signed by the pinned key ${key.name}+${hex(key.id)}`, note, cosignatures };
  } catch (e) {
    return { ok: false, detail: e.message, note: null };
  }
}
