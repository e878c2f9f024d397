// The audit log: the list (time presets, the qualifier box, cursor paging, live updates), an
// entry's detail with its bodies and hashes, its inclusion proof verified in the browser; and
// the Integrity section (the latest checkpoint, its cosignatures, the pinned verifier key).

import { ApiError, get, post, qs } from "./api.js";
import { errorBox, fill, fmtTime, h, jsonBlock, table, field } from "./dom.js";
import { matches, parse } from "./qualifiers.js";
import { checkCosignatures, parseNote, verifyNote, verifyProof } from "./verify.js";

const PIN = "auditmem.console.verifier_key";
const WITNESS_KEYS = "auditmem.console.witness_keys";
const WITNESS_QUORUM = "auditmem.console.witness_quorum";
const VERIFIED = "auditmem.console.last_verified";
const POLL_MS = 5000;
const PRESETS = [["1h", 3600e3], ["24h", 86400e3], ["7d", 7 * 86400e3], ["30d", 30 * 86400e3], ["all", null]];

// The public verifier key is not a secret: pinning it across tabs (localStorage) is the point.
export const pinned = {
  get: () => localStorage.getItem(PIN) || "",
  set: (v) => (v ? localStorage.setItem(PIN, v.trim()) : localStorage.removeItem(PIN)),
};

// Witness verifier keys (one a line) and the quorum K ("" for all pinned): public too, kept
// across tabs like the log's key; typed or pasted by the person, never fetched.
export const pinnedWitnesses = {
  get: () => ({ keys: localStorage.getItem(WITNESS_KEYS) || "", quorum: localStorage.getItem(WITNESS_QUORUM) || "" }),
  set: ({ keys, quorum }) => {
    const k = keys.split("\n").map((l) => l.trim()).filter(Boolean).join("\n");
    if (k) localStorage.setItem(WITNESS_KEYS, k);
    else localStorage.removeItem(WITNESS_KEYS);
    if (quorum.trim()) localStorage.setItem(WITNESS_QUORUM, quorum.trim());
    else localStorage.removeItem(WITNESS_QUORUM);
  },
};

/** The pinned witness keys and quorum fields: {el, value(), save()}. */
function witnessFields() {
  const saved = pinnedWitnesses.get();
  const keys = h("textarea#witness-keys", { rows: "2", spellcheck: "false", placeholder: "witness.example/w1+keyid+base64 (one a line)", value: saved.keys });
  const quorum = h("input#witness-quorum", { type: "number", min: "0", step: "1", placeholder: "all pinned", value: saved.quorum });
  const value = () => ({ keys: keys.value, quorum: quorum.value });
  return {
    el: h("div.row.witness-pins",
      field("Pinned witness keys", keys, "C2SP cosignature verifier keys (name+keyid+base64), one a line, from the witnesses' operators (auditmem witness pubkey), obtained out of band. Kept in this browser's local storage; they are public."),
      field("Quorum K", quorum, "How many pinned witnesses must have cosigned; empty: all of them.")),
    value,
    save: () => pinnedWitnesses.set(value()),
  };
}

/** A cosignature check's per-witness lines. */
function witnessList(items, id) {
  if (!items || !items.length) return null;
  return h(`ul.witnesses#${id}`, items.map((i) => h("li", { class: i.ok === true ? "ok" : i.ok === false ? "bad" : "muted", "data-witness": i.name },
    h("code", i.name), `: ${i.text}`)));
}

export function render(main, params) {
  if (params[0]) return renderDetail(main, params[0]);
  return renderList(main);
}

let listState = { q: "", preset: "all", pageSize: 50 };

