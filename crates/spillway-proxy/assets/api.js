// Talking to the admin listener: JSON reads with a time limit, and writes that carry the
// operator's bearer token (kept in this tab's sessionStorage only, never in localStorage or a
// cookie, so it leaves with the tab).

const TOKEN_KEY = "spillway.adminToken";

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage disabled: the token lives only as long as the field's value.
  }
}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const t = getToken();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/** An error with the HTTP status and the server's message (its "error" field). */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(url, init, timeoutMs) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const r = await fetch(url, Object.assign({ signal: ctl.signal, cache: "no-store" }, init));
    const text = await r.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = { error: text };
    }
    if (!r.ok) {
      const msg = (body && body.error) || `${r.status} ${r.statusText}`;
      throw new ApiError(r.status, msg);
    }
    return body;
  } catch (e) {
    if (e.name === "AbortError") throw new ApiError(0, `no answer within ${timeoutMs / 1000} s`);
    if (e instanceof ApiError) throw e;
    throw new ApiError(0, `cannot reach the admin listener (${e.message})`);
  } finally {
    clearTimeout(timer);
  }
}

/** GET `url` as JSON; gives up after `timeoutMs`. */
export function getJSON(url, timeoutMs = 5000) {
  return request(url, { method: "GET", headers: headers() }, timeoutMs);
}

/**
 * POST `body` as JSON to `url` with the token; gives up after `timeoutMs`. The JSON type and
 * `X-Spillway-Admin` make it a request no other site's page can send without a CORS preflight,
 * which the admin API never grants: how it tells this page from a forged form post.
 */
export function postJSON(url, body, timeoutMs = 5000) {
  return request(
    url,
    {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", "X-Spillway-Admin": "1" }),
      body: JSON.stringify(body),
    },
    timeoutMs,
  );
}
