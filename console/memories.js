// Memories: browse by type (and by user, agent and session where the API has them), a
// memory's versions, create/edit/delete with the API's own validation messages, erasing a
// user, agent or session scope for good (two steps, then the receipt), and the search playground with its scope fields and `filters` JSON (docs/API.md, "Scopes, metadata
// and filters"). Optional fields (user_id, agent_id, session_id, metadata, expires_at,
// final_score, keyword_score) are shown when responses carry them and sent only when filled,
// so the console works with servers before and after they were added.

import { del, get, patch, post, qs } from "./api.js";
import { errorBox, field, fill, fmtTime, h, jsonBlock, table } from "./dom.js";

const TYPES = ["rule", "fact", "context"];
const SCOPES = ["user_id", "agent_id", "session_id"];
const typeSelect = (id, any) => h(`select#${id}`, any ? h("option", { value: "" }, any) : null, TYPES.map((t) => h("option", { value: t }, t)));
const has = (rows, k) => rows.some((r) => r && r[k] !== undefined && r[k] !== null);
const num = (x, d = 3) => (typeof x === "number" ? x.toFixed(d) : "—");

export function render(main, params) {
  if (params[0]) return renderOne(main, params[0]);
  const st = { page: 1, pageSize: 20 };
  const type = typeSelect("mem-type", "any type");
  const scopes = Object.fromEntries(SCOPES.map((k) => [k, h(`input#filter-${k}`, { type: "text", spellcheck: "false" })]));
  const listBox = h("div#memory-list");
  const browse = h("form.card", { "aria-label": "Browse memories" }, h("h2", "Browse"),
    h("div.row", field("Type", type), SCOPES.map((k) => field(k, scopes[k], "sent only when filled"))),
    h("button", { type: "submit" }, "Show"), listBox);
  browse.addEventListener("submit", (e) => { e.preventDefault(); st.page = 1; list(); });

  async function list() {
    try {
      const q = { memory_type: type.value, page: st.page, page_size: st.pageSize };
      for (const k of SCOPES) q[k] = scopes[k].value.trim();
      const d = await get(`/v1/memories${qs(q)}`);
      const rows = d.memories || [];
      const extra = SCOPES.filter((k) => has(rows, k));
      fill(listBox,
        h("p#memory-count", `${d.total} memories${type.value ? ` of type ${type.value}` : ""} · page ${d.page}`),
        rows.length ? table([
          ["Content", (m) => h("a", { href: `#/memories/${m.id}` }, m.content)],
          ["Type", (m) => m.memory_type],
          ["Importance", (m) => String(m.importance)],
          ...extra.map((k) => [k, (m) => m[k] ?? "—"]),
          ...(has(rows, "expires_at") ? [["Expires", (m) => fmtTime(m.expires_at)]] : []),
          ["Updated", (m) => fmtTime(m.updated_at || m.created_at)],
        ], rows, { label: "Memories" }) : h("p.empty", "No memories."),
        h("div.pager",
          h("button", { type: "button", disabled: st.page > 1 ? null : "", onclick: () => { st.page -= 1; list(); } }, "← Previous"),
          h("button", { type: "button", disabled: st.page * st.pageSize < d.total ? null : "", onclick: () => { st.page += 1; list(); } }, "Next →")));
    } catch (e) {
      fill(listBox, errorBox(e));
    }
  }

  fill(main, h("section", h("h1", "Memories"), createForm(list), browse, playground(), eraseForm(list)));
  list();
  return null;
}

