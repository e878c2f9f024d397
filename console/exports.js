// Exports: create one (format, range), watch it until it completes, download the file, read
// its signed manifest and the command that checks it offline. The API has no list of a
// tenant's exports, so the console remembers the ids it created in this tab.

import { call, get, post } from "./api.js";
import { errorBox, field, fill, fmtTime, h, jsonBlock } from "./dom.js";

const MINE = "auditmem.console.exports";
const POLL_MS = 1000;
const remembered = () => JSON.parse(sessionStorage.getItem(MINE) || "[]");
const remember = (id) => sessionStorage.setItem(MINE, JSON.stringify([id, ...remembered().filter((x) => x !== id)].slice(0, 20)));

export function render(main, params) {
  const format = h("select#export-format", h("option", { value: "csv" }, "CSV"), h("option", { value: "json" }, "JSON"));
  const start = h("input#export-start", { type: "datetime-local" });
  const end = h("input#export-end", { type: "datetime-local" });
  const msg = h("div#export-msg");
  const status = h("div#export-status");
  const list = h("ul.plain#export-list");
  const timers = new Set();
  const form = h("form.card",
    h("h2", "New export"),
    h("div.row", field("Format", format), field("From (UTC, empty: the start of your retention window)", start), field("To (UTC, empty: now)", end)),
    h("button#export-create", { type: "submit" }, "Create export"), msg);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { format: format.value };
    if (start.value) body.start_time = `${start.value}:00Z`;
    if (end.value) body.end_time = `${end.value}:00Z`;
    fill(msg);
    try {
      const d = await post("/v1/audit/logs/export", body);
      remember(d.export_id);
      fill(msg, h("p", `Export ${d.export_id} started: ${d.estimated_records} records estimated.`));
      showList();
      watch(d.export_id);
    } catch (err) {
      fill(msg, errorBox(err));
    }
  });

  function showList() {
    fill(list, remembered().map((id) => h("li", h("button.link", { type: "button", onclick: () => watch(id) }, id))));
  }

  function watch(id) {
    for (const t of timers) clearTimeout(t);
    timers.clear();
    const tick = async () => {
      let d;
      try {
        d = await get(`/v1/audit/logs/export/${id}`);
      } catch (e) {
        fill(status, errorBox(e));
        return;
      }
      show(d);
      if (d.status === "processing") timers.add(setTimeout(tick, POLL_MS));
    };
    tick();
  }

  function show(d) {
    const pct = d.status === "completed" ? 100 : d.estimated_records ? Math.min(99, Math.round((100 * (d.records || 0)) / d.estimated_records)) : 0;
    const dl = h("button#export-download", { type: "button", disabled: d.status === "completed" ? null : "" }, "Download");
    const dlMsg = h("span");
    dl.addEventListener("click", async () => {
      try {
        const { blob, headers } = await call("GET", `/v1/audit/logs/export/${d.export_id}/download`, { as: "blob" });
        const name = /filename="([^"]+)"/.exec(headers.get("content-disposition") || "")?.[1] || `audit-export-${d.export_id}.${d.format}`;
        const a = h("a", { href: URL.createObjectURL(blob), download: name });
        document.body.append(a);
        a.click();
        a.remove();
        fill(dlMsg, ` ${name}, ${blob.size} bytes.`);
      } catch (e) {
        fill(dlMsg, errorBox(e));
      }
    });
    fill(status, h("section.card",
      h("h2", `Export ${d.export_id}`),
      h("p#export-state", { "data-status": d.status }, `Status: ${d.status}`, d.error ? ` (${d.error})` : ""),
      h("progress", { max: "100", value: String(pct), "aria-label": "Export progress" }, `${pct}%`),
      h("dl.kv", [["format", d.format], ["range", `${fmtTime(d.start_time)} – ${fmtTime(d.end_time)}`], ["records", d.records ?? `≈${d.estimated_records}`],
        ["file size", d.file_size ?? "—"], ["file BLAKE3", d.file_blake3 ?? "—"], ["created", fmtTime(d.created_at)], ["completed", fmtTime(d.completed_at)], ["expires", fmtTime(d.expires_at)]]
        .map(([k, v]) => [h("dt", k), h("dd", String(v))])),
      h("div.row", dl, dlMsg),
      d.manifest ? h("details#manifest", h("summary", "Signed manifest"), jsonBlock(d.manifest, "manifest")) : null,
      d.status === "completed" ? h("div", h("h3", "Verify it offline"),
        h("pre.cmd", `curl -s -H "Authorization: Bearer $KEY" $URL/v1/audit/logs/export/${d.export_id}/manifest -o export.manifest.json\nauditmem verify --export ${`audit-export-${d.export_id}.${d.format}`} --manifest export.manifest.json --pubkey $PUBKEY`),
        h("p.muted", "Exit 0: every row is there, unmodified, in chain order (Business and Custom plans carry the chain); 1: tampered; 2: could not run. docs/VERIFYING.md says what it proves.")) : null));
  }

  fill(main, h("section", h("h1", "Exports"),
    h("p", "Pro plans and above. One export runs at a time; files are kept for the service's export TTL."),
    form, h("h2", "Exports started in this tab"), list, status));
  showList();
  if (params[0]) watch(params[0]);
  return () => { for (const t of timers) clearTimeout(t); };
}
