// What the console's browser scripts share: their environment, their named checks (one line a
// check, the first failed one thrown with its name) and Debian's chromium through playwright-core.

import { chromium } from "playwright-core";

/** The environment variable `k`; exits 2 (a wrong call, not a failed check) when it is unset. */
export function env(k) {
  const v = process.env[k];
  if (!v) {
    console.error(`missing env ${k}`);
    process.exit(2);
  }
  return v;
}

let count = 0;

/** How many checks passed so far. */
export const checks = () => count;

/** A named check: prints `ok N what`, or throws `FAILED: what: got detail`. */
export function ok(cond, what, detail) {
  if (!cond) throw new Error(`FAILED: ${what}${detail === undefined ? "" : `: got ${JSON.stringify(detail)}`}`);
  count += 1;
  console.log(`ok ${count} ${what}`);
}

/** A check that `got` is exactly `want`. */
export const eq = (got, want, what) => ok(got === want, `${what} = ${JSON.stringify(want)}`, got);

/** Headless chromium (CHROMIUM, default /usr/bin/chromium); playwright never fetches one. */
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}
