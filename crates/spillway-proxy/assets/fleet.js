// The fleet panel: where this proxy's quota rates come from (leased from the shared store,
// holding or decaying after a failure, or the static split) and which fleet-wide controls
// apply, who set them and until when. Polls /api/fleet every two seconds (the lease interval
// is 500 ms by default; the fleet controls are read every 200 ms), never two polls at once.
// Every value is written with textContent: names and errors come from peers and the store.

import { getJSON } from "./api.js";
import { fmtShort } from "./format.js";

const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);

const MODE_TEXT = {
  leased: "leased from the store",
  holding: "store unreachable: holding the last lease",
  decaying: "store unreachable: moving to the static split",
  static: "static split (global ÷ tasks)",
};

function cells(table, rows) {
  const body = $(table).tBodies[0];
  body.replaceChildren();
  for (const r of rows) {
    const tr = body.insertRow();
    for (const c of r) tr.insertCell().textContent = c;
  }
}

function ago(ms) {
  if (ms === null || ms === undefined) return "never";
  return ms < 1000 ? `${ms} ms ago` : `${(ms / 1000).toFixed(1)} s ago`;
}

function renderLease(l) {
  const badge = $("fleet-mode");
  if (!l) {
    badge.dataset.state = "static";
    badge.textContent = "no shared store";
    $("fleet-lease").textContent = "Quotas are the static global ÷ tasks split ([admission.quota] store unset).";
    cells("fleet-shares", []);
    return;
  }
  badge.dataset.state = l.mode;
  badge.textContent = l.mode;
  const err = l.last_error ? ` Last error: ${l.last_error}.` : "";
  $("fleet-lease").textContent =
    `${MODE_TEXT[l.mode] || l.mode}; ${l.members} live member${l.members === 1 ? "" : "s"} at ${l.store}; ` +
    `last lease ${ago(l.last_lease_ms_ago)}; ${l.errors} failed round trip${l.errors === 1 ? "" : "s"}; ` +
    `this instance ${l.instance}.${err}`;
  cells("fleet-shares", [["customer", "criticality", "demand", "rate", "global"]].concat(
    l.shares.map((s) => [s.customer === null ? "(default)" : s.customer, s.criticality,
      fmtShort(s.demand), fmtShort(s.rate), fmtShort(s.global)])));
}

function renderControls(f) {
  const rows = [];
  const one = (name, e) => {
    if (!e) return;
    const mine = e.set_by === f.instance ? " (this proxy)" : "";
    rows.push([name, JSON.stringify(e.value), `${e.set_by}${mine} from ${e.peer}`,
      `lifts in ${Math.max(0, e.expires_in_seconds).toFixed(0)} s`]);
  };
  one("shed-below", f.shed_below);
  one("admit-percent", f.admit_percent);
  one("retries-off", f.retries_off);
  cells("fleet-controls", rows.length ? [["control", "value", "set by", "expiry"]].concat(rows)
    : [[f.store ? "no fleet control set" : "fleet controls need a shared store"]]);
  const e = f.effective;
  const from = e.shed_below_from ? ` (${e.shed_below_from})` : "";
  $("fleet-effective").textContent =
    `In force here: shed below ${e.shed_below || "off"}${from}; ` +
    `admit ${e.admit_percent === null ? "100" : fmtShort(e.admit_percent)}%; ` +
    `retries ${e.retries_enabled ? "on" : "off"}.` +
    (f.last_error ? ` Store: ${f.last_error}.` : "");
}

async function poll() {
  try {
    const body = await getJSON("/api/fleet", 4000);
    renderLease(body.quota_lease);
    renderControls(body.fleet_controls);
    window.spillwayDashboard && (window.spillwayDashboard.fleet = body);
  } catch (e) {
    $("fleet-lease").textContent = `Fleet state unavailable: ${e.message}`;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

export function startFleet() {
  poll();
}
