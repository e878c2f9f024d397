// The console's pure modules under node (no browser): BLAKE3 against the reference values
// that tests/it/console.rs computes with the blake3 crate (BLAKE3_VECTORS: {length: hex} of
// the inputs i % 251), the qualifier parser, and the MessagePack reader. Exits 1 at the first
// mismatch, named.

import { blake3 } from "../../console/blake3.js";
import { decode } from "../../console/msgpack.js";
import { matches, parse } from "../../console/qualifiers.js";

let checks = 0;
function eq(got, want, what) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
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

console.log(`console units: ${checks} checks passed`);
