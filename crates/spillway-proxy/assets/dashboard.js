// The live dashboard: polls /api/series once a second for the samples it has not seen, keeps
// the last 15 minutes, and redraws its charts when something new arrived. Never two polls in
// flight; a slow or failed poll marks the page stale and the next one retries, so the page
// stays usable however overloaded the proxy is (the admin listener is outside admission).

import { getJSON, postJSON, getToken, setToken } from "./api.js";
import { LineChart, PALETTE } from "./chart.js";
import { fmtShort, fmtPct } from "./format.js";
import { startFleet } from "./fleet.js";

const KEEP = 900; // 15 min at 1 s
const POLL_MS = 1000;
const TIMEOUT_MS = 4000;
const CRIT = ["SHEDDABLE", "SHEDDABLE_PLUS", "CRITICAL", "CRITICAL_PLUS"];
const CRIT_COLORS = ["#94a3b8", "#d97706", "#dc2626", "#7c3aed"];

const samples = [];
let lastT = 0;
let lastOk = 0;
let dirty = false;
const $ = (id) => document.getElementById(id);

const charts = {
  load: new LineChart($("chart-load")),
  latency: new LineChart($("chart-latency"), { fmtY: (v) => fmtShort(v) }),
  reasons: new LineChart($("chart-reasons")),
  criticality: new LineChart($("chart-criticality")),
  concurrency: new LineChart($("chart-concurrency")),
  utilisation: new LineChart($("chart-utilisation"), { yMin: 1, fmtY: (v) => v.toFixed(2) }),
};
charts.load.setSeries([
  { key: "offered", label: "offered", color: "#475569", width: 2.25 },
  { key: "admitted", label: "admitted", color: "#2563eb" },
  { key: "goodput", label: "goodput", color: "#16a34a", width: 2.25 },
  { key: "refused", label: "refused", color: "#dc2626", dash: [4, 3] },
]);
charts.latency.setSeries([
  { key: "queue_mean", label: "queue mean", color: "#d97706" },
  { key: "queue_p99", label: "queue p99", color: "#d97706", dash: [4, 3] },
  { key: "proc_mean", label: "processing mean", color: "#2563eb" },
  { key: "proc_p99", label: "processing p99", color: "#2563eb", dash: [4, 3] },
  { key: "ewma", label: "expected service (EWMA)", color: "#94a3b8", dash: [2, 2] },
]);
charts.concurrency.setSeries([
  { key: "limit", label: "limit", color: "#0f172a", width: 2.25 },
  { key: "in_flight", label: "in flight", color: "#2563eb" },
  { key: "queued", label: "queued", color: "#d97706" },
]);

// Exposed for the end-to-end test and for curious operators (read-only use).
window.spillwayDashboard = { samples, charts, polls: 0, failures: 0 };

function pick(fn) {
  return samples.map(fn);
}

function render() {
  dirty = false;
  const x = pick((s) => s.t);
  if (x.length === 0) return;
  const xMax = x[x.length - 1];
  const xMin = Math.max(x[0], xMax - KEEP * 1000);
  const win = { x, xMin: Math.min(xMin, xMax - 60e3), xMax };

  charts.load.draw(Object.assign({ ys: {
    offered: pick((s) => s.offered), admitted: pick((s) => s.admitted),
    goodput: pick((s) => s.goodput), refused: pick((s) => s.refused),
  } }, win));
  charts.latency.draw(Object.assign({ ys: {
    queue_mean: pick((s) => s.queue_ms && s.queue_ms.mean), queue_p99: pick((s) => s.queue_ms && s.queue_ms.p99),
    proc_mean: pick((s) => s.processing_ms && s.processing_ms.mean), proc_p99: pick((s) => s.processing_ms && s.processing_ms.p99),
    ewma: pick((s) => s.service_time_ewma_ms),
  } }, win));

  // Series that appear as they happen: reasons, signals.
  const reasons = new Set();
  const signals = new Set();
  for (const s of samples) {
    for (const k of Object.keys(s.shed_by_reason)) reasons.add(k);
    for (const k of Object.keys(s.signals)) signals.add(k);
  }
  const rs = [...reasons].sort();
  charts.reasons.setSeries(rs.map((k, i) => ({ key: k, label: k.replaceAll("_", " "), color: PALETTE[i % PALETTE.length] })));
  charts.reasons.draw(Object.assign({ ys: Object.fromEntries(rs.map((k) => [k, pick((s) => s.shed_by_reason[k] || 0)])) }, win));

  const critSeries = [];
  const critYs = {};
  CRIT.forEach((c, i) => {
    critSeries.push({ key: `shed_${c}`, label: c, color: CRIT_COLORS[i] });
    critYs[`shed_${c}`] = pick((s) => s.shed_by_criticality[i]);
  });
  critSeries.push({ key: "throttled", label: "throttled (client)", color: "#0891b2", dash: [4, 3] });
  critYs.throttled = pick((s) => s.throttled);
  charts.criticality.setSeries(critSeries);
  charts.criticality.draw(Object.assign({ ys: critYs }, win));

  charts.concurrency.draw(Object.assign({ ys: {
    limit: pick((s) => s.limit), in_flight: pick((s) => s.in_flight), queued: pick((s) => s.queued),
  } }, win));

  const us = [{ key: "utilisation", label: "utilisation", color: "#0f172a", width: 2.25 }];
  const uy = { utilisation: pick((s) => s.utilisation), throttle: pick((s) => s.throttle_probability) };
  [...signals].sort().forEach((k, i) => {
    us.push({ key: `sig_${k}`, label: k, color: PALETTE[(i + 1) % PALETTE.length] });
    uy[`sig_${k}`] = pick((s) => (k in s.signals ? s.signals[k] : null));
  });
  us.push({ key: "throttle", label: "throttle P(refuse)", color: "#0891b2", dash: [4, 3] });
  charts.utilisation.setSeries(us);
  charts.utilisation.draw(Object.assign({ ys: uy }, win));

  renderNow(samples[samples.length - 1]);
  renderTable("by-customer", ["shed_by_customer", "throttled_by_customer"]);
  renderTable("by-operation", ["shed_by_operation", "throttled_by_operation"]);
  renderDegradation(samples[samples.length - 1]);
  $("sample-count").textContent = `${samples.length} samples held.`;
}

