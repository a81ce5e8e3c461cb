/* taas ops: small dependency-free SVG charts (line, bars, heat map). Served from the package,
   so the dashboard works offline. Each function replaces the contents of `el` with one <svg>. */
"use strict";

const TaasCharts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 250, PAD = { l: 64, r: 12, t: 12, b: 44 };
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

  /* Ticks on a clock's round values: every 1, 2, 5, 10, 15 or 30 s, minutes or hours (in the
     browser's time zone), at most about n of them. */
  const CLOCK_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  function timeTicks(lo, hi, n) {
    const step = CLOCK_STEPS.find((s) => s >= (hi - lo) / n) || CLOCK_STEPS[CLOCK_STEPS.length - 1];
    const offset = new Date(lo * 1000).getTimezoneOffset() * 60;  // local midnight is a round value
    const out = [];
    for (let v = Math.ceil((lo - offset) / step) * step + offset; v <= hi; v += step) out.push(v);
    return out;
  }

  function clock(seconds) {
    const d = new Date(seconds * 1000);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: d.getSeconds() ? "2-digit" : undefined });
  }

  /* The axes' titles: x under its tick labels, y turned along the left edge. */
  function titles(s, height, xTitle, yTitle) {
    if (xTitle) text(s, PAD.l + (W - PAD.l - PAD.r) / 2, height - 4, xTitle, { "text-anchor": "middle", class: "axis-title" });
    if (yTitle) {
      const y = PAD.t + (height - PAD.t - PAD.b) / 2;
      text(s, 12, y, yTitle, { "text-anchor": "middle", class: "axis-title", transform: `rotate(-90 12 ${y})` });
    }
  }

  /* series: [{name, points: [[x, y], ...]}]; opts: {time: x is unix seconds, yMin, integer: y
     counts things (no tick between whole numbers), xTitle, yTitle, emptyText}. Hovering reads off each series' point nearest the pointer. */
  function line(el, series, opts = {}) {
    const drawn = series.map((ser) => ser.points.filter((p) => p[1] !== null && Number.isFinite(p[1])));
    const all = drawn.flat();
    if (all.length < 2) return empty(el, opts.emptyText || "No data yet.");
    const s = svg(el);
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs) === x0 ? x0 + 1 : Math.max(...xs);
    const y0 = opts.yMin !== undefined ? Math.min(opts.yMin, ...ys) : Math.min(...ys);
    let y1 = Math.max(...ys);
    if (y1 === y0) y1 = y0 + 1;
    const sx = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
    const sy = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
    const ix = (px) => x0 + ((px - PAD.l) / (W - PAD.l - PAD.r)) * (x1 - x0);  // sx inverted
    const xLabel = (x) => (opts.time ? clock(x) : fmt(x));
    const axes = node("g", { class: "axes" }, s);
    for (const v of ticks(y0, y1, 4).filter((t) => !opts.integer || Number.isInteger(t))) {
      node("line", { x1: PAD.l, x2: W - PAD.r, y1: sy(v), y2: sy(v), class: "grid" }, axes);
      text(axes, PAD.l - 6, sy(v) + 4, fmt(v), { "text-anchor": "end" });
    }
    for (const v of opts.time ? timeTicks(x0, x1, 4) : ticks(x0, x1, 5)) {
      const anchor = sx(v) > W - 40 ? "end" : "middle"; // keep the last label inside the chart
      text(axes, sx(v), H - PAD.b + 16, xLabel(v), { "text-anchor": anchor, class: "x-tick", "data-value": v });
    }
    titles(s, H, opts.xTitle, opts.yTitle);
    drawn.forEach((pts, i) => {
      if (!pts.length) return;
      const d = pts.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      node("path", { d, class: "series", stroke: COLORS[i % COLORS.length], "data-series": series[i].name }, s);
    });
    if (series.length > 1) {
      series.forEach((ser, i) => {
        node("rect", { x: PAD.l + 8 + i * 120, y: PAD.t, width: 10, height: 10, fill: COLORS[i % COLORS.length] }, s);
        text(s, PAD.l + 22 + i * 120, PAD.t + 9, ser.name);
      });
    }
    hover(el, s, drawn, series.map((ser) => ser.name), sx, sy, ix, xLabel);
  }

  /* A rule, a dot per series and a read-out ("x · name value") at the point nearest the pointer.
     The pointer's place is kept on `el`, so a live chart redrawn under a still pointer keeps it. */
  function hover(el, s, drawn, names, sx, sy, ix, xLabel) {
    const layer = node("g", { class: "hover", visibility: "hidden" }, s);
    const rule = node("line", { y1: PAD.t, y2: H - PAD.b, class: "rule" }, layer);
    const dots = drawn.map((_, i) => node("circle", { r: 3.5, fill: COLORS[i % COLORS.length] }, layer));
    const readout = text(layer, 0, PAD.t + 10, "", { class: "readout" });
    const area = node("rect", { x: PAD.l, y: PAD.t, width: W - PAD.l - PAD.r, height: H - PAD.t - PAD.b, class: "hover-area" }, s);
    const nearest = (pts, x) => pts.reduce((a, b) => (Math.abs(b[0] - x) < Math.abs(a[0] - x) ? b : a));
    const show = (px) => {
      const at = nearest(drawn.find((pts) => pts.length), ix(px));
      const parts = [];
      drawn.forEach((pts, i) => {
        if (!pts.length) return dots[i].setAttribute("visibility", "hidden");
        const p = nearest(pts, at[0]);
        dots[i].setAttribute("cx", sx(p[0]));
        dots[i].setAttribute("cy", sy(p[1]));
        dots[i].setAttribute("visibility", "visible");
        parts.push(`${names[i]} ${fmt(p[1])}`);
      });
      rule.setAttribute("x1", sx(at[0]));
      rule.setAttribute("x2", sx(at[0]));
      readout.textContent = `${xLabel(at[0])} · ${parts.join(" · ")}`;
      const right = sx(at[0]) > W / 2;
      readout.setAttribute("x", sx(at[0]) + (right ? -8 : 8));
      readout.setAttribute("text-anchor", right ? "end" : "start");
      layer.setAttribute("visibility", "visible");
    };
    area.addEventListener("mousemove", (event) => {
      // the pointer in the viewBox's units (the chart may be scaled and letterboxed)
      const pointer = new DOMPoint(event.clientX, event.clientY).matrixTransform(s.getScreenCTM().inverse());
      el.dataset.hoverX = pointer.x;
      show(pointer.x);
    });
    area.addEventListener("mouseleave", () => {
      delete el.dataset.hoverX;
      layer.setAttribute("visibility", "hidden");
    });
    if (el.dataset.hoverX !== undefined) show(Number(el.dataset.hoverX));
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
      text(s, x + slot * 0.35, H - PAD.b + 16, labels[i], { "text-anchor": "middle" });
    });
    titles(s, H, opts.xTitle, opts.yTitle);
  }

  /* A square matrix (rows: true class, columns: predicted) as a heat map with counts, each
     cell's count and classes on hover, the axes titled. */
  function heatmap(el, labels, matrix) {
    const n = labels.length;
    if (!n) return empty(el, "No confusion matrix.");
    const title = 20, label = 110, cell = Math.max(8, Math.min(64, (W - label) / n));
    const at = title + label, size = at + cell * n;  // where the cells start, and end
    const right = n <= 40 ? 80 : 0; // room for the last rotated column label
    const s = node("svg", { viewBox: `0 0 ${size + right} ${size}`, width: size + right, role: "img" });
    el.replaceChildren(s);
    const top = Math.max(1, ...matrix.flat());
    const short = (t) => (t.length > 16 ? t.slice(0, 15) + "…" : t);
    const middle = at + (cell * n) / 2;
    text(s, middle, 14, "Predicted class", { "text-anchor": "middle", class: "axis-title" });
    text(s, 14, middle, "True class", { "text-anchor": "middle", class: "axis-title", transform: `rotate(-90 14 ${middle})` });
    matrix.forEach((row, i) => {
      if (n <= 40) text(s, at - 4, at + i * cell + cell / 2 + 4, short(labels[i]), { "text-anchor": "end" });
      row.forEach((v, j) => {
        const r = node("rect", {
          x: at + j * cell, y: at + i * cell, width: cell, height: cell,
          fill: `rgba(37, 99, 235, ${(0.06 + 0.94 * (v / top)).toFixed(3)})`, class: "cell",
        }, s);
        node("title", {}, r).textContent = `true ${labels[i]}, predicted ${labels[j]}: ${v}`;
        if (cell >= 22 && v) text(s, at + j * cell + cell / 2, at + i * cell + cell / 2 + 4, String(v),
          { "text-anchor": "middle", class: v / top > 0.5 ? "on-dark" : "" });
      });
    });
    if (n <= 40) labels.forEach((t, j) => {
      const x = at + j * cell + cell / 2;
      text(s, x, at - 6, short(t), { transform: `rotate(-45 ${x} ${at - 6})` });
    });
  }

  return { line, bars, heatmap };
})();