function renderList(main) {
  const st = { ...listState, cursors: [null], index: 0, timer: null, topId: null, pending: 0 };
  const qInput = h("input#q", { type: "search", value: st.q, placeholder: "action:memory.write status:4xx model:gpt-4o after:2026-11-01", spellcheck: "false", "aria-describedby": "q-help" });
  const size = h("select#page-size", [20, 50, 100].map((n) => h("option", { value: n, selected: n === st.pageSize ? "" : null }, String(n))));
  const live = h("input#live", { type: "checkbox", checked: true });
  const presets = h("div.presets", { role: "group", "aria-label": "Time range" },
    PRESETS.map(([id]) => h("button", { type: "button", "data-preset": id, "aria-pressed": String(id === st.preset), onclick: () => { st.preset = id; load(true); } }, id === "all" ? "Retention window" : `Last ${id}`)));
  const notes = h("div#list-notes");
  const body = h("div#list");
  const pager = h("div.pager");
  const retention = h("p#retention.muted");
  const form = h("form.filters", { role: "search" },
    field("Search", qInput),
    h("small#q-help.hint", "Qualifiers: action:, after:, before: are filtered by the API; status:, model:, project:, gateway:, ip:, is:success|failure|cached and free words only within the loaded page."),
    h("div.row", presets, field("Per page", size), h("label.inline", live, " Live (every 5 s)"), h("button", { type: "submit" }, "Apply")));
  form.addEventListener("submit", (e) => { e.preventDefault(); load(true); });
  fill(main, h("section", h("h1", "Audit log"), retention, form, notes, body, pager));

  async function fetchPage(cursor) {
    const parsed = parse(qInput.value);
    const preset = PRESETS.find(([id]) => id === st.preset);
    const server = { ...parsed.server };
    if (!server.start_time && preset[1]) server.start_time = new Date(Date.now() - preset[1]).toISOString();
    const data = await get(`/v1/audit/logs${qs({ ...server, page_size: st.pageSize, cursor })}`);
    return { parsed, data };
  }

  async function load(reset) {
    st.q = qInput.value;
    st.pageSize = Number(size.value);
    listState = { q: st.q, preset: st.preset, pageSize: st.pageSize };
    for (const b of presets.querySelectorAll("button")) b.setAttribute("aria-pressed", String(b.dataset.preset === st.preset));
    if (reset) {
      st.cursors = [null];
      st.index = 0;
    }
    const parsed = parse(qInput.value);
    if (parsed.errors.length) {
      fill(notes, h("div.error", { role: "alert" }, parsed.errors.join("; ")));
      fill(body);
      return;
    }
    try {
      const { data } = await fetchPage(st.cursors[st.index]);
      show(parsed, data);
      if (st.index === 0) st.topId = data.logs[0]?.id || null;
      st.pending = 0;
      if (!retention.textContent) showRetention(data.logs, retention);
    } catch (e) {
      fill(notes, errorBox(e));
      fill(body);
    }
  }

  function show(parsed, data) {
    const rows = data.logs.filter((e) => matches(e, parsed));
    const filtered = parsed.client.length || parsed.words.length;
    fill(notes,
      h("p#count", filtered
        ? `${rows.length} of the ${data.logs.length} entries on this page match status/model/other qualifiers (filtered in the browser; the API cannot filter them). ${data.total} entries in the range.`
        : `${data.total} entries in the range · page ${st.index + 1}, ${data.logs.length} shown, newest first.`));
    const anyHash = rows.some((e) => e.hash);
    fill(body, rows.length ? table([
      ["Time (UTC)", (e) => h("a", { href: `#/audit/${e.id}` }, fmtTime(e.created_at))],
      ["Action", (e) => h("code", e.action)],
      ["Status", (e) => h("span", { class: e.is_success ? "ok" : "bad" }, String(e.http_status))],
      ["Model", (e) => e.model_id || "—"],
      ["Duration", (e) => (e.duration == null ? "—" : `${Math.round(e.duration)} ms`)],
      ["Credits", (e) => String(e.credits_consumed)],
      ...(anyHash ? [["Hash", (e) => h("code.hash", { title: e.hash || "" }, e.hash ? `${e.hash.slice(0, 12)}…` : "—")]] : []),
    ], rows, { label: "Audit entries", class: "entries" }) : h("p.empty", "No entries."));
    fill(pager,
      h("button", { type: "button", disabled: st.index === 0 ? "" : null, onclick: () => { st.index -= 1; load(false); } }, "← Newer"),
      h("button#older", { type: "button", disabled: data.next_cursor ? null : "", onclick: () => { st.cursors[st.index + 1] = data.next_cursor; st.index += 1; load(false); } }, "Older →"));
  }

  async function poll() {
    if (!live.checked || document.hidden) return;
    try {
      const { data } = await fetchPage(null);
      const top = data.logs[0]?.id || null;
      if (st.index === 0) {
        // On the newest page the list simply follows the log.
        if (top !== st.topId) {
          st.topId = top;
          show(parse(qInput.value), data);
        }
      } else if (top !== st.topId) {
        st.pending += 1;
        fill(notes, h("p", "New entries arrived. ", h("button.link", { type: "button", onclick: () => load(true) }, "Show newest")));
      }
    } catch {
      /* the next poll tries again; the visible page stays */
    }
  }

  load(true);
  st.timer = setInterval(poll, POLL_MS);
  return () => clearInterval(st.timer);
}

