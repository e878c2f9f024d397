// The operator view (admin token): tenants and plans, keys (issued once, with a copy button;
// revoked by id), the log head and checkpoints, the verifier key, and /metrics.

import { del, get, patch, post } from "./api.js";
import { errorBox, field, fill, fmtTime, h, table } from "./dom.js";
import { barChart, figures, parseProm, sparkline } from "./metrics.js";
import { pinned } from "./audit.js";

const PLANS = ["free", "basic", "pro", "business", "custom"];
const RETENTION = { free: "7 days", basic: "30 days", pro: "90 days", business: "365 days", custom: "--custom-retention-days (365 by default)" };
const PERMS = ["audit.read", "audit.export", "memory.read", "memory.write", "memory.erase", "webhooks.manage"];
// Erasing cannot be undone, and a webhook sends the tenant's events to a URL: a key gets
// either only when the operator ticks it.
const UNTICKED = new Set(["memory.erase", "webhooks.manage"]);
const ISSUED = "auditmem.console.issued_keys";
const POLL_MS = 5000;

export function render(main) {
  const tenantsBox = h("div#tenants");
  const keyBox = h("div#key-result");
  const logBox = h("div#log-head");
  const metricsBox = h("div#metrics");
  const issuedBox = h("div#issued");
  const rates = [];
  let lastTotal = null, lastAt = null;

  async function tenants() {
    try {
      const d = await get("/admin/v1/tenants");
      fill(tenantsBox, h("p#tenant-count", `${d.total} tenants`), table([
        ["Name", (t) => t.name],
        ["Plan", (t) => planSelect(t)],
        ["Retention", (t) => RETENTION[t.plan] || "—"],
        ["Subscription", (t) => (t.subscription_active ? "active" : "inactive")],
        ["Credits", (t) => String(t.credits)],
        ["Created", (t) => fmtTime(t.created_at)],
        ["Key", (t) => h("button", { type: "button", "data-tenant": t.name, onclick: () => issueForm(t) }, "Issue key…")],
      ], d.tenants, { label: "Tenants" }));
    } catch (e) {
      fill(tenantsBox, errorBox(e));
    }
  }

  function planSelect(t) {
    const s = h("select", { "aria-label": `Plan of ${t.name}` }, PLANS.map((p) => h("option", { value: p, selected: p === t.plan ? "" : null }, p)));
    s.addEventListener("change", async () => {
      try {
        await patch(`/admin/v1/tenants/${t.id}`, { plan: s.value });
        tenants();
      } catch (e) {
        fill(keyBox, errorBox(e));
      }
    });
    return s;
  }

  function issueForm(t) {
    const name = h("input#key-name", { type: "text" });
    const boxes = PERMS.map((p) => h("input", { type: "checkbox", value: p, checked: !UNTICKED.has(p), id: `perm-${p.replace(".", "-")}` }));
    const form = h("form.card#issue-form", h("h3", `Issue a key for ${t.name}`), field("Name (optional)", name),
      h("fieldset", h("legend", "Permissions"), boxes.map((b) => h("label.inline", b, ` ${b.value}`))),
      h("button#issue-key", { type: "submit" }, "Issue key"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = { permissions: boxes.filter((b) => b.checked).map((b) => b.value) };
      if (name.value.trim()) body.name = name.value.trim();
      try {
        const k = await post(`/admin/v1/tenants/${t.id}/keys`, body);
        const issued = JSON.parse(sessionStorage.getItem(ISSUED) || "[]");
        issued.unshift({ id: k.id, tenant: t.name, name: k.name || "", permissions: k.permissions, at: k.created_at });
        sessionStorage.setItem(ISSUED, JSON.stringify(issued.slice(0, 50)));
        const secret = h("input#new-api-key", { type: "text", readonly: true, value: k.api_key, "aria-label": "The new API key" });
        const copied = h("span#copy-msg", { role: "status" });
        fill(keyBox, h("div.card.once",
          h("h3", "New API key: shown once"),
          h("p", "Copy it now: the service keeps only its hash and will never show it again."),
          h("div.row", secret, h("button#copy-key", { type: "button", onclick: async () => {
            secret.select();
            try {
              await navigator.clipboard.writeText(k.api_key);
              fill(copied, "Copied.");
            } catch {
              fill(copied, "Selected: press Ctrl+C to copy.");
            }
          } }, "Copy")), copied,
          h("p.muted", `Key id ${k.id} · ${k.permissions.join(", ")}`)));
        showIssued();
      } catch (err) {
        fill(keyBox, errorBox(err));
      }
    });
    fill(keyBox, form);
    name.focus();
  }

  function showIssued() {
    const issued = JSON.parse(sessionStorage.getItem(ISSUED) || "[]");
    fill(issuedBox, issued.length ? table([
      ["Key id", (k) => h("code", k.id)], ["Tenant", (k) => k.tenant], ["Permissions", (k) => k.permissions.join(", ")],
      ["", (k) => (k.revoked ? h("span.bad", "revoked") : h("button", { type: "button", "data-key": k.id, onclick: () => revoke(k.id) }, "Revoke"))],
    ], issued, { label: "Keys issued in this tab" }) : h("p.muted", "No key issued in this tab."));
  }

  const revokeId = h("input#revoke-id", { type: "text", spellcheck: "false" });
  const revokeMsg = h("div#revoke-msg");
  async function revoke(id) {
    try {
      const r = await del(`/admin/v1/keys/${encodeURIComponent(id)}`);
      fill(revokeMsg, h("p#revoked", `Key ${r.id} revoked at ${fmtTime(r.revoked_at)}.`));
      const issued = JSON.parse(sessionStorage.getItem(ISSUED) || "[]").map((k) => (k.id === id ? { ...k, revoked: true } : k));
      sessionStorage.setItem(ISSUED, JSON.stringify(issued));
      showIssued();
    } catch (e) {
      fill(revokeMsg, errorBox(e));
    }
  }
  const revokeForm = h("form.row", field("Revoke a key by id (the API lists no keys)", revokeId), h("button", { type: "submit" }, "Revoke"));
  revokeForm.addEventListener("submit", (e) => { e.preventDefault(); if (revokeId.value.trim()) revoke(revokeId.value.trim()); });

  const tName = h("input#tenant-name", { type: "text", required: true });
  const tPlan = h("select#tenant-plan", PLANS.map((p) => h("option", { value: p }, p)));
  const tMsg = h("div");
  const tForm = h("form.card", h("h3", "New tenant"), h("div.row", field("Name", tName), field("Plan", tPlan)), h("button", { type: "submit" }, "Create tenant"), tMsg);
  tForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await post("/admin/v1/tenants", { name: tName.value, plan: tPlan.value });
      tName.value = "";
      fill(tMsg);
      tenants();
    } catch (err) {
      fill(tMsg, errorBox(err));
    }
  });

  async function log() {
    try {
      const [head, cp, pk] = await Promise.all([get("/admin/v1/log/head"), get("/admin/v1/log/checkpoint"), get("/admin/v1/log/pubkey")]);
      fill(logBox, h("dl.kv", [
        ["head seq", head.seq], ["head hash", head.hash], ["checkpoint size", cp.seq], ["checkpoint time", fmtTime(cp.time)],
        ["checkpoint root", cp.root || "—"], ["verifier key", pk.verifier_key],
      ].map(([k, v]) => [h("dt", k), h("dd", h("code", String(v)))])),
      h("div.row",
        h("button#sign-checkpoint", { type: "button", onclick: async () => { try { await post("/admin/v1/log/checkpoint"); log(); } catch (e) { fill(logBox, errorBox(e)); } } }, "Sign a checkpoint now"),
        h("button#pin-this-key", { type: "button", onclick: (ev) => { pinned.set(pk.verifier_key); ev.target.textContent = "Pinned in this browser"; } }, "Pin this verifier key")),
      h("details", h("summary", "Checkpoint note"), h("pre.json", cp.note || "—")));
    } catch (e) {
      fill(logBox, errorBox(e));
    }
  }

  async function metrics() {
    try {
      const text = await get("/metrics", { as: "text", token: "" });
      const f = figures(parseProm(text));
      const now = Date.now();
      if (lastTotal !== null) rates.push(((f.requests - lastTotal) * 1000) / (now - lastAt));
      if (rates.length > 60) rates.shift();
      lastTotal = f.requests;
      lastAt = now;
      fill(metricsBox,
        h("dl.kv.figures#metric-figures", [
          ["requests", f.requests], ["by status", Object.entries(f.byClass).map(([c, n]) => `${c} ${n}`).join(" · ") || "—"],
          ["mean latency", f.meanMs === null ? "—" : `${f.meanMs.toFixed(1)} ms`],
          ["p95 latency (bucket bound)", f.p95Ms === null ? "—" : `≤ ${f.p95Ms} ms`],
          ["appender group size", f.groupMean === null ? "—" : `${f.groupMean.toFixed(1)} events (mean of ${f.groups} groups)`],
          ["log head seq", f.headSeq ?? "—"], ["exports processing", f.exportsProcessing ?? "—"],
        ].map(([k, v]) => [h("dt", k), h("dd", String(v))])),
        h("h3", "Requests by route"), barChart(f.byRoute, { title: "Requests by route" }),
        h("h3", "Requests a second (sampled every 5 s while this view is open)"), sparkline(rates, "Requests per second"));
    } catch (e) {
      fill(metricsBox, errorBox(e));
    }
  }

  fill(main, h("section", h("h1", "Operator"),
    h("section.card", h("h2", "Tenants and plans"), tenantsBox, tForm),
    h("section.card", h("h2", "Keys"), keyBox, issuedBox, revokeForm, revokeMsg),
    h("section.card", h("h2", "Log head and checkpoints"), logBox),
    h("section.card", h("h2", "Metrics"), metricsBox)));
  tenants();
  showIssued();
  log();
  metrics();
  const timer = setInterval(metrics, POLL_MS);
  return () => clearInterval(timer);
}
