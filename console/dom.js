// Builds the page from elements and text nodes only, never by parsing HTML: every text the
// API returns is put in a text node, so nothing a tenant or a gateway recorded can become
// markup or script.

/** h("tag.class#id", {attr: value, onclick: fn}, ...children) */
export function h(spec, attrs, ...children) {
  const m = /^([a-z0-9]+)((?:[.#][\w-]+)*)$/i.exec(spec);
  const tag = m ? m[1] : spec;
  const svg = ["svg", "rect", "line", "text", "g", "polyline", "title", "path", "circle"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === ".") el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") for (const c of String(v).split(/\s+/).filter(Boolean)) el.classList.add(c);
    else if (k === "value" && !svg) el.value = v;
    else if (k === "checked" && !svg) el.checked = !!v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Pretty JSON in a <pre>, or a dash for null. */
export function jsonBlock(value, label) {
  if (value === undefined) return null;
  return h("pre.json", { tabindex: "0", "aria-label": label || "JSON" }, JSON.stringify(value, null, 2));
}

/** An API error as the console shows it: status, code and message, never a blank page. */
export function errorBox(err) {
  const code = err && err.code !== undefined ? err.code : "-";
  const status = err && err.status !== undefined ? err.status : "network";
  return h("div.error", { role: "alert" },
    h("strong", `Error ${status} · code ${code}`), ": ", (err && err.message) || String(err));
}

export function fmtTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace(/:\d\dZ$/, (s) => s);
}

export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h("div.field", h("label", { for: id }, label), input, hint ? h("small.hint", hint) : null);
}

/** A table from rows; `cols` are [header, row => cell]. */
export function table(cols, rows, opts = {}) {
  return h("div.table-wrap", { tabindex: "0", role: "region", "aria-label": opts.label || "table" },
    h("table", { class: opts.class || "" },
      opts.caption ? h("caption", opts.caption) : null,
      h("thead", h("tr", cols.map(([name]) => h("th", { scope: "col" }, name)))),
      h("tbody", rows.map((r, i) => h("tr", opts.rowAttrs ? opts.rowAttrs(r, i) : {}, cols.map(([, f]) => h("td", f(r, i))))))));
}
