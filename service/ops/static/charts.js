/* taas ops: small dependency-free SVG charts (line, bars, heat map). Served from the package,
   so the dashboard works offline. Each function replaces the contents of `el` with one <svg>. */
"use strict";

const TaasCharts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 240, PAD = { l: 52, r: 12, t: 12, b: 30 };
  const COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c"];

  function node(name, attrs, parent) {
    const n = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    if (parent) parent.appendChild(n);
    return n;
  }

  function text(parent, x, y, content, attrs) {
    const t = node("text", { x, y, ...attrs }, parent);
    t.textContent = content;
    return t;
  }

  function svg(el, height) {
    const s = node("svg", { viewBox: `0 0 ${W} ${height || H}`, role: "img", preserveAspectRatio: "xMidYMid meet" });
    el.replaceChildren(s);
    return s;
  }

  function empty(el, message) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = message;
    el.replaceChildren(p);
  }

  function ticks(lo, hi, n) {
    if (hi === lo) return [lo];
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
    if (a >= 10 || v === 0) return String(Math.round(v));
    return a >= 0.01 ? v.toPrecision(2) : v.toExponential(1);
  }

  function clock(seconds) {
    const d = new Date(seconds * 1000);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: d.getSeconds() ? "2-digit" : undefined });
  }

  /* series: [{name, points: [[x, y], ...]}]; opts: {time: x is unix seconds, yMin} */
  function line(el, series, opts = {}) {
    const all = series.flatMap((s) => s.points.filter((p) => p[1] !== null && Number.isFinite(p[1])));
    if (all.length < 2) return empty(el, opts.emptyText || "No data yet.");
    const s = svg(el);
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs) === x0 ? x0 + 1 : Math.max(...xs);
    const y0 = opts.yMin !== undefined ? Math.min(opts.yMin, ...ys) : Math.min(...ys);
    let y1 = Math.max(...ys);
    if (y1 === y0) y1 = y0 + 1;
    const sx = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
    const sy = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
    const axes = node("g", { class: "axes" }, s);
    for (const v of ticks(y0, y1, 4)) {
      node("line", { x1: PAD.l, x2: W - PAD.r, y1: sy(v), y2: sy(v), class: "grid" }, axes);
      text(axes, PAD.l - 6, sy(v) + 4, fmt(v), { "text-anchor": "end" });
    }
    const xt = opts.time ? ticks(x0, x1, 4) : ticks(x0, x1, 5);
    for (const v of xt) {
      const anchor = sx(v) > W - 40 ? "end" : "middle"; // keep the last label inside the chart
      text(axes, sx(v), H - 8, opts.time ? clock(v) : fmt(v), { "text-anchor": anchor });
    }
    series.forEach((ser, i) => {
      const pts = ser.points.filter((p) => p[1] !== null && Number.isFinite(p[1]));
      if (!pts.length) return;
      const d = pts.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      node("path", { d, class: "series", stroke: COLORS[i % COLORS.length], "data-series": ser.name }, s);
    });
    if (series.length > 1) {
      series.forEach((ser, i) => {
        node("rect", { x: PAD.l + 8 + i * 120, y: PAD.t, width: 10, height: 10, fill: COLORS[i % COLORS.length] }, s);
        text(s, PAD.l + 22 + i * 120, PAD.t + 9, ser.name);
      });
    }
  }

  /* Vertical bars: labels[i] under a bar of height values[i]. */
  function bars(el, labels, values, opts = {}) {
    if (!values.length || values.every((v) => !v)) return empty(el, opts.emptyText || "No data yet.");
    const s = svg(el);
    const top = Math.max(...values), slot = (W - PAD.l - PAD.r) / values.length;
    const sy = (y) => H - PAD.b - (y / top) * (H - PAD.t - PAD.b);
    for (const v of ticks(0, top, 4)) {
      node("line", { x1: PAD.l, x2: W - PAD.r, y1: sy(v), y2: sy(v), class: "grid" }, s);
      text(s, PAD.l - 6, sy(v) + 4, fmt(v), { "text-anchor": "end" });
    }
    values.forEach((v, i) => {
      const x = PAD.l + i * slot + slot * 0.15;
      const bar = node("rect", { x, y: sy(v), width: slot * 0.7, height: H - PAD.b - sy(v), class: "column" }, s);
      node("title", {}, bar).textContent = `${labels[i]}: ${v}`;
      text(s, x + slot * 0.35, H - 10, labels[i], { "text-anchor": "middle" });
    });
  }

  /* A square matrix (rows: true class, columns: predicted) as a heat map with counts. */
  function heatmap(el, labels, matrix) {
    const n = labels.length;
    if (!n) return empty(el, "No confusion matrix.");
    const label = 110, cell = Math.max(8, Math.min(64, (W - label) / n)), size = label + cell * n;
    const right = n <= 40 ? 80 : 0; // room for the last rotated column label
    const s = node("svg", { viewBox: `0 0 ${size + right} ${size}`, width: size + right, role: "img" });
    el.replaceChildren(s);
    const top = Math.max(1, ...matrix.flat());
    const short = (t) => (t.length > 16 ? t.slice(0, 15) + "…" : t);
    matrix.forEach((row, i) => {
      if (n <= 40) text(s, label - 4, label + i * cell + cell / 2 + 4, short(labels[i]), { "text-anchor": "end" });
      row.forEach((v, j) => {
        const r = node("rect", {
          x: label + j * cell, y: label + i * cell, width: cell, height: cell,
          fill: `rgba(37, 99, 235, ${(0.06 + 0.94 * (v / top)).toFixed(3)})`, class: "cell",
        }, s);
        node("title", {}, r).textContent = `true ${labels[i]}, predicted ${labels[j]}: ${v}`;
        if (cell >= 22 && v) text(s, label + j * cell + cell / 2, label + i * cell + cell / 2 + 4, String(v),
          { "text-anchor": "middle", class: v / top > 0.5 ? "on-dark" : "" });
      });
    });
    if (n <= 40) labels.forEach((t, j) => {
      const x = label + j * cell + cell / 2;
      text(s, x, label - 6, short(t), { transform: `rotate(-45 ${x} ${label - 6})` });
    });
  }

  return { line, bars, heatmap };
})();