function createForm(onDone) {
  const content = h("textarea#new-content", { rows: "3" });
  const type = typeSelect("new-type");
  const importance = h("input#new-importance", { type: "number", step: "0.05", value: "0.5" });
  const scopes = Object.fromEntries(SCOPES.map((k) => [k, h(`input#new-${k}`, { type: "text" })]));
  const metadata = h("textarea#new-metadata", { rows: "2", placeholder: "{\"source\": \"console\"}" });
  const expires = h("input#new-expires", { type: "datetime-local" });
  const msg = h("div#create-msg");
  const form = h("form.card", { "aria-label": "Create a memory" }, h("h2", "New memory"),
    field("Content", content),
    h("div.row", field("Type", type), field("Importance (0 to 1)", importance)),
    h("details", h("summary", "Scope, metadata, expiry (sent only when filled; servers without them refuse them)"),
      h("div.row", SCOPES.map((k) => field(k, scopes[k]))), field("metadata (JSON object)", metadata), field("expires_at (UTC)", expires)),
    h("button#create-memory", { type: "submit" }, "Create"), msg);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // The values go to the API as typed (a number field left as text stays text) so that
    // the API, not the console, decides what is valid and says so in its own words.
    const body = { content: content.value, memory_type: type.value };
    if (importance.value !== "") body.importance = Number(importance.value);
    for (const k of SCOPES) if (scopes[k].value.trim()) body[k] = scopes[k].value.trim();
    if (metadata.value.trim()) {
      const p = parseJson(metadata.value, "metadata");
      if (p.error) {
        fill(msg, h("div.error", { role: "alert" }, p.error));
        return;
      }
      body.metadata = p.value;
    }
    if (expires.value) body.expires_at = `${expires.value}:00Z`;
    try {
      const m = await post("/v1/memories", body);
      fill(msg, h("p", "Created ", h("a#created-link", { href: `#/memories/${m.id}` }, m.id), "."));
      content.value = "";
      onDone();
    } catch (err) {
      fill(msg, errorBox(err));
    }
  });
  return form;
}

/** `POST /v1/erasures` for a scope: armed by a first click, sent by the second; changing the
 * subject disarms it. The receipt's position and checkpoint are shown as the API gives them. */
function eraseForm(onDone) {
  const scope = h("select#erase-field", SCOPES.map((k) => h("option", { value: k }, k)));
  const value = h("input#erase-value", { type: "text", spellcheck: "false" });
  const msg = h("div#erase-msg");
  const go = h("button.danger#erase-go", { type: "submit" }, "Erase…");
  const disarm = () => { delete go.dataset.armed; go.textContent = "Erase…"; };
  scope.addEventListener("change", disarm);
  value.addEventListener("input", disarm);
  const form = h("form.card", { "aria-label": "Erase a subject" }, h("h2", "Erase"),
    h("p.hint", "Deleting a memory hides it; erasing destroys the keys its data is sealed under, so every copy (history, audit entries, exports) becomes unreadable. It cannot be undone. Needs the memory.erase permission."),
    h("div.row", field("Scope", scope), field("Value", value)), go, msg);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = value.value.trim();
    if (go.dataset.armed !== "1") {
      go.dataset.armed = "1";
      go.textContent = `Confirm: erase ${scope.value} ${v} for good`;
      return;
    }
    disarm();
    try {
      const r = await post("/v1/erasures", { [scope.value]: v });
      const n = r.erased.memories;
      fill(msg, h("p#erase-receipt", `Erased ${n} ${n === 1 ? "memory" : "memories"} of ${scope.value} ${v}: the erasure event is log position ${r.seq}, covered by the signed checkpoint of tree size ${r.checkpoint.seq}.`),
        r.notice ? h("p.warning#erase-notice", r.notice) : null,
        h("details", h("summary", "Receipt (auditmem verify --proof checks it offline)"), jsonBlock(r)));
      onDone();
    } catch (err) {
      fill(msg, errorBox(err));
    }
  });
  return form;
}

/** `text` parsed as JSON, or {error} naming what: the console's own check before any call. */
function parseJson(text, what) {
  try {
    return { value: JSON.parse(text) };
  } catch (e) {
    return { error: `${what} is not JSON (${e.message})` };
  }
}

const compact = (v) => (v === undefined || v === null ? "—" : JSON.stringify(v));

