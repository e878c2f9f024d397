// /metrics (Prometheus text) read into a few key figures, and a small SVG chart drawn by hand:
// no chart library, nothing but elements this module creates.

import { h } from "./dom.js";

/** Prometheus text → [{name, labels: {..}, value}]. */
export function parseProm(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

/** The figures the operator view shows. */
export function figures(samples) {
  const pick = (name) => samples.filter((s) => s.name === name);
  const reqs = pick("auditmem_http_requests_total");
  const byRoute = {};
  const byClass = {};
  for (const s of reqs) {
    byRoute[s.labels.route] = (byRoute[s.labels.route] || 0) + s.value;
    const c = `${String(s.labels.status)[0]}xx`;
    byClass[c] = (byClass[c] || 0) + s.value;
  }
  const durSum = sum(pick("auditmem_http_request_duration_seconds_sum").map((s) => s.value));
  const durCount = sum(pick("auditmem_http_request_duration_seconds_count").map((s) => s.value));
  const buckets = {};
  for (const s of pick("auditmem_http_request_duration_seconds_bucket")) buckets[s.labels.le] = (buckets[s.labels.le] || 0) + s.value;
  const les = Object.keys(buckets).sort((a, b) => (a === "+Inf" ? 1 : b === "+Inf" ? -1 : Number(a) - Number(b)));
  const quantile = (q) => {
    const total = buckets["+Inf"] || 0;
    if (!total) return null;
    const le = les.find((l) => buckets[l] >= q * total);
    return le === "+Inf" ? Infinity : Number(le);
  };
  const grpSum = sum(pick("auditmem_appender_group_events_sum").map((s) => s.value));
  const grpCount = sum(pick("auditmem_appender_group_events_count").map((s) => s.value));
  const one = (name) => pick(name)[0]?.value;
  return {
    requests: sum(reqs.map((s) => s.value)),
    byRoute,
    byClass,
    meanMs: durCount ? (1000 * durSum) / durCount : null,
    p95Ms: quantile(0.95) === null ? null : 1000 * quantile(0.95),
    groupMean: grpCount ? grpSum / grpCount : null,
    groups: grpCount,
    headSeq: one("auditmem_log_head_seq"),
    exportsProcessing: one("auditmem_exports_processing"),
  };
}

/** A horizontal bar chart of {label: value}, the largest `n`. */
export function barChart(data, { n = 8, title = "" } = {}) {
  const rows = Object.entries(data).sort((a, b) => b[1] - a[1]).slice(0, n);
  const max = Math.max(1, ...rows.map(([, v]) => v));
  const W = 640, bar = 22, gap = 6, labelW = 300;
  const H = rows.length * (bar + gap) + gap;
  return h("svg.chart", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, width: "100%", preserveAspectRatio: "xMinYMin meet" },
    h("title", title),
    rows.map(([label, v], i) => {
      const y = gap + i * (bar + gap);
      const w = Math.max(2, ((W - labelW - 60) * v) / max);
      return h("g", h("text", { x: labelW - 8, y: y + bar * 0.7, "text-anchor": "end", class: "chart-label" }, label.length > 38 ? `${label.slice(0, 37)}…` : label),
        h("rect", { x: labelW, y, width: w, height: bar, class: "chart-bar", rx: 3 }),
        h("text", { x: labelW + w + 6, y: y + bar * 0.7, class: "chart-value" }, String(v)));
    }));
}

/** A sparkline of numbers (requests a second over the samples taken while the view is open). */
export function sparkline(values, title) {
  const W = 640, H = 80, max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => `${(W * i) / Math.max(1, values.length - 1)},${H - 4 - ((H - 8) * v) / max}`).join(" ");
  return h("svg.chart", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, width: "100%" },
    h("title", title),
    h("line", { x1: 0, y1: H - 4, x2: W, y2: H - 4, class: "chart-axis" }),
    values.length > 1
      ? [h("polyline", { points: pts, class: "chart-line", fill: "none" }),
        h("text", { x: 4, y: 14, class: "chart-value" }, `now ${values[values.length - 1].toFixed(2)}/s, peak ${max.toFixed(2)}/s`)]
      : h("text", { x: 4, y: 40, class: "chart-label" }, "collecting: a point every 5 s"));
}
