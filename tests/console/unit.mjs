// The console's pure modules under node (no browser): BLAKE3 against the reference values
// that tests/it/console.rs computes with the blake3 crate (BLAKE3_VECTORS: {length: hex} of
// the inputs i % 251), the qualifier parser, the MessagePack reader, and the witness
// cosignature check against a note the crate cosigned (COSIGNATURE_VECTOR). Exits 1 at the
// first mismatch, named.

import { blake3 } from "../../console/blake3.js";
import { decode } from "../../console/msgpack.js";
import { matches, parse } from "../../console/qualifiers.js";
import { b64, checkCosignatures, cosignedMessage, parseNote, parseWitnessKey, toB64, verifyCosignature, verifyNote } from "../../console/verify.js";

let checks = 0;
const json = (v) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? `${x}n` : x));
function eq(got, want, what) {
  const g = json(got), w = json(want);
  if (g !== w) {
    console.error(`FAILED: ${what}: got ${g}, want ${w}`);
    process.exit(1);
  }
  checks += 1;
}
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

const vectors = JSON.parse(process.env.BLAKE3_VECTORS || "{}");
eq(Object.keys(vectors).length > 0, true, "BLAKE3_VECTORS given");
for (const [len, want] of Object.entries(vectors)) {
  const input = Uint8Array.from({ length: Number(len) }, (_, i) => i % 251);
  eq(hex(blake3(input)), want, `blake3 of ${len} bytes`);
}

const p = parse('action:memory.write status:4xx model:gpt-4o after:2026-11-01 before:2026-11-02 is:failure "two words" peanut');
eq(p.server, { action: "memory.write", start_time: "2026-11-01T00:00:00.000Z", end_time: "2026-11-02T23:59:59.999Z" }, "server filters");
eq(p.client, [{ key: "status", value: "4xx" }, { key: "model", value: "gpt-4o" }, { key: "is", value: "failure" }], "client filters");
eq(p.words, ["two words", "peanut"], "free words");
eq(p.errors, [], "no errors");
eq(parse("status:6xx after:yesterday colour:red").errors, [
  "status:6xx must be a code (404) or a class (4xx)",
  "after:yesterday is not a date (YYYY-MM-DD or ISO 8601)",
  "unknown qualifier colour: (known: action, after, before, status, model, project, gateway, ip, is, id)",
], "errors named");
const entry = { id: "abc", http_status: 429, is_success: false, is_cache_hit: false, model_id: "gpt-4o-mini" };
eq(matches(entry, parse("status:4xx")), true, "status class");
eq(matches(entry, parse("status:404")), false, "status code");
eq(matches(entry, parse("model:gpt-4o")), false, "model is exact");
eq(matches(entry, parse("model:gpt-4o*")), true, "model prefix");
eq(matches(entry, parse("is:success")), false, "is:success");

// [1, 2^40, bin(2), {"k": [-1, "x"]}, 1.5, null, true]
const mp = Uint8Array.from([0x97, 0x01, 0xcf, 0, 0, 0x01, 0, 0, 0, 0, 0, 0xc4, 2, 0xaa, 0xbb, 0x81, 0xa1, 0x6b, 0x92, 0xff, 0xa1, 0x78,
  0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xc0, 0xc3]);
const { value, end } = decode(mp);
eq(end, mp.length, "msgpack consumed");
eq([value[0], value[1], Array.from(value[2]), [...value[3]], value[4], value[5], value[6]],
  [1, 2 ** 40, [0xaa, 0xbb], [["k", [-1, "x"]]], 1.5, null, true], "msgpack values");

// Witness cosignatures (C2SP tlog-cosignature/v1), made by the crate's CosignatureSigner in
// tests/it/console.rs (COSIGNATURE_VECTOR), checked as src/tlog/cosignature.rs checks them.
const cv = JSON.parse(process.env.COSIGNATURE_VECTOR || "null");
eq(cv !== null, true, "COSIGNATURE_VECTOR given");
const logLine = (n) => n.sigs.find((s) => s.name === "console.test/log");
const wkey = await parseWitnessKey(cv.witness_key);
eq([wkey.name, hex(wkey.id)], ["witness.test/w1", cv.witness_key.split("+")[1]], "the witness key's id, recomputed");
const note = parseNote(cv.note);
const good = await checkCosignatures(note, cv.witness_key, "", logLine(note));
eq({ ok: good.ok, detail: good.detail, items: good.items, time: String(good.verified[0].time) }, {
  ok: true, detail: "1 of the 1 pinned witnesses verified, 1 required",
  items: [{ name: wkey.name + "+" + hex(wkey.id), ok: true, text: "verified (cosigned at 2023-11-14T22:13:20Z)" }], time: String(cv.time),
}, "the Rust cosignature verifies");
const vn = await verifyNote(cv.note, cv.log_key, { keys: cv.witness_key, quorum: "1" });
eq([vn.ok, vn.detail, vn.cosignatures.ok], [true, `signed by the pinned key ${cv.log_key.split("+").slice(0, 2).join("+")}`, true], "the note and its cosignature");
const unpinned = await checkCosignatures(note, "", "", logLine(note));
eq([unpinned.ok, unpinned.detail, unpinned.items.map((i) => [i.name, i.ok, i.text])],
  [true, "cosigned by witness.test/w1 (not checked: no witness key is pinned)", [["witness.test/w1", null, "not checked: no witness key of this name and key id is pinned"]]], "an unpinned witness is listed, not checked");

