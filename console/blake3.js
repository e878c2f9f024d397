// BLAKE3 (256-bit output), after the reference implementation's portable code. WebCrypto has
// no BLAKE3, and the log's record hash is one, so the console recomputes it here to check that
// a proof's record is the bytes its hash commits to. Records are small (a few KiB at most), so
// this plain version is fast enough; it is checked against the reference's test vectors in the
// browser test and against every record the server proves.

const IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const PERM = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8;
const CHUNK = 1024, BLOCK = 64;

function g(s, a, b, c, d, x, y) {
  s[a] = (s[a] + s[b] + x) | 0;
  s[d] = ((s[d] ^ s[a]) >>> 16) | ((s[d] ^ s[a]) << 16);
  s[c] = (s[c] + s[d]) | 0;
  s[b] = ((s[b] ^ s[c]) >>> 12) | ((s[b] ^ s[c]) << 20);
  s[a] = (s[a] + s[b] + y) | 0;
  s[d] = ((s[d] ^ s[a]) >>> 8) | ((s[d] ^ s[a]) << 24);
  s[c] = (s[c] + s[d]) | 0;
  s[b] = ((s[b] ^ s[c]) >>> 7) | ((s[b] ^ s[c]) << 25);
}

function compress(cv, m, counter, len, flags) {
  const s = new Int32Array([...cv, IV[0], IV[1], IV[2], IV[3], counter % 0x100000000, Math.floor(counter / 0x100000000), len, flags]);
  let w = Int32Array.from(m);
  for (let r = 0; r < 7; r++) {
    g(s, 0, 4, 8, 12, w[0], w[1]);
    g(s, 1, 5, 9, 13, w[2], w[3]);
    g(s, 2, 6, 10, 14, w[4], w[5]);
    g(s, 3, 7, 11, 15, w[6], w[7]);
    g(s, 0, 5, 10, 15, w[8], w[9]);
    g(s, 1, 6, 11, 12, w[10], w[11]);
    g(s, 2, 7, 8, 13, w[12], w[13]);
    g(s, 3, 4, 9, 14, w[14], w[15]);
    w = Int32Array.from(PERM, (i) => w[i]);
  }
  for (let i = 0; i < 8; i++) {
    s[i] ^= s[i + 8];
    s[i + 8] ^= cv[i];
  }
  return s;
}

function words(bytes, off, len) {
  const w = new Int32Array(16);
  for (let i = 0; i < len; i++) w[i >> 2] |= bytes[off + i] << (8 * (i & 3));
  return w;
}

/** The pending output of a chunk or parent node: compressed with ROOT only if it is the root. */
function chunkOutput(input, start, end, counter) {
  let cv = IV;
  let off = start;
  let flags = CHUNK_START;
  for (;;) {
    const len = Math.min(BLOCK, end - off);
    const last = off + len >= end;
    const f = flags | (last ? CHUNK_END : 0);
    const m = words(input, off, len);
    if (last) return { cv, m, counter, len, flags: f };
    cv = Array.from(compress(cv, m, counter, len, f).subarray(0, 8));
    off += len;
    flags = 0;
  }
}

const cvOf = (o) => Array.from(compress(o.cv, o.m, o.counter, o.len, o.flags).subarray(0, 8));
const parent = (l, r) => ({ cv: IV, m: Int32Array.from([...l, ...r]), counter: 0, len: BLOCK, flags: PARENT });

/** BLAKE3 of `input` (Uint8Array): 32 bytes. */
export function blake3(input) {
  const chunks = Math.max(1, Math.ceil(input.length / CHUNK));
  const stack = [];
  for (let i = 0; i < chunks - 1; i++) {
    let cv = cvOf(chunkOutput(input, i * CHUNK, (i + 1) * CHUNK, i));
    let total = i + 1;
    while ((total & 1) === 0) {
      cv = cvOf(parent(stack.pop(), cv));
      total >>= 1;
    }
    stack.push(cv);
  }
  let out = chunkOutput(input, (chunks - 1) * CHUNK, input.length, chunks - 1);
  while (stack.length) out = parent(stack.pop(), cvOf(out));
  const s = compress(out.cv, out.m, out.counter, out.len, out.flags | ROOT);
  const bytes = new Uint8Array(32);
  for (let i = 0; i < 8; i++) for (let j = 0; j < 4; j++) bytes[4 * i + j] = (s[i] >>> (8 * j)) & 0xff;
  return bytes;
}
