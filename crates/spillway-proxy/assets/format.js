// Number formatting for people: the same rules as `spillway calc` (src/calc.rs: fmt_secs,
// fmt_rate, fmt_pct), so the calculator page prints exactly what the CLI prints. Formatting
// only: every figure comes from the server (spillway_core::erlang), never from a formula here.

/** A time in seconds: "360 ms", "4.12 ms", "0.412 ms", "<0.001 ms", "39.6 s". */
export function fmtSecs(secs) {
  if (secs === null || secs === undefined || !Number.isFinite(secs)) return "unbounded";
  const ms = secs * 1e3;
  if (secs === 0) return "0 ms";
  if (ms < 0.001) return "<0.001 ms";
  if (ms < 1) return `${ms.toFixed(3)} ms`;
  if (ms < 10) return `${ms.toFixed(2)} ms`;
  if (ms < 100) return `${ms.toFixed(1)} ms`;
  if (secs < 10) return `${ms.toFixed(0)} ms`;
  return `${secs.toFixed(1)} s`;
}

/** Requests per second: "1150 req/s", "12.5 req/s", "0.250 req/s". */
export function fmtRate(rps) {
  if (rps >= 100) return `${rps.toFixed(0)} req/s`;
  if (rps >= 1) return `${rps.toFixed(1)} req/s`;
  return `${rps.toFixed(3)} req/s`;
}

/** A fraction as a percentage: "90%", "89.9%". */
export function fmtPct(f) {
  const pct = f * 100;
  if (Math.abs(pct - Math.round(pct)) < 0.05) return `${pct.toFixed(0)}%`;
  return `${pct.toFixed(1)}%`;
}

/** A compact number for chart axes and tiles: 0, 12, 1.5k, 2.3M. */
export function fmtShort(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(a >= 1e7 ? 0 : 1)}M`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(a >= 1e4 ? 0 : 1)}k`;
  if (a >= 100 || a === 0 || Number.isInteger(v)) return `${Math.round(v)}`;
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(1);
  return v.toFixed(2);
}