/**
 * The retention window as the server applied it: a list call's own audit entry records the
 * effective range after clamping (`response_ref["audit.list"].from`, microseconds), and a
 * tenant key cannot read its plan otherwise. A call with a narrower range records that range,
 * so the widest of the newest three such entries is taken: the console's first, unbounded
 * list is among them.
 */
async function showRetention(logs, el) {
  const own = logs.filter((e) => e.action === "audit.list" && e.is_success).slice(0, 3);
  let best = null;
  for (const e of own) {
    try {
      const d = await get(`/v1/audit/logs/${e.id}`);
      const ref = d.response_ref && d.response_ref["audit.list"];
      if (!ref || ref.from === undefined || ref.from === null) continue;
      const from = typeof ref.from === "number" ? new Date(ref.from / 1000) : new Date(ref.from);
      const days = Math.round((new Date(d.created_at) - from) / 86400e3);
      if (!isNaN(days) && (!best || days > best.days)) best = { days, from };
    } catch {
      /* optional: the list works without it */
    }
  }
  if (best) fill(el, `Retention window of your plan: ${best.days} days (entries since ${fmtTime(best.from.toISOString())} are readable; older ones are never returned).`);
}

const DETAIL = ["request_body", "response_body", "input_content", "output_content", "rag_query", "rag_results", "memory_query", "memory_results", "response_ref", "metadata", "tokens"];

function renderDetail(main, id) {
  const out = h("section");
  fill(main, out);
  fill(out, h("p.muted", "Loading…"));
  (async () => {
    let d;
    try {
      d = await get(`/v1/audit/logs/${encodeURIComponent(id)}`);
    } catch (e) {
      fill(out, h("h1", "Audit entry"), h("p", h("a", { href: "#/audit" }, "← Audit log")), errorBox(e));
      return;
    }
    const scalar = Object.entries(d).filter(([k, v]) => !DETAIL.includes(k) && (v === null || typeof v !== "object"));
    fill(out,
      h("h1", "Audit entry"),
      h("p", h("a", { href: "#/audit" }, "← Audit log")),
      h("dl.kv#entry", scalar.map(([k, v]) => [h("dt", k), h("dd", k.endsWith("hash") && v ? h("code.hash", v) : v === null ? "—" : String(v))])),
      DETAIL.filter((k) => d[k] !== undefined && d[k] !== null).map((k) => h("details", { open: ["request_body", "response_body"].includes(k) ? "" : null }, h("summary", k), jsonBlock(d[k], k))),
      replaySection(d),
      proofSection(d.id));
  })();
}

/**
 * A recorded `memory.search`: run the recorded request again with `as_of` the entry's log
 * position (its record's seq, which the proof route gives), and show the results beside the
 * recorded ones. Nothing for another entry, or one whose request body is gone (erased).
 */
