// The console's only way to the service: fetch on this origin with the signed-in credential
// as `Authorization: Bearer`. The credential lives in this tab's sessionStorage (gone when the
// tab closes, never in a cookie), and signing out removes it.

const KEY = "auditmem.console.credential";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const session = {
  get() {
    try {
      const v = JSON.parse(sessionStorage.getItem(KEY) || "null");
      return v && typeof v.token === "string" ? v : null;
    } catch {
      return null;
    }
  },
  set(token, role) {
    sessionStorage.setItem(KEY, JSON.stringify({ token, role }));
  },
  // Signing out forgets the key and everything the tab remembered under it (the ids of the
  // exports it started, the keys it issued).
  clear() {
    sessionStorage.clear();
  },
};

/** Tenant keys are issued as `amk_...`; anything else is taken for the admin token. */
export function roleOf(token) {
  return token.startsWith("amk_") ? "tenant" : "operator";
}

/**
 * Calls the API. Resolves to the envelope's `data` (or the raw text/blob with `as`); rejects
 * with an ApiError carrying the HTTP status, the registry code and the message.
 */
export async function call(method, path, { body, as = "json", token, headers = {} } = {}) {
  const cred = token !== undefined ? token : session.get()?.token;
  const h = { ...headers };
  if (cred) h.Authorization = `Bearer ${cred}`;
  if (body !== undefined) h["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), credentials: "omit", cache: "no-store" });
  } catch (e) {
    throw new ApiError("network", "-", `the service could not be reached (${e.message})`);
  }
  if (!resp.ok) {
    const text = await resp.text();
    let env = null;
    try {
      env = JSON.parse(text);
    } catch {
      /* not our envelope: shown as text below */
    }
    if (env && typeof env === "object" && "code" in env) throw new ApiError(resp.status, env.code, env.message);
    throw new ApiError(resp.status, "-", text.slice(0, 300) || resp.statusText);
  }
  if (as === "text") return resp.text();
  if (as === "blob") return { blob: await resp.blob(), headers: resp.headers };
  if (as === "response") return resp;
  const env = await resp.json();
  return env.data;
}

export const get = (path, opts) => call("GET", path, opts);
export const post = (path, body, opts) => call("POST", path, { ...opts, body });
export const patch = (path, body, opts) => call("PATCH", path, { ...opts, body });
export const del = (path, body, opts) => call("DELETE", path, { ...opts, body });

/** A query string from the defined, non-empty values of `params`. */
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : "";
}
