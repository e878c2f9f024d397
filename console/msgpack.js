// A MessagePack reader for what a log record holds (ARCHITECTURE.md, "Record format"): enough
// to read the record's seq, hashes and event, and the audit entry's id inside the event.
// Maps come back as Map (their keys may be anything), binaries as Uint8Array.

export function decode(bytes) {
  const r = { b: bytes, v: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), p: 0 };
  const value = read(r);
  return { value, end: r.p };
}

function need(r, n) {
  if (r.p + n > r.b.length) throw new Error("msgpack: truncated");
}

function u64(r) {
  need(r, 8);
  const n = r.v.getBigUint64(r.p);
  r.p += 8;
  return n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
}

function i64(r) {
  need(r, 8);
  const n = r.v.getBigInt64(r.p);
  r.p += 8;
  return n <= BigInt(Number.MAX_SAFE_INTEGER) && n >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(n) : n;
}

function uint(r, n) {
  need(r, n);
  let x = 0;
  for (let i = 0; i < n; i++) x = x * 256 + r.b[r.p + i];
  r.p += n;
  return x;
}

function bytes(r, n) {
  need(r, n);
  const out = r.b.subarray(r.p, r.p + n);
  r.p += n;
  return out;
}

const str = (r, n) => new TextDecoder().decode(bytes(r, n));
function arr(r, n) {
  const a = [];
  for (let i = 0; i < n; i++) a.push(read(r));
  return a;
}
function map(r, n) {
  const m = new Map();
  for (let i = 0; i < n; i++) {
    const k = read(r);
    m.set(k, read(r));
  }
  return m;
}

function read(r) {
  need(r, 1);
  const t = r.b[r.p++];
  if (t <= 0x7f) return t;
  if (t >= 0xe0) return t - 0x100;
  if ((t & 0xf0) === 0x80) return map(r, t & 0x0f);
  if ((t & 0xf0) === 0x90) return arr(r, t & 0x0f);
  if ((t & 0xe0) === 0xa0) return str(r, t & 0x1f);
  switch (t) {
    case 0xc0: return null;
    case 0xc2: return false;
    case 0xc3: return true;
    case 0xc4: return bytes(r, uint(r, 1));
    case 0xc5: return bytes(r, uint(r, 2));
    case 0xc6: return bytes(r, uint(r, 4));
    case 0xc7: { const n = uint(r, 1); r.p += 1; return bytes(r, n); }
    case 0xc8: { const n = uint(r, 2); r.p += 1; return bytes(r, n); }
    case 0xc9: { const n = uint(r, 4); r.p += 1; return bytes(r, n); }
    case 0xca: { need(r, 4); const x = r.v.getFloat32(r.p); r.p += 4; return x; }
    case 0xcb: { need(r, 8); const x = r.v.getFloat64(r.p); r.p += 8; return x; }
    case 0xcc: return uint(r, 1);
    case 0xcd: return uint(r, 2);
    case 0xce: return uint(r, 4);
    case 0xcf: return u64(r);
    case 0xd0: { need(r, 1); const x = r.v.getInt8(r.p); r.p += 1; return x; }
    case 0xd1: { need(r, 2); const x = r.v.getInt16(r.p); r.p += 2; return x; }
    case 0xd2: { need(r, 4); const x = r.v.getInt32(r.p); r.p += 4; return x; }
    case 0xd3: return i64(r);
    case 0xd4: r.p += 1; return bytes(r, 1);
    case 0xd5: r.p += 1; return bytes(r, 2);
    case 0xd6: r.p += 1; return bytes(r, 4);
    case 0xd7: r.p += 1; return bytes(r, 8);
    case 0xd8: r.p += 1; return bytes(r, 16);
    case 0xd9: return str(r, uint(r, 1));
    case 0xda: return str(r, uint(r, 2));
    case 0xdb: return str(r, uint(r, 4));
    case 0xdc: return arr(r, uint(r, 2));
    case 0xdd: return arr(r, uint(r, 4));
    case 0xde: return map(r, uint(r, 2));
    case 0xdf: return map(r, uint(r, 4));
    default: throw new Error(`msgpack: unknown type byte 0x${t.toString(16)}`);
  }
}
