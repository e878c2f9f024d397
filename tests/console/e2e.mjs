// The console end to end, in Debian's chromium through playwright-core, against a real server
// that tests/it/console.rs started and seeded. Exits 0 when every check passed, 1 at the first
// failed one (named), and prints one line a check.
//
// Env: CONSOLE_URL (the server's base URL), ADMIN_TOKEN, KEY_A (a business tenant "acme" with
// every permission, three gateway.chat entries, one a 429 of gpt-4o-mini), KEY_B (a pro tenant
// "globex"), MEMORY_A (a memory id of acme), VERIFIER_KEY (the log's C2SP verifier key),
// WITNESS_KEY (the cosignature verifier key of a real witness that cosigned the latest
// checkpoint), WRONG_WITNESS_KEY (another key under the witness's name), SCREENSHOTS (a
// directory for the screenshots, optional), CHROMIUM (default /usr/bin/chromium).

import { env, ok, eq, checks, launch } from "./harness.mjs";
import fs from "node:fs";
import path from "node:path";
import os from "node:os";

const URL_ = env("CONSOLE_URL"), ADMIN = env("ADMIN_TOKEN"), KEY_A = env("KEY_A"), KEY_B = env("KEY_B");
const VKEY = env("VERIFIER_KEY"), MEMORY_A = env("MEMORY_A");
const WKEY = env("WITNESS_KEY"), WRONG_WKEY = env("WRONG_WITNESS_KEY");
const [WNAME, WID] = WKEY.split("+");
// The time a note's cosignature line by the witness carries (its first 8 bytes after the key
// id), read here independently of the console, as RFC 3339.
function cosignedAt(note) {
  const line = note.split("\n").find((l) => l.startsWith(`\u2014 ${WNAME} `));
  if (!line) throw new Error(`FAILED: no cosignature line by ${WNAME} in ${note}`);
  const t = Buffer.from(line.split(" ")[2], "base64").readBigUInt64BE(4);
  return new Date(Number(t) * 1000).toISOString().replace(".000Z", "Z");
}
const SHOTS = process.env.SCREENSHOTS || "";
const started = Date.now();

const browser = await launch();
const problems = [];
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: URL_ });
const page = await context.newPage();
// Any script error or CSP violation fails the run: the policy must hold on every screen.
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
page.on("console", (m) => {
  if (m.type() === "error" && !/the server responded with a status of 4\d\d/.test(m.text())) problems.push(`console: ${m.text()}`);
});
// Generous: CI runs this beside other tests on two cores; an idle run takes about 12 s.
page.setDefaultTimeout(30000);

const text = async (sel) => (await page.locator(sel).innerText()).trim();
async function shot(name) {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: false });
}
async function signIn(token) {
  await page.goto(`${URL_}/console/`);
  await page.locator("input[name=token]").fill(token);
  // The keyboard alone: Enter submits the form.
  await page.locator("input[name=token]").press("Enter");
}
async function signOut() {
  await page.locator("#signout").click();
  await page.locator("input[name=token]").waitFor();
  eq(await page.evaluate(() => sessionStorage.length), 0, "session storage after sign-out (the key is forgotten)");
}

