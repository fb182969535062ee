// The knee calculator page: reads the form, asks /api/calc (spillway_core::erlang on the
// server, the code behind `spillway calc`) and draws the answer. It computes nothing itself.

import { getJSON } from "./api.js";
import { LineChart, PALETTE } from "./chart.js";
import { fmtSecs, fmtRate, fmtPct } from "./format.js";

const $ = (id) => document.getElementById(id);
const chart = new LineChart($("curves"), {
  xKind: "linear", xMin: 0, xMax: 1, xStep: 0.1,
  fmtX: (x) => `${Math.round(x * 100)}%`,
});
window.spillwayCalc = { answers: 0 };

function params() {
  const p = new URLSearchParams();
  p.set("service_time_ms", $("service-time").value);
  p.set($("size-kind").value, $("size").value);
  const loadKind = $("load-kind").value;
  const load = $("load").value;
  p.set(loadKind, loadKind === "utilisation" && load !== "" ? String(Number(load) / 100) : load);
  const shed = $("sheddable").value;
  p.set("sheddable_share", shed === "" ? "0" : String(Number(shed) / 100));
  if ($("target").value !== "") p.set("target_wait_ms", $("target").value);
  return p;
}

function row(body, label, value, cls) {
  const tr = body.insertRow();
  tr.insertCell().textContent = label;
  const td = tr.insertCell();
  td.textContent = value;
  if (cls) td.className = cls;
  return td;
}

function latencyText(l) {
  return l ? `${fmtSecs(l.mean_wait_secs)} mean wait, ${fmtSecs(l.p99_wait_secs)} p99, ${fmtSecs(l.mean_response_secs)} response` : "unbounded — the queue never drains";
}

function renderAnswer(a) {
  const p = a.plan;
  const body = document.createElement("tbody");
  row(body, "capacity", `${fmtRate(a.capacity_rps)} (${a.servers} worker${a.servers === 1 ? "" : "s"}${a.servers_from === "capacity" ? ", from capacity" : ""})`);
  row(body, "arrivals", `${fmtRate(p.input.arrival_rate)}, ${fmtPct(p.offered_utilisation)} of capacity`);
  row(body, "knee for this concurrency", fmtPct(a.knee_utilisation));
  const w = row(body, "queueing without shedding", p.without_shedding ? fmtSecs(p.without_shedding.mean_wait_secs) : "unbounded", "big");
  w.id = "wait-without";
  row(body, "", latencyText(p.without_shedding));
  row(body, "start refusing above", `${fmtRate(p.refuse_above_rate)} (${fmtPct(p.refuse_above_utilisation)} of capacity)`);
  const s = row(body, "queueing with shedding", p.with_shedding ? fmtSecs(p.with_shedding.mean_wait_secs) : "unbounded", "big");
  s.id = "wait-with";
  row(body, "", `${latencyText(p.with_shedding)}; serving ${fmtRate(p.served_rate)}, shedding ${fmtRate(p.shed_rate)}`);
  let verdict;
  if (p.shed_rate === 0 && p.shortfall_rate === 0) verdict = "Nothing needs shedding: the arrivals already meet the target.";
  else if (p.shortfall_rate === 0) verdict = `Shedding ${fmtRate(p.shed_rate)} of ${fmtRate(p.sheddable_rate)} sheddable meets the target.`;
  else verdict = `Short by ${fmtRate(p.shortfall_rate)}: this needs more capacity, or refusing more important traffic.`;
  row(body, "verdict", verdict);
  $("answer").replaceChildren(body);

  const ys = {};
  const series = [];
  const marks = [];
  a.curves.forEach((c, i) => {
    const own = c.servers === a.servers;
    const color = own ? "#0f172a" : PALETTE[i % PALETTE.length];
    series.push({ key: `c${c.servers}`, label: `c=${c.servers}${own ? " (yours)" : ""}`, color, width: own ? 3 : 1.75 });
    ys[`c${c.servers}`] = c.points.map((pt) => pt[1] * 1e3);
    const knee = c.points.reduce((best, pt) => (Math.abs(pt[0] - c.knee_utilisation) < Math.abs(best[0] - c.knee_utilisation) ? pt : best));
    marks.push({ x: c.knee_utilisation, y: a.knee_wait_fraction * a.service_time_secs * 1e3, color, label: `knee c=${c.servers}`, near: knee });
  });
  if (p.without_shedding) marks.push({ x: p.offered_utilisation, y: p.without_shedding.mean_wait_secs * 1e3, color: "#dc2626" });
  chart.setSeries(series);
  // Cap the y axis at 5× the work so the single-worker curve does not flatten the rest.
  chart.opts.yMax = 5 * a.service_time_secs * 1e3;
  chart.draw({ x: a.curves[0].points.map((pt) => pt[0]), ys, marks });
}

async function renderReference() {
  const body = document.createElement("tbody");
  for (const workers of [1, 40]) {
    try {
      const a = await getJSON(`/api/calc?service_time_ms=40&workers=${workers}&utilisation=0.9`);
      const td = row(body, `${workers} worker${workers > 1 ? "s" : ""}`, `${fmtSecs(a.plan.without_shedding.mean_wait_secs)} of queueing`);
      td.id = `ref-${workers}`;
    } catch (e) {
      row(body, `${workers} workers`, e.message, "error");
    }
  }
  $("reference").replaceChildren(body);
}

let pending = 0;
async function update() {
  const mine = ++pending;
  try {
    const a = await getJSON(`/api/calc?${params()}`);
    if (mine !== pending) return; // a newer question is on its way
    $("calc-error").textContent = "";
    renderAnswer(a);
    window.spillwayCalc.answers++;
    window.spillwayCalc.last = a;
  } catch (e) {
    if (mine === pending) $("calc-error").textContent = e.message;
  }
}

let timer = 0;
$("calc-form").addEventListener("input", () => {
  clearTimeout(timer);
  timer = setTimeout(update, 150);
});
$("calc-form").addEventListener("submit", (e) => e.preventDefault());
$("size-kind").addEventListener("change", () => { $("size").value = $("size-kind").value === "workers" ? "1" : "25"; update(); });
$("load-kind").addEventListener("change", () => { $("load").value = $("load-kind").value === "utilisation" ? "90" : "22.5"; update(); });
update();
renderReference();
