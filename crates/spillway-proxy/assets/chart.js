// A small line chart on <canvas>: no framework, no CDN. One draw is a few thousand line
// segments at most (900 samples × a handful of series), so a full redraw per new sample costs
// well under a millisecond and the page stays responsive however loaded the proxy is.

import { fmtShort } from "./format.js";

export const PALETTE = ["#2563eb", "#16a34a", "#dc2626", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#475569"];

const FONT = "12px system-ui, -apple-system, 'Segoe UI', sans-serif";

export class LineChart {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {object} opts  xKind: "time" | "linear"; xMin/xMax (linear); yMax: a cap above which
   *   lines are clipped (e.g. to keep a saturating curve from flattening the rest); fmtX, fmtY;
   *   marks: points drawn as dots [{x, y, color, label}].
   */
  constructor(canvas, opts = {}) {
    this.canvas = canvas;
    this.opts = Object.assign({ xKind: "time", fmtY: fmtShort, unit: "" }, opts);
    this.series = [];
    this.data = null;
    this.draws = 0;
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(() => this.redraw()).observe(canvas);
    }
  }

  /** series: [{key, label, color, dash}] */
  setSeries(series) {
    this.series = series;
  }

  /** data: {x: number[], ys: {key: (number|null)[]}, xMin?, xMax?, marks?} */
  draw(data) {
    this.data = data;
    this.redraw();
  }

  redraw() {
    const c = this.canvas;
    const data = this.data;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(50, c.clientWidth);
    const h = Math.max(50, c.clientHeight);
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = FONT;
    if (!data || data.x.length === 0) {
      g.fillStyle = "#64748b";
      g.fillText("waiting for samples…", 12, h / 2);
      return;
    }
    const o = this.opts;
    // Legend rows: wrap when the labels do not fit on one line.
    const rows = [];
    let row = [];
    let rowW = 48;
    for (const s of this.series) {
      const sw = 20 + g.measureText(s.label).width + 14;
      if (row.length && rowW + sw > w - 8) {
        rows.push(row);
        row = [];
        rowW = 48;
      }
      row.push([s, rowW]);
      rowW += sw;
    }
    if (row.length) rows.push(row);
    const pad = { l: 48, r: o.xKind === "linear" ? 20 : 12, t: 12 + 16 * Math.max(1, rows.length), b: 22 };
    const pw = w - pad.l - pad.r;
    const ph = h - pad.t - pad.b;
    const xMin = data.xMin ?? o.xMin ?? data.x[0];
    const xMax = data.xMax ?? o.xMax ?? data.x[data.x.length - 1];
    let yMax = 0;
    for (const s of this.series) {
      const ys = data.ys[s.key] || [];
      for (let i = 0; i < ys.length; i++) {
        const v = ys[i];
        if (v !== null && v !== undefined && Number.isFinite(v) && v > yMax && data.x[i] >= xMin) yMax = v;
      }
    }
    if (o.yMax !== undefined) yMax = Math.min(yMax, o.yMax);
    if (o.yMin !== undefined) yMax = Math.max(yMax, o.yMin);
    yMax = niceCeil(yMax || 1);
    const X = (x) => pad.l + ((x - xMin) / (xMax - xMin || 1)) * pw;
    const Y = (y) => pad.t + ph - (Math.min(y, yMax) / yMax) * ph;

    // Grid and axes.
    g.strokeStyle = "#e2e8f0";
    g.fillStyle = "#64748b";
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4;
      const y = Math.round(Y(v)) + 0.5;
      g.beginPath();
      g.moveTo(pad.l, y);
      g.lineTo(pad.l + pw, y);
      g.stroke();
      g.fillText(o.fmtY(v), pad.l - 6, y);
    }
    g.textAlign = "center";
    g.textBaseline = "top";
    for (const [x, label] of this.xTicks(xMin, xMax)) {
      const px = Math.round(X(x)) + 0.5;
      g.beginPath();
      g.moveTo(px, pad.t);
      g.lineTo(px, pad.t + ph);
      g.stroke();
      g.fillText(label, px, pad.t + ph + 5);
    }

    // Lines, clipped to the plot; gaps where a value is missing.
    g.save();
    g.beginPath();
    g.rect(pad.l, pad.t - 1, pw, ph + 2);
    g.clip();
    let points = 0;
    for (const s of this.series) {
      const ys = data.ys[s.key] || [];
      g.strokeStyle = s.color;
      g.lineWidth = s.width || 1.75;
      g.setLineDash(s.dash || []);
      g.beginPath();
      let pen = false;
      for (let i = 0; i < ys.length; i++) {
        const v = ys[i];
        if (v === null || v === undefined || !Number.isFinite(v) || data.x[i] < xMin) {
          pen = false;
          continue;
        }
        const px = X(data.x[i]);
        const py = Y(v);
        if (pen) g.lineTo(px, py);
        else g.moveTo(px, py);
        pen = true;
        points++;
      }
      g.stroke();
    }
    g.setLineDash([]);
    for (const m of data.marks || []) {
      g.fillStyle = m.color;
      g.beginPath();
      g.arc(X(m.x), Y(m.y), 4, 0, 2 * Math.PI);
      g.fill();
    }
    g.restore();

    // Legend along the top.
    g.textAlign = "left";
    g.textBaseline = "middle";
    rows.forEach((r, k) => {
      const ly = 10 + 16 * k;
      for (const [s, lx] of r) {
        g.strokeStyle = s.color;
        g.lineWidth = 2.5;
        g.setLineDash(s.dash || []);
        g.beginPath();
        g.moveTo(lx, ly);
        g.lineTo(lx + 16, ly);
        g.stroke();
        g.setLineDash([]);
        g.fillStyle = "#334155";
        g.fillText(s.label, lx + 20, ly);
      }
    });
    this.draws++;
    this.canvas.dataset.points = String(points);
    this.canvas.dataset.draws = String(this.draws);
    this.canvas.dataset.ymax = String(yMax);
  }

  xTicks(xMin, xMax) {
    const o = this.opts;
    if (o.xKind === "linear") {
      const ticks = [];
      const step = o.xStep || (xMax - xMin) / 5;
      for (let x = xMin; x <= xMax + 1e-9; x += step) ticks.push([x, o.fmtX ? o.fmtX(x) : fmtShort(x)]);
      return ticks;
    }
    // Time: x in ms; label relative to the right edge.
    const span = xMax - xMin;
    const steps = [10e3, 30e3, 60e3, 120e3, 300e3];
    const step = steps.find((s) => span / s <= 6) || 300e3;
    const ticks = [];
    for (let k = 0; xMax - k * step >= xMin; k++) {
      const ago = k * step;
      const label = ago === 0 ? "now" : ago < 60e3 ? `−${ago / 1e3}s` : `−${ago / 60e3}m`;
      ticks.push([xMax - ago, label]);
    }
    return ticks;
  }
}

/** The next "nice" number at or above v: 1, 2, 2.5, 5 × 10^k. */
export function niceCeil(v) {
  const k = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * k >= v * 0.999999) return m * k;
  return 10 * k;
}
