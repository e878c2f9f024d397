// The console's shell: sign-in, the section links, and a hash router (#/audit, #/audit/<id>,
// #/exports, #/memories, #/memories/<id>, #/integrity, #/operator). Each section is a module
// whose render(main, params) returns a function that stops what it started (polling).

import { ApiError, get, roleOf, session } from "./api.js";
import { errorBox, fill, h, field } from "./dom.js";
import * as audit from "./audit.js";
import * as exportsView from "./exports.js";
import * as memories from "./memories.js";
import * as operator from "./operator.js";

const TENANT = [
  ["audit", "Audit log"],
  ["exports", "Exports"],
  ["memories", "Memories"],
  ["integrity", "Integrity"],
];
const OPERATOR = [["operator", "Operator"], ["integrity", "Integrity"]];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
let stop = null;

export function flash(text) {
  fill(document.getElementById("flash"), text ? h("p.flash", text) : null);
}

function signIn() {
  nav.hidden = true;
  fill(who);
  const input = h("input", { type: "password", autocomplete: "off", required: true, spellcheck: "false", name: "token" });
  const out = h("div");
  const form = h("form.card.signin", { "aria-labelledby": "signin-title" },
    h("h1#signin-title", "Sign in"),
    h("p", "With a tenant API key (amk_…) for the audit log, exports and memories, or with the admin token for the operator view."),
    field("API key or admin token", input, "Kept in this tab's session storage only; sent as Authorization: Bearer; forgotten on sign-out."),
    h("button", { type: "submit" }, "Sign in"),
    out);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    const role = roleOf(token);
    fill(out, h("p.muted", "Checking…"));
    try {
      // The cheapest call each credential may make: one list entry, or the log head.
      if (role === "tenant") await get("/v1/audit/logs?page_size=1", { token });
      else await get("/admin/v1/log/head", { token });
    } catch (e) {
      // A key without audit.read is still a key: 403 signs in (its sections say what it lacks).
      if (!(e instanceof ApiError && e.status === 403 && role === "tenant")) {
        fill(out, errorBox(e));
        return;
      }
    }
    session.set(token, role);
    input.value = "";
    location.hash = role === "tenant" ? "#/audit" : "#/operator";
    route();
  });
  fill(main, form);
  input.focus();
}

function signOut() {
  session.clear();
  if (stop) stop();
  stop = null;
  history.replaceState(null, "", "#/");
  flash("Signed out: the key is forgotten.");
  signIn();
}

function route() {
  if (stop) stop();
  stop = null;
  const s = session.get();
  if (!s) return signIn();
  const sections = s.role === "tenant" ? TENANT : OPERATOR;
  const [, name = "", ...rest] = location.hash.replace(/^#/, "").split("/");
  const current = name || sections[0][0];
  nav.hidden = false;
  fill(nav, sections.map(([id, label]) =>
    h("a", { href: `#/${id}`, "aria-current": id === current ? "page" : null }, label)));
  fill(who, h("span.role", s.role === "tenant" ? "tenant key" : "operator"), " ",
    h("button.link#signout", { type: "button", onclick: signOut }, "Sign out"));
  const params = rest.map(decodeURIComponent);
  try {
    if (!sections.some(([id]) => id === current)) {
      fill(main, h("section.card", h("h1", "Not available"),
        errorBox(new ApiError(403, "-", s.role === "tenant"
          ? "the operator view needs the admin token; a tenant key cannot open it"
          : "this section needs a tenant API key; the admin token reads no tenant's audit log or memories through /v1"))));
      return;
    }
    const views = { audit, exports: exportsView, memories, operator, integrity: audit };
    const view = views[current];
    stop = current === "integrity" ? audit.renderIntegrity(main, s.role) : view.render(main, params);
  } catch (e) {
    fill(main, errorBox(e));
  }
}

// The skip link moves the focus to the content; following its #main would leave the router.
document.querySelector(".skip").addEventListener("click", (ev) => {
  ev.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
route();