function playground() {
  const query = h("input#search-query", { type: "search" });
  const topK = h("input#search-top-k", { type: "number", value: "5", min: "1", max: "100" });
  const minSim = h("input#search-min", { type: "number", step: "0.05", placeholder: "0" });
  const type = typeSelect("search-type", "any type");
  const mode = h("select#search-mode", h("option", { value: "" }, "server default"), ["semantic", "keyword", "hybrid"].map((m) => h("option", { value: m }, m)));
  const scopes = Object.fromEntries(SCOPES.map((k) => [k, h(`input#search-${k}`, { type: "text", spellcheck: "false" })]));
  const filters = h("textarea#search-filters.filter-json", { rows: "3", spellcheck: "false", placeholder: "{\"metadata.topic\": {\"in\": [\"billing\", \"eu\"]}, \"importance\": {\"gte\": 0.5}}", "aria-describedby": "search-filters-help" });
  const out = h("div#search-results");
  const form = h("form.card", { role: "search", "aria-label": "Search playground" }, h("h2", "Search playground"),
    field("Query", query),
    h("div.row", field("top_k", topK), field("min_similarity", minSim), field("Type", type), field("search_mode", mode, "sent only when chosen")),
    h("div.row", SCOPES.map((k) => field(k, scopes[k], "an eq condition of filters, sent only when filled"))),
    field("filters (JSON)", filters),
    h("small#search-filters-help.hint", "mem0's v2 filters (docs/API.md, Scopes, metadata and filters): fields user_id, agent_id, session_id, memory_type, importance, created_at, updated_at, metadata.<key>; AND, OR, NOT. Sent only when filled, ANDed with the scope fields; the API names any malformed part."),
    h("button#search-go", { type: "submit" }, "Search"), out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { query: query.value };
    if (topK.value !== "") body.top_k = Number(topK.value);
    if (minSim.value !== "") body.min_similarity = Number(minSim.value);
    if (type.value) body.memory_type = type.value;
    if (mode.value) body.search_mode = mode.value;
    // The scope fields are eq conditions; the JSON is sent as typed, for the API to judge.
    const parts = [];
    const scoped = Object.fromEntries(SCOPES.filter((k) => scopes[k].value.trim()).map((k) => [k, scopes[k].value.trim()]));
    if (Object.keys(scoped).length) parts.push(scoped);
    if (filters.value.trim()) {
      const p = parseJson(filters.value, "filters");
      if (p.error) {
        fill(out, h("div.error", { role: "alert" }, p.error));
        return;
      }
      parts.push(p.value);
    }
    if (parts.length) body.filters = parts.length === 1 ? parts[0] : { AND: parts };
    try {
      const d = await post("/v1/memories/search", body);
      const rows = d.results || [];
      const cols = [
        ["#", (_, i) => String(i + 1)],
        ["Content", (r) => h("a", { href: `#/memories/${r.id}` }, r.content)],
        ["Type", (r) => r.memory_type],
        ["score (cosine)", (r) => num(r.score, 6)],
        ["importance", (r) => String(r.importance)],
      ];
      if (has(rows, "keyword_score")) cols.push(["keyword_score", (r) => num(r.keyword_score, 6)]);
      if (has(rows, "final_score")) cols.push(["final_score", (r) => num(r.final_score, 6)]);
      for (const k of SCOPES) if (has(rows, k)) cols.push([k, (r) => r[k] ?? "—"]);
      if (has(rows, "metadata")) cols.push(["metadata", (r) => h("code", compact(r.metadata))]);
      fill(out,
        body.filters ? h("p#search-sent.muted", "filters sent: ", h("code", JSON.stringify(body.filters))) : null,
        h("p#search-count", `${rows.length} ${rows.length === 1 ? "result" : "results"}, in the API's order.`),
        has(rows, "final_score") ? null : h("p.muted", "This server does not return final_score; it ranks by 0.85 × score + 0.15 × importance (docs/API.md)."),
        rows.length ? table(cols, rows, { label: "Search results" }) : h("p.empty", "No results."));
    } catch (err) {
      fill(out, errorBox(err));
    }
  });
  return form;
}