function replaySection(d) {
  const asked = d.request_body;
  if (d.action !== "memory.search" || !asked || typeof asked !== "object" || Array.isArray(asked)) return null;
  const recorded = (d.memory_results || []).map((r) => r.id);
  const box = h("div#replay-result");
  const btn = h("button#replay", { type: "button" }, "Replay this search as of then");
  btn.addEventListener("click", async () => {
    fill(box, h("p.muted", "Replaying…"));
    try {
      const { seq } = await get(`/v1/audit/logs/${encodeURIComponent(d.id)}/proof`);
      const r = await post("/v1/memories/search", { ...asked, as_of: seq });
      const replayed = r.results.map((x) => x.id);
      const same = replayed.length === recorded.length && replayed.every((id, i) => id === recorded[i]);
      const n = Math.max(recorded.length, replayed.length);
      const rows = Array.from({ length: n }, (_, i) => i);
      const embedder = r.as_of && r.as_of.embedder_changed
        ? h("p.verdict.bad#replay-embedder", `The embedder differs: the query is embedded by ${r.as_of.query_model} now, the memories then by ${(r.as_of.memory_models || []).join(", ")}; the ranking may differ for that reason alone.`)
        : null;
      fill(box,
        h("p#replay-verdict", { class: same ? "verdict ok" : "verdict bad", "data-same": String(same), role: "status" },
          same ? `Same: the store as of log position ${seq} gives the recorded results in the recorded order.`
            : `Different: the store as of log position ${seq} gives other results than were recorded.`),
        embedder,
        table([["#", (i) => String(i + 1)], ["recorded", (i) => recorded[i] ? h("code", recorded[i]) : "—"],
          ["replayed", (i) => replayed[i] ? h("code", replayed[i]) : "—"],
          ["", (i) => (recorded[i] === replayed[i] ? "same" : "different")]], rows, { label: "recorded and replayed results", class: "replay" }));
      box.querySelector("table").id = "replay-table";
    } catch (e) {
      fill(box, errorBox(e));
    }
  });
  return h("section.card#replay-section", h("h2", "Replay this search"),
    h("p.muted", "Runs the recorded request again over the tenant's memories as they stood right after this entry's log position (as_of), and compares the results with the recorded ones."),
    h("div.row", btn), box);
}

function proofSection(id) {
  const keyInput = h("input#verifier-key", { type: "text", value: pinned.get(), spellcheck: "false", placeholder: "origin+keyid+base64" });
  const result = h("div#proof-result");
  const proofBox = h("div#proof");
  let proof = null;
  const verifyBtn = h("button#verify", { type: "button", disabled: "" }, "Verify in browser");
  const fetchBtn = h("button#get-proof", { type: "button" }, "Get inclusion proof");
  fetchBtn.addEventListener("click", async () => {
    try {
      proof = await get(`/v1/audit/logs/${encodeURIComponent(id)}/proof`);
      verifyBtn.removeAttribute("disabled");
      fill(proofBox, h("dl.kv", [
        ["seq", proof.seq], ["leaf_index", proof.leaf_index], ["tree_size", proof.tree_size],
        ["root_hash", proof.root_hash], ["record_hash", proof.record_hash], ["audit path", `${proof.inclusion.length} hashes`],
      ].map(([k, v]) => [h("dt", k), h("dd", h("code", String(v)))])),
      h("details", h("summary", "checkpoint (C2SP signed note)"), h("pre.json", proof.checkpoint || "—")));
    } catch (e) {
      fill(proofBox, errorBox(e));
    }
  });
  const wit = witnessFields();
  verifyBtn.addEventListener("click", async () => {
    pinned.set(keyInput.value);
    wit.save();
    fill(result, h("p.muted", "Verifying…"));
    const r = await verifyProof(proof, keyInput.value, wit.value());
    if (r.ok) localStorage.setItem(VERIFIED, new Date().toISOString());
    const unproven = r.witnesses && r.witnesses.length
      ? "that the pinned witnesses are independent of the log's operator (that is your choice of keys)"
      : "that every reader sees the same log (pin witness keys you trust to check their cosignatures)";
    const notProven = `Not proven: ${unproven}, that the content is true (only that it is what was recorded), or that you hold all your entries (an export's signed manifest and the per-tenant chain prove a complete range).`;
    fill(result,
      h("p#verdict", { class: r.ok ? "verdict ok" : "verdict bad", "data-ok": String(r.ok), role: "status" },
        r.ok ? "Verified. " : "Rejected: ", r.ok ? r.proven : r.failure),
      h("ol.steps", r.steps.map((s) => h("li", { class: s.ok ? "ok" : "bad", "data-step": s.name }, h("span.mark", { "aria-hidden": "true" }, s.ok ? "✓ " : "✗ "), h("strong", s.name), ": ", s.detail,
        witnessList(s.items, "proof-witnesses")))),
      r.ok ? h("p.muted#not-proven", notProven) : null);
  });
  return h("section.card#proof-section", h("h2", "Inclusion proof"),
    field("Pinned verifier key", keyInput, "The log's C2SP verifier key, from your operator (auditmem admin pubkey → verifier_key), obtained out of band. Kept in this browser's local storage; it is public."),
    wit.el,
    h("div.row", fetchBtn, verifyBtn), proofBox, result);
}