function renderNow(s) {
  $("offered-now").textContent = fmtShort(s.offered);
  $("goodput-now").textContent = fmtShort(s.goodput);
  $("refused-now").textContent = fmtShort(s.refused);
  $("refused-now").classList.toggle("bad", s.refused > 0);
  $("refused-share").textContent = s.offered > 0 ? `${fmtPct(Math.min(1, s.refused / s.offered))} of offered` : "req/s";
  $("limit-now").textContent = String(s.limit);
  $("inflight-now").textContent = `${s.in_flight} in flight, ${s.queued} queued`;
  $("util-now").textContent = s.utilisation.toFixed(2);
  $("util-now").classList.toggle("bad", s.overloaded);
  $("overloaded-now").textContent = s.overloaded ? "overloaded" : "";
  const q = s.queue_ms ? fmtShort(s.queue_ms.p99) : "–";
  // Without the latency histogram, the controller's expected service time stands in.
  const p = s.processing_ms ? fmtShort(s.processing_ms.p99) : `~${fmtShort(s.service_time_ewma_ms)}`;
  $("latency-now").textContent = `${q} / ${p}`;
}

function renderTable(id, fields) {
  const totals = new Map();
  for (const s of samples.slice(-60)) {
    for (const field of fields) {
      for (const [k, v] of Object.entries(s[field] || {})) totals.set(k, (totals.get(k) || 0) + v);
    }
  }
  const rows = [...totals.entries()].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]).slice(0, 10);
  const body = document.createElement("tbody");
  const max = rows.length ? rows[0][1] : 1;
  for (const [k, v] of rows) {
    const tr = body.insertRow();
    tr.insertCell().textContent = k;
    const bar = tr.insertCell();
    const span = document.createElement("span");
    span.className = "bar";
    span.style.width = `${Math.max(2, (v / max) * 120)}px`;
    bar.append(span);
    const n = tr.insertCell();
    n.className = "num";
    n.textContent = fmtShort(v);
  }
  if (!rows.length) {
    const td = body.insertRow().insertCell();
    td.className = "muted";
    td.textContent = "none";
  }
  $(id).replaceChildren(body);
}

let switchBusy = false;
function renderDegradation(s) {
  const sw = $("degradation-switch");
  if (!switchBusy) {
    sw.checked = !s.degradation_all_off;
    sw.disabled = false;
  }
  sw.closest("#degradation-panel").dataset.allOff = String(s.degradation_all_off);
  const body = document.createElement("tbody");
  for (const r of s.routes) {
    const tr = body.insertRow();
    tr.insertCell().textContent = r.name;
    tr.insertCell().textContent = !r.configured ? "no degraded mode" : r.enabled ? "may degrade" : "switched off";
    const n = tr.insertCell();
    n.className = "num";
    n.textContent = r.configured ? `${fmtShort(r.degraded)}/s degraded` : "";
  }
  $("routes").replaceChildren(body);
}

async function toggleDegradation(ev) {
  const sw = ev.target;
  const enabled = sw.checked;
  const msg = $("degradation-message");
  switchBusy = true;
  sw.disabled = true;
  msg.className = "muted";
  msg.textContent = enabled ? "allowing degraded modes…" : "switching degraded modes off…";
  try {
    await postJSON("/degradation", { enabled });
    msg.textContent = enabled ? "Degraded modes allowed again." : "Degraded modes switched off for every route.";
    msg.dataset.result = enabled ? "on" : "off";
  } catch (e) {
    sw.checked = !enabled;
    msg.className = "error";
    msg.dataset.result = "error";
    msg.textContent = e.status === 401 ? "The admin API wants a token: open “Admin token” below." : `Not changed: ${e.message}`;
    if (e.status === 401) $("token-box").open = true;
  } finally {
    switchBusy = false;
    sw.disabled = false;
  }
}

function setFreshness() {
  const el = $("freshness");
  const age = lastOk ? (Date.now() - lastOk) / 1000 : Infinity;
  if (!lastOk) {
    el.dataset.state = "waiting";
    el.textContent = "waiting for samples";
  } else if (age < 3.5) {
    el.dataset.state = "live";
    el.textContent = "live";
  } else {
    el.dataset.state = "stale";
    el.textContent = `no update for ${Math.round(age)} s`;
  }
}

async function poll() {
  const started = performance.now();
  window.spillwayDashboard.polls++;
  try {
    const r = await getJSON(`/api/series?since=${lastT}`, TIMEOUT_MS);
    for (const s of r.samples) {
      if (s.t > lastT) {
        samples.push(s);
        lastT = s.t;
        dirty = true;
      }
    }
    if (samples.length > KEEP) samples.splice(0, samples.length - KEEP);
    lastOk = Date.now();
  } catch (e) {
    window.spillwayDashboard.failures++;
    window.spillwayDashboard.lastError = e.message;
  }
  setFreshness();
  if (dirty) requestAnimationFrame(render);
  setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
}

$("degradation-switch").addEventListener("change", toggleDegradation);
$("token").value = getToken();
$("token").addEventListener("change", (e) => setToken(e.target.value.trim()));
setInterval(setFreshness, 1000);
poll();
startFleet();