function renderOne(main, id) {
  const out = h("section");
  fill(main, out);
  async function load() {
    let m;
    try {
      m = await get(`/v1/memories/${encodeURIComponent(id)}`);
    } catch (e) {
      fill(out, h("h1", "Memory"), h("p", h("a", { href: "#/memories" }, "← Memories")), errorBox(e));
      history();
      return;
    }
    const content = h("textarea#edit-content", { rows: "3", value: m.content });
    const importance = h("input#edit-importance", { type: "number", step: "0.05", value: String(m.importance) });
    const metaText = m.metadata === undefined || m.metadata === null ? "" : JSON.stringify(m.metadata, null, 2);
    const metadata = h("textarea#edit-metadata.filter-json", { rows: "3", spellcheck: "false", value: metaText });
    const scoped = SCOPES.filter((k) => m[k] !== undefined && m[k] !== null);
    const msg = h("div#edit-msg");
    const edit = h("form.card", { "aria-label": "Edit" }, h("h2", "Edit"), field("Content", content), field("Importance", importance),
      field("metadata (JSON object)", metadata, "Replaces the memory's metadata; emptied, it clears it (null). Sent only when changed."),
      h("p.muted#edit-scopes", `${scoped.length ? `Scope: ${scoped.map((k) => `${k} ${m[k]}`).join(", ")}.` : "No scope."} The API sets scopes at creation only (PATCH takes content, importance, metadata, expires_at).`),
      h("button#save-memory", { type: "submit" }, "Save"), msg);
    edit.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = {};
      if (content.value !== m.content) body.content = content.value;
      if (importance.value !== String(m.importance)) body.importance = importance.value === "" ? null : Number(importance.value);
      if (metadata.value !== metaText) {
        if (!metadata.value.trim()) body.metadata = null;
        else {
          const p = parseJson(metadata.value, "metadata");
          if (p.error) {
            fill(msg, h("div.error", { role: "alert" }, p.error));
            return;
          }
          body.metadata = p.value;
        }
      }
      try {
        await patch(`/v1/memories/${m.id}`, body);
        load();
      } catch (err) {
        fill(msg, errorBox(err));
      }
    });
    const delMsg = h("div#delete-msg");
    const delBtn = h("button.danger#delete-memory", { type: "button" }, "Delete…");
    delBtn.addEventListener("click", async () => {
      // Two steps instead of window.confirm: keyboard- and test-friendly, no modal.
      if (delBtn.dataset.armed !== "1") {
        delBtn.dataset.armed = "1";
        delBtn.textContent = "Confirm delete";
        return;
      }
      try {
        await del(`/v1/memories/${m.id}`);
        fill(delMsg, h("p#deleted", "Deleted."));
        load();
      } catch (err) {
        fill(delMsg, errorBox(err));
      }
    });
    const rest = Object.entries(m).filter(([k]) => !["content"].includes(k));
    fill(out, h("h1", "Memory"), h("p", h("a", { href: "#/memories" }, "← Memories")),
      h("blockquote#memory-content", m.content),
      h("dl.kv", rest.map(([k, v]) => [h("dt", k), h("dd", v !== null && typeof v === "object" ? jsonBlock(v) : String(v ?? "—"))])),
      edit, h("div.card", h("h2", "Delete"), delBtn, delMsg), historyBox);
    history();
  }
  const historyBox = h("section.card#history", h("h2", "History"));
  async function history() {
    if (!historyBox.isConnected) out.append(historyBox);
    try {
      const d = await get(`/v1/memories/${encodeURIComponent(id)}/history`);
      fill(historyBox, h("h2", "History"), h("p#history-summary", `${d.versions.length} versions${d.deleted ? ", deleted" : ""}.`),
        table([
          ["Change", (v) => v.change],
          ["At", (v) => fmtTime(v.at)],
          ["Content", (v) => v.content ?? "—"],
          ["Importance", (v) => (v.importance === undefined ? "—" : String(v.importance))],
          ["Log seq", (v) => String(v.seq)],
          ["Audit entry", (v) => (v.audit_id ? h("a", { href: `#/audit/${v.audit_id}` }, v.audit_id.slice(0, 8)) : "—")],
        ], d.versions, { label: "Versions", class: "history" }));
    } catch (e) {
      fill(historyBox, h("h2", "History"), errorBox(e));
    }
  }
  load();
  return null;
}