/** Integrity: the latest checkpoint (public), its cosignatures, the pinned key. */
export function renderIntegrity(main, role) {
  const keyInput = h("input#pin-key", { type: "text", value: pinned.get(), spellcheck: "false", placeholder: "origin+keyid+base64" });
  const out = h("div#checkpoint");
  const verdict = h("div#checkpoint-verdict");
  const last = localStorage.getItem(VERIFIED);
  async function load() {
    try {
      const note = await get("/log/checkpoint", { as: "text", token: "" });
      const n = parseNote(note);
      fill(out, h("dl.kv", [["origin", n.origin], ["tree size", n.size], ["root", n.root],
        ["signatures", n.sigs.map((s) => s.name).join(", ")]].map(([k, v]) => [h("dt", k), h("dd", h("code", String(v)))])),
      h("details", h("summary", "The note"), h("pre.json", note)));
      return note;
    } catch (e) {
      fill(out, e instanceof ApiError && e.status === 404 ? h("p", "No checkpoint has been signed yet.") : errorBox(e));
      return null;
    }
  }
  const wit = witnessFields();
  const check = h("button#check-note", { type: "button" }, "Check the signature in the browser");
  check.addEventListener("click", async () => {
    pinned.set(keyInput.value);
    wit.save();
    const note = await load();
    if (!note) return;
    const r = await verifyNote(note, keyInput.value, wit.value());
    const co = r.cosignatures;
    fill(listed);
    fill(verdict,
      h("p#note-verdict", { class: r.ok ? "verdict ok" : "verdict bad", role: "status" }, r.ok ? `Signature valid: ${r.detail}.` : `Rejected: ${r.detail}.`),
      co ? h("p#cosign-verdict", { class: co.ok ? "verdict ok" : "verdict bad", "data-ok": String(co.ok) },
        co.ok ? `Cosignatures: ${co.detail}.` : `Cosignatures rejected: ${co.detail}.`) : null,
      co ? witnessList(co.items, "checkpoint-witnesses") : null);
  });
  // Listed as soon as the note is loaded: unchecked until the button above is pressed.
  const listed = h("div#cosignatures");
  const loadAndList = async () => {
    const note = await load();
    if (!note) return;
    try {
      const n = parseNote(note);
      const co = await checkCosignatures(n, "", "", n.sigs.find((x) => x.name === n.origin));
      fill(listed, h("p.muted", `Cosignatures: ${co.detail}. Pin witness keys and press the button to check them.`));
    } catch {
      fill(listed);
    }
  };
  fill(main, h("section", h("h1", "Integrity"),
    h("p", "The latest signed tree head of the transparency log (GET /log/checkpoint, public) and the witnesses that cosigned it. The log's signature is checked against the pinned verifier key; each cosignature whose witness name and key id match a pinned witness key is checked (Ed25519 cosignature/v1, C2SP tlog-cosignature) and at least K of the pinned witnesses must have cosigned; the others are listed, not checked."),
    h("p.muted", `Last proof verified in this browser: ${last ? fmtTime(last) : "never"}. The service does not publish when an auditor last ran auditmem verify; run it yourself (docs/VERIFYING.md).`),
    role === "tenant" ? h("p.muted", "Your plan's retention window is shown on the audit log; business and custom plans show each entry's per-tenant chain hash.") : null,
    field("Pinned verifier key", keyInput), wit.el, check, verdict, listed, out));
  loadAndList();
  return null;
}