try {
  // --- sign in ---------------------------------------------------------------------------
  await signIn("amk_not-a-key");
  await page.locator(".error").waitFor();
  eq(await text(".error"), "Error 401 · code 4010: unknown API key", "a wrong key's error");
  await shot("sign-in");
  await signIn(KEY_A);
  await page.locator("#count").waitFor();
  const cookies = await context.cookies();
  eq(cookies.length, 0, "cookies set");
  ok(await page.locator('nav a[href="#/operator"]').count() === 0, "no operator link for a tenant key");

  // --- audit list: qualifiers --------------------------------------------------------------
  await page.locator("#q").fill("action:gateway.chat status:4xx");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("1 of"));
  eq(await text("#count"), "1 of the 3 entries on this page match status/model/other qualifiers (filtered in the browser; the API cannot filter them). 3 entries in the range.", "filtered count");
  eq(await page.locator("table.entries tbody tr").count(), 1, "rows after status:4xx");
  eq(await page.locator("table.entries tbody tr td:nth-child(4)").innerText(), "gpt-4o-mini", "the 429's model");
  eq(await page.locator("table.entries tbody tr td:nth-child(3)").innerText(), "429", "its status");
  ok((await page.locator("table.entries tbody tr td:nth-child(7)").innerText()).endsWith("…"), "the per-tenant hash shown (business plan)");
  await page.locator("#q").fill("action:gateway.chat model:gpt-4o");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("2 of"));
  eq(await page.locator("table.entries tbody tr").count(), 2, "rows of model:gpt-4o (exact)");
  await page.locator("#q").fill("bogus:1");
  await page.locator("#q").press("Enter");
  await page.locator("#list-notes .error").waitFor();
  ok((await text("#list-notes .error")).startsWith("unknown qualifier bogus:"), "an unknown qualifier is named");
  await page.locator("#q").fill("action:gateway.chat");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("3 entries in the range"));
  eq(await page.locator("table.entries tbody tr").count(), 3, "gateway.chat rows");
  await page.waitForFunction(() => document.querySelector("#retention")?.textContent);
  ok((await text("#retention")).startsWith("Retention window of your plan: 365 days (entries since "), "the business plan's retention window", await text("#retention"));
  await shot("audit-list");

  // cursor paging: two to a page
  await page.locator("#page-size").selectOption("20");
  await page.locator("#q").fill("");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => /^(\d+) entries in the range/.exec(document.querySelector("#count")?.textContent || "")?.[1] > 3);
  const total = Number((await text("#count")).split(" ")[0]);
  ok(total >= 6, "the whole list counts the seeded entries and the console's own calls", total);

  // live updates: an entry ingested now appears without a reload
  await page.locator("#q").fill("action:rag.query");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("1 entries"));
  const r = await fetch(`${URL_}/admin/v1/audit/logs`, {
    method: "POST",
    headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" },
    body: JSON.stringify({ entries: [{ tenant_id: process.env.TENANT_A, action: "rag.query", http_status: 200, rag_query: ["live"] }] }),
  });
  eq(r.status, 200, "ingest while the list is open");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("2 entries"), null, { timeout: 20000 });
  eq(await page.locator("table.entries tbody tr").count(), 2, "rows after the live update");

  // --- entry detail and proof --------------------------------------------------------------
  // The keyboard: the first Tab stop of a fresh page is the skip link.
  await page.reload();
  await page.locator("#count").waitFor();
  await page.keyboard.press("Tab");
  eq(await page.evaluate(() => document.activeElement?.textContent), "Skip to content", "the first Tab stop");
  await page.keyboard.press("Enter");
  eq(await page.evaluate(() => `${document.activeElement?.id} ${location.hash}`), "main #/audit", "the skip link focuses the content, the route stays");
  await page.locator("#q").fill("action:gateway.chat status:429");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("1 of"));
  // The keyboard: an entry opens with Enter.
  await page.locator("table.entries tbody tr a").first().focus();
  await page.keyboard.press("Enter");
  await page.locator("#entry").waitFor();
  const entryId = decodeURIComponent(page.url().split("#/audit/")[1]);
  const dd = async (k) => (await page.locator(`#entry dt:text-is("${k}") + dd`).innerText()).trim();
  eq(await dd("id"), entryId, "detail id");
  eq(await dd("http_status"), "429", "detail status");
  eq(await dd("error_msg"), "rate limited", "detail error_msg");
  eq((await dd("hash")).length, 64, "detail hash length");
  eq(JSON.parse(await page.locator('details:has(summary:text-is("request_body")) pre').innerText()).model, "gpt-4o-mini", "request body, pretty-printed");

  await page.locator("#verifier-key").fill(VKEY);
  await page.locator("#get-proof").click();
  await page.locator("#proof dl").waitFor();
  await page.locator("#verify").click();
  await page.locator("#verdict").waitFor();
  ok(await page.locator("#verdict").getAttribute("data-ok") === "true", "the proof verifies in the browser", await text("#proof-result"));
  const verdict = await text("#verdict");
  ok(verdict.startsWith(`Verified. Proven: audit entry ${entryId}, with its exact content and time, is record `), "the verdict says what was proven", verdict);
  eq(await page.locator("ol.steps > li.ok").count(), 8, "checks passed");
  // No witness key pinned: the witness's cosignature is listed, not checked.
  const step2 = () => text('ol.steps > li[data-step="cosignatures"]');
  eq(await step2(), `✓ cosignatures: cosigned by ${WNAME} (not checked: no witness key is pinned)\n${WNAME}: not checked: no witness key of this name and key id is pinned`, "an unpinned cosignature is listed, not checked");

  // The witness's key pinned: its cosignature is checked in the browser.
  const proofNote = await page.locator("#proof pre").textContent();
  const at = cosignedAt(proofNote);
  const pd = async (k) => (await page.locator(`#proof dt:text-is("${k}") + dd`).innerText()).trim();
  await page.locator("#witness-keys").fill(WKEY);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.dataset.ok === "true" && document.querySelector("#proof-witnesses"));
  eq(await step2(), `✓ cosignatures: 1 of the 1 pinned witnesses verified, 1 required\n${WNAME}+${WID}: verified (cosigned at ${at})`, "the pinned witness's cosignature verifies");
  eq(await text("#verdict"), `Verified. Proven: audit entry ${entryId}, with its exact content and time, is record ${await pd("seq")} of the log ${VKEY.split("+")[0]}, whose tree of size ${await pd("tree_size")} (root ${await pd("root_hash")}) is signed by the pinned key. It is cosigned by the pinned witness ${WNAME} (at ${at}): each stated at that time that this tree head is consistent with every earlier one of this log it had cosigned. A log that later drops or changes this record cannot be consistent with this checkpoint.`, "the verdict names the witness and what it stated");
  eq(await page.evaluate(() => localStorage.getItem("auditmem.console.witness_keys")), WKEY, "the witness key is kept in local storage");
  await page.locator("#proof-section").scrollIntoViewIfNeeded();
  await shot("verify-proof");
  // Another key under the witness's name: no cosignature from it, the step fails.
  await page.locator("#witness-keys").fill(WRONG_WKEY);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.dataset.ok === "false");
  eq(await text("#verdict"), "Rejected: missing cosignatures: 0 of the 1 pinned witnesses verified, 1 required", "a wrong witness key is refused");
  eq(await step2(), `✗ cosignatures: missing cosignatures: 0 of the 1 pinned witnesses verified, 1 required\n${WNAME}+${WRONG_WKEY.split("+")[1]}: no cosignature from ${WNAME} under this key (its line under key id ${WID} is not this key's)\n${WNAME}: not checked: no witness key of this name and key id is pinned`, "the wrong key's step names the missing cosignature");
  // The right key, a quorum of 2 with one witness pinned: refused.
  await page.locator("#witness-keys").fill(WKEY);
  await page.locator("#witness-quorum").fill("2");
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.textContent.includes("2 required"));
  eq(await text("#verdict"), "Rejected: missing cosignatures: 1 of the 1 pinned witnesses verified, 2 required", "a quorum above the witnesses that cosigned");
  await page.locator("#witness-quorum").fill("");
  // The witness's cosignature with one signature byte changed: a bad cosignature.
  await page.route("**/proof", async (route) => {
    const resp = await route.fetch();
    const body = await resp.json();
    const line = body.data.checkpoint.split("\n").find((l) => l.startsWith(`\u2014 ${WNAME} `));
    const sig = Buffer.from(line.split(" ")[2], "base64");
    sig[sig.length - 1] ^= 1;
    body.data.checkpoint = body.data.checkpoint.replace(line, `\u2014 ${WNAME} ${sig.toString("base64")}`);
    await route.fulfill({ response: resp, json: body });
  });
  await page.locator("#get-proof").click();
  await page.waitForTimeout(200);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.textContent.includes("bad cosignature"));
  eq(await text("#verdict"), `Rejected: bad cosignature: the cosignature by ${WNAME} does not verify`, "a tampered cosignature is refused");
  eq(await text("#proof-witnesses"), `${WNAME}+${WID}: bad cosignature: it does not verify with this key`, "the tampered cosignature's line");
  await page.unroute("**/proof");
  await page.locator("#get-proof").click();
  await page.waitForTimeout(200);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.dataset.ok === "true");

  // A tampered audit path: the browser must refuse it.
  await page.route("**/proof", async (route) => {
    const resp = await route.fetch();
    const body = await resp.json();
    const h = Buffer.from(body.data.inclusion[0], "base64");
    h[0] ^= 1;
    body.data.inclusion[0] = h.toString("base64");
    await route.fulfill({ response: resp, json: body });
  });
  await page.locator("#get-proof").click();
  await page.waitForTimeout(200);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.dataset.ok === "false");
  const leaf = await page.locator('#proof dt:text-is("leaf_index") + dd').innerText();
  eq(await text("#verdict"), `Rejected: wrong root: the inclusion path from leaf ${leaf.trim()} does not lead to the signed root`, "a tampered path is rejected");
  await page.locator("#proof-result").scrollIntoViewIfNeeded();
  await shot("verify-tampered");
  await page.unroute("**/proof");
  // A tampered record (its last byte, inside the event): the BLAKE3 check refuses it.
  await page.route("**/proof", async (route) => {
    const resp = await route.fetch();
    const body = await resp.json();
    const rec = Buffer.from(body.data.record, "base64");
    rec[rec.length - 1] ^= 1;
    body.data.record = rec.toString("base64");
    await route.fulfill({ response: resp, json: body });
  });
  await page.locator("#get-proof").click();
  await page.waitForTimeout(200);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.dataset.ok === "false" && document.querySelector("#verdict").textContent.includes("record"));
  eq(await text("#verdict"), "Rejected: the record does not match its hash", "a tampered record is rejected");
  await page.unroute("**/proof");
  // A checkpoint under another key: the pinned key refuses it.
  await page.locator("#verifier-key").fill(VKEY.replace(/^[^+]+/, "other.example/log"));
  await page.locator("#get-proof").click();
  await page.waitForTimeout(200);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.textContent.includes("key"));
  eq(await text("#verdict"), "Rejected: the verifier key's id does not match its key", "another key is refused");
  await page.locator("#verifier-key").fill(VKEY);
  await page.locator("#verify").click();
  await page.waitForFunction(() => document.querySelector("#verdict")?.dataset.ok === "true");

  // --- exports -------------------------------------------------------------------------------
  await page.goto(`${URL_}/console/#/exports`);
  await page.locator("#export-format").selectOption("json");
  await page.locator("#export-create").click();
  await page.waitForFunction(() => document.querySelector("#export-state")?.dataset.status === "completed", null, { timeout: 30000 });
  const records = Number(await page.locator('#export-status dt:text-is("records") + dd').innerText());
  ok(records >= 6, "export records", records);
  const [download] = await Promise.all([page.waitForEvent("download"), page.locator("#export-download").click()]);
  const file = path.join(os.tmpdir(), `console-e2e-${process.pid}.json`);
  await download.saveAs(file);
  const rows = JSON.parse(fs.readFileSync(file, "utf8"));
  fs.rmSync(file);
  eq(rows.length, records, "downloaded rows");
  ok(/^audit-export-[0-9a-f-]{36}\.json$/.test(download.suggestedFilename()), "download file name", download.suggestedFilename());
  eq(rows.every((row) => typeof row.hash === "string" && typeof row.chain_index === "number"), true, "rows carry the chain (business)");
  await page.locator("#manifest summary").click();
  eq(JSON.parse(await page.locator("#manifest pre").innerText()).records, records, "manifest records");
  await shot("exports");

  // --- integrity: the public checkpoint's signature, checked against the pinned key ---------
  await page.goto(`${URL_}/console/#/integrity`);
  eq(await page.locator("#pin-key").inputValue(), VKEY, "the pinned key is remembered");
  await page.locator("#check-note").click();
  await page.locator("#note-verdict").waitFor();
  eq(await text("#note-verdict"), `Signature valid: signed by the pinned key ${VKEY.split("+").slice(0, 2).join("+")}.`, "the checkpoint's signature");
  eq(await page.locator("#witness-keys").inputValue(), WKEY, "the pinned witness key is remembered");
  eq(await text("#cosign-verdict"), "Cosignatures: 1 of the 1 pinned witnesses verified, 1 required.", "the checkpoint's cosignatures");
  eq(await text("#checkpoint-witnesses"), `${WNAME}+${WID}: verified (cosigned at ${cosignedAt(await page.locator("#checkpoint pre").textContent())})`, "the witness's cosignature on the Integrity screen");
  await shot("integrity");
  await page.locator("#witness-keys").fill(WRONG_WKEY);
  await page.locator("#check-note").click();
  await page.waitForFunction(() => document.querySelector("#cosign-verdict")?.dataset.ok === "false");
  eq(await text("#cosign-verdict"), "Cosignatures rejected: missing cosignatures: 0 of the 1 pinned witnesses verified, 1 required.", "the Integrity screen refuses a wrong witness key");
  await page.locator("#witness-keys").fill(WKEY);
  await page.locator("#check-note").click();
  await page.waitForFunction(() => document.querySelector("#cosign-verdict")?.dataset.ok === "true");

  // --- memories ------------------------------------------------------------------------------
  await page.goto(`${URL_}/console/#/memories`);
  await page.locator("#memory-count").waitFor();
  await page.locator("#new-content").fill("The user is allergic to peanuts");
  await page.locator("#new-type").selectOption("fact");
  await page.locator("#new-importance").fill("2");
  await page.locator("#create-memory").click();
  await page.locator("#create-msg .error").waitFor();
  eq(await text("#create-msg .error"), "Error 400 · code 4000: importance must be a number from 0.0 to 1.0", "the API's validation message");
  await page.locator("#new-importance").fill("0.9");
  await page.locator("#create-memory").click();
  await page.locator("#created-link").waitFor();
  await page.waitForFunction(() => document.querySelector("#memory-count")?.textContent.startsWith("2 memories"));
  await shot("memories");
  await page.locator("#search-query").fill("Which foods could make them ill?");
  await page.locator("#search-top-k").fill("1");
  await page.locator("#search-go").click();
  await page.locator("#search-count").waitFor();
  eq(await text("#search-count"), "1 result, in the API's order.", "search results");
  eq(await page.locator("#search-results tbody tr:first-child td:nth-child(2)").innerText(), "The user is allergic to peanuts", "best match");
  await shot("search");
  await page.locator("#created-link").click();
  await page.locator("#edit-content").waitFor();
  await page.locator("#edit-content").fill("The user is severely allergic to peanuts");
  await page.locator("#save-memory").click();
  await page.waitForFunction(() => document.querySelector("#memory-content")?.textContent === "The user is severely allergic to peanuts");
  await page.waitForFunction(() => document.querySelector("#history-summary")?.textContent === "2 versions.");
  await page.locator("#edit-importance").fill("-1");
  await page.locator("#save-memory").click();
  await page.locator("#edit-msg .error").waitFor();
  eq(await text("#edit-msg .error"), "Error 400 · code 4000: importance must be a number from 0.0 to 1.0", "an edit's validation message");
  await shot("memory-history");
  await page.locator("#delete-memory").click();
  eq(await page.locator("#delete-memory").innerText(), "Confirm delete", "delete asks to confirm");
  await page.locator("#delete-memory").click();
  await page.waitForFunction(() => document.querySelector("#history-summary")?.textContent === "3 versions, deleted.");
  eq(await page.locator("#history tbody tr td:first-child").allInnerTexts().then((t) => t.join(",")), "created,updated,deleted", "history changes");
  ok((await text("main .error")).startsWith("Error 404 · code 4040"), "the deleted memory is gone");
  // Replay the search recorded above as of its log position: the memory it found is
  // rewritten and deleted since, yet the replay finds it again, in the recorded place.
  const searched = await page.evaluate(async (k) => {
    const auth = { headers: { Authorization: `Bearer ${k}` } };
    const list = await (await fetch("/v1/audit/logs?action=memory.search&page_size=1", auth)).json();
    const id = list.data.logs[0].id;
    const detail = await (await fetch(`/v1/audit/logs/${id}`, auth)).json();
    return { id, results: detail.data.memory_results.map((r) => r.id) };
  }, KEY_A);
  eq(searched.results.length, 1, "the recorded search found one memory");
  await page.goto(`${URL_}/console/#/audit/${searched.id}`);
  await page.locator("#replay").click();
  await page.locator("#replay-verdict").waitFor();
  eq(await page.locator("#replay-verdict").getAttribute("data-same"), "true", "the replay gives the recorded results");
  eq(await page.locator("#replay-table tbody tr td:nth-child(3)").allInnerTexts().then((t) => t.join(",")), searched.results.join(","), "the replayed ids");
  eq(await page.locator("#replay-table tbody tr td:nth-child(2)").allInnerTexts().then((t) => t.join(",")), searched.results.join(","), "the recorded ids beside them");
  await shot("search-replay");

  // Scopes, metadata and the search filter: two memories of two users, one filter that
  // selects one of them.
  await page.goto(`${URL_}/console/#/memories`);
  await page.locator("#memory-count").waitFor();
  await page.locator('form[aria-label="Create a memory"] summary').click();
  for (const [content, user, meta] of [
    ["Alice prefers answers in Spanish", "alice", '{"topic": "language", "tier": "gold"}'],
    ["Bob prefers answers in French", "bob", '{"topic": "language", "tier": "silver"}'],
  ]) {
    await page.locator("#new-content").fill(content);
    await page.locator("#new-type").selectOption("rule");
    await page.locator("#new-importance").fill("0.5");
    await page.locator("#new-user_id").fill(user);
    await page.locator("#new-metadata").fill(meta);
    const before = await page.locator("#created-link").count() ? await page.locator("#created-link").innerText() : "";
    await page.locator("#create-memory").click();
    await page.waitForFunction((b) => document.querySelector("#created-link") && document.querySelector("#created-link").textContent !== b, before);
  }
  const bobId = await page.locator("#created-link").innerText();
  await page.locator("#search-query").fill("Which language should answers be in?");
  await page.locator("#search-top-k").fill("5");
  await page.locator("#search-min").fill("-1");
  await page.locator("#search-filters").fill('{"metadata.tier": "gold"}');
  await page.locator("#search-go").click();
  await page.waitForFunction(() => document.querySelector("#search-sent")?.textContent.includes("gold"));
  eq(await text("#search-sent"), 'filters sent: {"metadata.tier":"gold"}', "the filter sent");
  eq(await text("#search-count"), "1 result, in the API's order.", "the filter selects one memory");
  const cell = async (name) => {
    const heads = await page.locator("#search-results thead th").allInnerTexts();
    return page.locator(`#search-results tbody tr:first-child td:nth-child(${heads.indexOf(name) + 1})`).innerText();
  };
  eq(await cell("Content"), "Alice prefers answers in Spanish", "the filtered result");
  eq(await cell("user_id"), "alice", "its user_id");
  eq(await cell("metadata"), '{"tier":"gold","topic":"language"}', "its metadata, as the API returns it (keys sorted)");
  // A scope field alone: Bob's.
  await page.locator("#search-filters").fill("");
  await page.locator("#search-user_id").fill("bob");
  await page.locator("#search-go").click();
  await page.waitForFunction(() => document.querySelector("#search-sent")?.textContent.includes("bob"));
  eq(await text("#search-sent"), 'filters sent: {"user_id":"bob"}', "the scope field as a filter");
  eq(await page.locator("#search-results tbody tr td:nth-child(2)").allInnerTexts().then((t) => t.join("|")), "Bob prefers answers in French", "the scope selects Bob's memory");
  // Both, ANDed: none matches.
  await page.locator("#search-filters").fill('{"metadata.tier": "gold"}');
  await page.locator("#search-go").click();
  await page.waitForFunction(() => document.querySelector("#search-sent")?.textContent.includes("AND"));
  eq(await text("#search-sent"), 'filters sent: {"AND":[{"user_id":"bob"},{"metadata.tier":"gold"}]}', "scope and filter ANDed");
  eq(await text("#search-count"), "0 results, in the API's order.", "bob has no gold memory");
  await page.locator("#search-user_id").fill("");
  // A malformed filter: the API's 400, its code and message.
  await page.locator("#search-filters").fill('{"owner": "alice"}');
  await page.locator("#search-go").click();
  await page.locator("#search-results .error").waitFor();
  eq(await text("#search-results .error"), "Error 400 · code 4000: filters.owner: unknown field; filter on user_id, agent_id, session_id, memory_type, importance, created_at, updated_at, occurred_at or metadata.<key>, or AND, OR, NOT", "a malformed filter's API error");
  // Not JSON: said here, nothing sent.
  const notJson = '{"user_id": ';
  await page.locator("#search-filters").fill(notJson);
  await page.locator("#search-go").click();
  await page.waitForFunction(() => document.querySelector("#search-results .error")?.textContent.startsWith("filters is not JSON"));
  const parseMsg = await page.evaluate((t) => { try { JSON.parse(t); return ""; } catch (e) { return e.message; } }, notJson);
  eq(await text("#search-results .error"), `filters is not JSON (${parseMsg})`, "a filter that is not JSON");
  // Edit Bob's metadata: PATCH replaces it.
  await page.goto(`${URL_}/console/#/memories/${bobId}`);
  await page.locator("#edit-metadata").waitFor();
  eq(await text("#edit-scopes"), "Scope: user_id bob. The API sets scopes at creation only (PATCH takes content, importance, metadata, expires_at).", "the scope shown on edit");
  await page.locator("#edit-metadata").fill('{"topic": "language", "tier": "gold"}');
  await page.locator("#save-memory").click();
  await page.waitForFunction(() => document.querySelector("#history-summary")?.textContent === "2 versions.");
  eq(JSON.parse(await page.locator('dt:text-is("metadata") + dd pre').innerText()).tier, "gold", "the edited metadata");
  await page.locator("#edit-metadata").fill("[1]");
  await page.locator("#save-memory").click();
  await page.locator("#edit-msg .error").waitFor();
  eq(await text("#edit-msg .error"), "Error 400 · code 4000: metadata must be a JSON object", "metadata that is not an object");
  // Erase Bob's scope: a first click asks to confirm, the second erases and shows the receipt.
  await page.goto(`${URL_}/console/#/memories`);
  await page.locator("#erase-value").waitFor();
  await page.locator("#erase-field").selectOption("user_id");
  await page.locator("#erase-value").fill("bob");
  await page.locator("#erase-go").click();
  eq(await page.locator("#erase-go").innerText(), "Confirm: erase user_id bob for good", "erasure asks to confirm");
  await page.locator("#erase-go").click();
  await page.locator("#erase-receipt").waitFor();
  ok(/^Erased 1 memory of user_id bob: the erasure event is log position \d+, covered by the signed checkpoint of tree size \d+\.$/.test(await text("#erase-receipt")), "the erasure's receipt", await text("#erase-receipt"));
  await signOut();

  // --- another tenant sees nothing of acme's --------------------------------------------------
  await signIn(KEY_B);
  await page.locator("#count").waitFor();
  await page.locator("#q").fill("action:gateway.chat");
  await page.locator("#q").press("Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("1 entries"));
  eq(await page.locator("table.entries tbody tr td:nth-child(4)").innerText(), "globex-model", "globex sees only its own entry");
  await page.goto(`${URL_}/console/#/audit/${entryId}`);
  await page.locator("main .error").waitFor();
  ok((await text("main .error")).startsWith("Error 404 · code 4040"), "acme's entry is 404 for globex");
  await page.goto(`${URL_}/console/#/memories/${MEMORY_A}`);
  await page.locator("main .error").first().waitFor();
  ok((await page.locator("main .error").first().innerText()).startsWith("Error 404 · code 4040"), "acme's memory is 404 for globex");
  await page.goto(`${URL_}/console/#/operator`);
  await page.locator("main .error").waitFor();
  eq(await text("main .error"), "Error 403 · code -: the operator view needs the admin token; a tenant key cannot open it", "the operator view refuses a tenant key");
  const adminWithKey = await page.evaluate(async (k) => (await fetch("/admin/v1/tenants", { headers: { Authorization: `Bearer ${k}` } })).status, KEY_B);
  eq(adminWithKey, 401, "the admin API refuses a tenant key");
  await signOut();

  // --- operator --------------------------------------------------------------------------------
  await signIn(ADMIN);
  await page.locator("#tenant-count").waitFor();
  eq(await text("#tenant-count"), "2 tenants", "tenants listed");
  await page.locator("#metric-figures").waitFor();
  await page.locator("#log-head dl").waitFor();
  await shot("operator");
  await page.locator('button[data-tenant="globex"]').click();
  await page.locator("#perm-memory-write").uncheck();
  await page.locator("#issue-key").click();
  await page.locator("#new-api-key").waitFor();
  const newKey = await page.locator("#new-api-key").inputValue();
  ok(/^amk_[A-Za-z0-9_-]{43}$/.test(newKey), "a new key is shown once", newKey.slice(0, 4));
  await page.locator("#copy-key").click();
  await page.locator("#copy-msg:text-is('Copied.')").waitFor();
  eq(await page.evaluate(() => navigator.clipboard.readText()), newKey, "the copy button copies the key");
  const asKey = (k) => fetch(`${URL_}/v1/audit/logs?page_size=1`, { headers: { Authorization: `Bearer ${k}` } }).then((x) => x.status);
  eq(await asKey(newKey), 200, "the new key works");
  await page.locator("#metric-figures").waitFor();
  ok(await page.locator("#metrics svg rect.chart-bar").count() >= 3, "the metrics chart has bars");
  ok(/^\d+$/.test(await page.locator('#metric-figures dt:text-is("requests") + dd').innerText()), "request total shown");
  await page.locator("#log-head dl").waitFor();
  eq(await page.locator('#log-head dt:text-is("verifier key") + dd').innerText(), VKEY, "the verifier key shown");
  await page.locator("#metrics").scrollIntoViewIfNeeded();
  await shot("operator-metrics");
  await page.locator("#issued button[data-key]").first().click();
  await page.locator("#revoked").waitFor();
  ok((await text("#revoked")).startsWith("Key "), "revoked message");
  eq(await asKey(newKey), 401, "the revoked key is refused");

  // --- a narrow window (and so 200% zoom of a 720 px one): nothing wider than the viewport ---
  await page.setViewportSize({ width: 360, height: 780 });
  await signOut();
  await signIn(KEY_A);
  await page.locator("#count").waitFor();
  const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  eq(await overflow(), 0, "horizontal overflow of the audit list at 360 px");
  await shot("narrow");
  await page.goto(`${URL_}/console/#/audit/${entryId}`);
  await page.locator("#get-proof").click();
  await page.locator("#proof dl").waitFor();
  eq(await overflow(), 0, "horizontal overflow of an entry and its proof at 360 px");
  await page.goto(`${URL_}/console/#/memories`);
  await page.locator("#memory-count").waitFor();
  eq(await overflow(), 0, "horizontal overflow of the memories at 360 px");
  await signOut();
  await signIn(ADMIN);
  await page.locator("#metric-figures").waitFor();
  eq(await overflow(), 0, "horizontal overflow of the operator view at 360 px");

  ok(problems.length === 0, "no script error or CSP violation", problems);
  console.log(`console e2e: ${checks()} checks passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  await browser.close();
} catch (e) {
  console.error(e.message);
  if (problems.length) console.error(problems.join("\n"));
  try {
    if (SHOTS) await page.screenshot({ path: path.join(os.tmpdir(), "console-e2e-failure.png") });
  } catch {
    /* best effort */
  }
  await browser.close();
  process.exit(1);
}
