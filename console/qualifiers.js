// The audit list's search box, in GitHub's audit-log style: `action:memory.write status:4xx
// model:gpt-4o after:2026-11-01 before:2026-11-20 is:failure` plus free words. The API filters
// by action and time range itself; every other qualifier can only be applied by the console to
// the page it loaded, and the list says so (it never pretends the server filtered it).

export const SERVER = { action: "action", after: "start_time", before: "end_time" };
export const CLIENT = ["status", "model", "project", "gateway", "ip", "is", "id"];

/** Parses `text` → {server: {action?, start_time?, end_time?}, client: [{key, value}], words, errors}. */
export function parse(text) {
  const out = { server: {}, client: [], words: [], errors: [] };
  for (const tok of String(text || "").match(/(?:[^\s"]+|"[^"]*")+/g) || []) {
    const m = /^([a-z_]+):(.*)$/i.exec(tok);
    if (!m) {
      out.words.push(tok.replace(/"/g, "").toLowerCase());
      continue;
    }
    const key = m[1].toLowerCase();
    const value = m[2].replace(/^"|"$/g, "");
    if (!value) {
      out.errors.push(`${key}: needs a value`);
    } else if (key === "action") {
      out.server.action = value;
    } else if (key === "after" || key === "before") {
      const t = dateOf(value, key === "before");
      if (!t) out.errors.push(`${key}:${value} is not a date (YYYY-MM-DD or ISO 8601)`);
      else out.server[SERVER[key]] = t;
    } else if (key === "status") {
      if (!/^([1-5]xx|[1-5]\d\d)$/i.test(value)) out.errors.push(`status:${value} must be a code (404) or a class (4xx)`);
      else out.client.push({ key, value: value.toLowerCase() });
    } else if (key === "is") {
      if (!["success", "failure", "cached"].includes(value)) out.errors.push(`is:${value} must be success, failure or cached`);
      else out.client.push({ key, value });
    } else if (CLIENT.includes(key)) {
      out.client.push({ key, value });
    } else {
      out.errors.push(`unknown qualifier ${key}: (known: action, after, before, ${CLIENT.join(", ")})`);
    }
  }
  return out;
}

/** A date qualifier as the API's ISO 8601: a bare day is its start (after) or its end (before). */
function dateOf(v, end) {
  if (/^\d{4}-\d{2}-\d{2}$/.test(v)) return `${v}T${end ? "23:59:59.999" : "00:00:00.000"}Z`;
  const d = new Date(v);
  return isNaN(d) ? null : d.toISOString();
}

/** Whether an entry passes the client-side qualifiers and words. */
export function matches(entry, parsed) {
  for (const { key, value } of parsed.client) {
    const v = value.toLowerCase();
    switch (key) {
      case "status": {
        const s = String(entry.http_status);
        if (v.endsWith("xx") ? s[0] !== v[0] : s !== v) return false;
        break;
      }
      case "model": if (!glob(entry.model_id, v)) return false; break;
      case "project": if (!glob(entry.project_id, v)) return false; break;
      case "gateway": if (!glob(entry.gateway_id, v)) return false; break;
      case "ip": if (!(entry.ip_address || "").startsWith(value)) return false; break;
      case "id": if (!entry.id.startsWith(v)) return false; break;
      case "is":
        if (v === "success" && !entry.is_success) return false;
        if (v === "failure" && entry.is_success) return false;
        if (v === "cached" && !entry.is_cache_hit) return false;
        break;
    }
  }
  if (parsed.words.length) {
    const hay = JSON.stringify(entry).toLowerCase();
    if (!parsed.words.every((w) => hay.includes(w))) return false;
  }
  return true;
}

/** Exact, case-insensitive; a trailing `*` matches any rest (`model:gpt-4o*`). */
function glob(value, pattern) {
  const v = (value || "").toLowerCase();
  return pattern.endsWith("*") ? v.startsWith(pattern.slice(0, -1)) : v === pattern;
}
