// The console on a split admin listener (`--admin-listen`), in Debian's chromium through
// playwright-core, against a real server that tests/it/console.rs started. The console served
// on the admin listener reaches the admin API there (its operator view works); the one on the
// main listener says where the admin API is. Exits 0 when every check passed, 1 at the first
// failed one (named), and prints one line a check.
//
// Env: PUBLIC_URL (the main listener), ADMIN_URL (the admin listener), ADMIN_TOKEN, CHROMIUM
// (default /usr/bin/chromium).

import { env, ok, eq, checks, launch } from "./harness.mjs";

const PUBLIC = env("PUBLIC_URL"), ADMIN_URL = env("ADMIN_URL"), ADMIN = env("ADMIN_TOKEN");
const browser = await launch();
const problems = [];
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.setDefaultTimeout(30000);
  const signIn = async (base) => {
    await page.goto(`${base}/console/`);
    await page.locator("input[name=token]").fill(ADMIN);
    await page.locator("input[name=token]").press("Enter");
  };

  // On the main listener the admin API is not served, and the console says where it is.
  await signIn(PUBLIC);
  await page.locator("form.signin .error").waitFor();
  eq(
    (await page.locator("form.signin .error").innerText()).trim(),
    "Error 404 · code 4040: the admin API is served on the admin listener (--admin-listen), not on this one",
    "the main listener's console names the admin listener",
  );

  // On the admin listener the operator view works: tenants, the log head, the metrics.
  await signIn(ADMIN_URL);
  await page.locator("#tenant-count").waitFor();
  eq((await page.locator("#tenant-count").innerText()).trim(), "2 tenants", "tenants listed on the admin listener");
  await page.locator("#log-head dl").waitFor();
  ok(/^\d+$/.test(await page.locator('#log-head dt:text-is("head seq") + dd').innerText()), "the log head shown");
  await page.locator("#metric-figures").waitFor();
  ok(/^\d+$/.test(await page.locator('#metric-figures dt:text-is("requests") + dd').innerText()), "the metrics shown");
  eq(problems.length, 0, "no page error");
  console.log(`all ${checks()} checks passed`);
} catch (e) {
  console.error(e.message);
  for (const p of problems) console.error(p);
  await browser.close();
  process.exit(1);
}
await browser.close();