// Tampered: one byte of the signature, of the timestamp, of the checkpoint body.
const wline = cv.note.split("\n").find((l) => l.startsWith("\u2014 witness.test/w1 "));
const alter = (at) => {
  const b = b64(wline.split(" ")[2]);
  b[at] ^= 1;
  return cv.note.replace(wline, `\u2014 witness.test/w1 ${toB64(b)}`);
};
for (const [what, text] of [["signature", alter(4 + 8 + 63)], ["signature's R", alter(4 + 8)], ["timestamp", alter(4 + 7)], ["checkpoint body", cv.note.replace("\n7\n", "\n8\n")]]) {
  const n = parseNote(text);
  const r = await checkCosignatures(n, cv.witness_key, "", logLine(n));
  eq([r.ok, r.detail, r.items[0].text, r.verified.length], [false, "bad cosignature: the cosignature by witness.test/w1 does not verify", "bad cosignature: it does not verify with this key", 0], `a tampered ${what} is refused`);
}
// Even when the quorum is met without it, as auditmem verify refuses it.
const bad0 = parseNote(alter(4 + 8 + 63));
eq((await checkCosignatures(bad0, cv.witness_key, "0", logLine(bad0))).ok, false, "a bad cosignature fails with quorum 0");
// Another key of the same name: no cosignature from it.
const okey = await parseWitnessKey(cv.other_key);
const other = await checkCosignatures(note, cv.other_key, "", logLine(note));
eq([other.ok, other.detail, other.items.map((i) => [i.name, i.ok, i.text])], [false, "missing cosignatures: 0 of the 1 pinned witnesses verified, 1 required", [
  [`witness.test/w1+${hex(okey.id)}`, false, `no cosignature from witness.test/w1 under this key (its line under key id ${hex(wkey.id)} is not this key's)`],
  ["witness.test/w1", null, "not checked: no witness key of this name and key id is pinned"],
]], "another key of the witness's name");
eq((await checkCosignatures(note, cv.other_key, "0", logLine(note))).ok, true, "quorum 0 needs none");
eq((await checkCosignatures(note, `${cv.witness_key}\n${cv.other_key}`, "2", logLine(note))).detail, "missing cosignatures: 1 of the 1 pinned witnesses verified, 2 required", "two required, one name");
eq((await checkCosignatures(note, cv.witness_key, "x", logLine(note))).detail, "the quorum x is not a whole number", "a malformed quorum");
// Keys: the id recomputed, the type byte 0x04.
const [wn, wid, wb] = cv.witness_key.split("+");
const flipped = `${wn}+${((parseInt(wid, 16) ^ 1) >>> 0).toString(16).padStart(8, "0")}+${wb}`;
eq((await checkCosignatures(note, flipped, "", logLine(note))).detail, "pinned witness key 1 (line 1): the witness key's id does not match its key", "a wrong key id is refused");
eq((await checkCosignatures(note, cv.log_key, "", logLine(note))).detail, "pinned witness key 1 (line 1): the witness key is not a cosignature/v1 Ed25519 key (0x04 and 32 bytes)", "a log key is not a witness key");
// A small-order key whose signature plain Ed25519 accepts: refused, as verify_strict does.
const weak = await parseWitnessKey(cv.weak_key);
const weakSig = b64(cv.weak_line.split(" ")[2]).subarray(4);
const weakMsg = cosignedMessage(BigInt(cv.time), note.body);
const raw = await crypto.subtle.verify({ name: "Ed25519" }, await crypto.subtle.importKey("raw", weak.pub, { name: "Ed25519" }, false, ["verify"]), weakSig.subarray(8), weakMsg);
eq(raw, true, "plain Ed25519 accepts the small-order signature");
const weakNote = parseNote(`${cv.note}${cv.weak_line}\n`);
eq((await checkCosignatures(weakNote, cv.weak_key, "", logLine(weakNote))).detail, "bad cosignature: the cosignature by weak.test/w does not verify", "the small-order key is refused");
eq(await verifyCosignature(wkey, note.body, b64(wline.split(" ")[2]).subarray(4)), BigInt(cv.time), "verifyCosignature returns the time");

console.log(`console units: ${checks} checks passed`);
