// Charts through uPlot (vendored): stacked bars per step and x/y line charts.
"use strict";
(function (DV) {
  const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  DV.COLORS = COLORS;
  function width(el) { return Math.max(320, (el.clientWidth || 900) - 24); }

  // parts: [{label, values, color}] stacked bottom-up over x (numbers).
  DV.stackedBars = function (el, x, parts, yLabel, xLabel) {
    const cum = []; let run = x.map(() => 0);
    for (const p of parts) { run = run.map((v, i) => v + (p.values[i] || 0)); cum.push(run); }
    const order = parts.map((_, i) => i).reverse();  // the tallest stack first, each bar from 0
    const bars = uPlot.paths.bars({ size: [0.7, 60] });
    const opts = {
      width: width(el), height: 260, legend: { live: true },
      // whole-number x (steps, ranks) with half a bar of room each side; time from 0, in µs/ms/s
      scales: { x: { time: false, range: (u, lo, hi) => [lo - 0.5, hi + 0.5] }, y: { range: (u, lo, hi) => [0, hi * 1.05 || 1] } },
      axes: [{ label: xLabel || "step", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] },
        { label: yLabel, size: 80, values: (u, vals) => vals.map(DV.us) }],
      series: [{ label: xLabel || "step" }, ...order.map((i) => ({
        label: parts[i].label, fill: parts[i].color || COLORS[i], stroke: parts[i].color || COLORS[i],
        paths: bars, points: { show: false },
        value: (u, v, si, di) => (di === null || di === undefined ? "–" : DV.us(parts[i].values[di])),
      }))],
    };
    return new uPlot(opts, [x, ...order.map((i) => cum[i])], el);
  };

  // series: [{label, x:[...], y:[...]}]; all x joined on one axis. more.points: false for dense series,
  // more.stepped: a value holds until the next one (an allocator's totals).
  DV.lines = function (el, series, xLabel, yLabel, fmtY, more) {
    more = more || {};
    const stepped = more.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;
    const xs = Array.from(new Set(series.flatMap((s) => s.x))).sort((a, b) => a - b);
    const data = [xs, ...series.map((s) => { const m = new Map(s.x.map((x, i) => [x, s.y[i]])); return xs.map((x) => (m.has(x) ? m.get(x) : null)); })];
    const opts = {
      width: width(el), height: 240, scales: { x: { time: false } },
      axes: [{ label: xLabel }, { label: yLabel, size: 70, values: fmtY ? (u, vals) => vals.map(fmtY) : undefined }],
      series: [{ label: xLabel }, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2,
        spanGaps: true, points: { show: more.points !== false, size: 5 }, paths: stepped, value: fmtY ? (u, v) => (v === null ? "–" : fmtY(v)) : undefined }))],
    };
    return new uPlot(opts, data, el);
  };
})(window.DV);
