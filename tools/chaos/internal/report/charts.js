// Draws the chaos report's charts as SVG from the JSON in #chart-data (report/charts.go):
// two line charts over the run's buckets, shaded by the fault windows, and the fault
// timeline. Nothing is fetched: the report is one file.
(function () {
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const W = 980, H = 300, L = 110, R = 190, T = 28, B = 40, PW = W - L - R, PH = H - T - B;
  const NS = "http://www.w3.org/2000/svg";

  function el(parent, name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  }
  function svg(id, height, title) {
    const s = el(document.getElementById(id), "svg", { viewBox: `0 0 ${W} ${height}`, width: W, height: height, "font-family": "sans-serif" });
    el(s, "rect", { width: "100%", height: "100%", fill: "white" });
    el(s, "text", { x: L, y: 18, "font-size": 14, "font-weight": "bold" }, title);
    return s;
  }
  // niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten.
  function niceStep(raw) {
    if (raw <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function tick(v) {
    if (v >= 1000) return v / 1000 + "k";
    if (v === Math.trunc(v)) return v.toFixed(0);
    if (v >= 1) return v.toFixed(1);
    return String(Number(v.toPrecision(2)));
  }
  function xAxis(s, base, x) {
    el(s, "line", { x1: L, y1: base, x2: L + PW, y2: base, stroke: "#333" });
    const step = niceStep(data.xmax / 8);
    for (let t = 0; t <= data.xmax; t += step) {
      el(s, "line", { x1: x(t), y1: base, x2: x(t), y2: base + 4, stroke: "#333" });
      el(s, "text", { x: x(t), y: base + 16, "font-size": 10, "text-anchor": "middle" }, tick(t) + "s");
    }
  }

  function lineChart(c) {
    let ymin = 0, ymax = 1;
    if (c.log) { ymin = Infinity; ymax = 0; }
    for (const l of c.lines) for (const y of l.ys) {
      if (y === null) continue;
      ymax = Math.max(ymax, y);
      if (c.log && y > 0) ymin = Math.min(ymin, y);
    }
    const ticks = [];
    if (c.log) {
      if (ymin === Infinity) { ymin = 1; ymax = 10; }
      ymin = Math.pow(10, Math.floor(Math.log10(ymin)));
      ymax = Math.pow(10, Math.ceil(Math.log10(Math.max(ymax, ymin * 10))));
      for (let v = ymin; v <= ymax * 1.001; v *= 10) ticks.push(v);
    } else {
      const step = niceStep(ymax / 5);
      ymax = Math.ceil(ymax * 1.05 / step) * step;
      for (let v = 0; v <= ymax + step / 2; v += step) ticks.push(v);
    }
    const x = v => L + v / data.xmax * PW;
    const y = c.log
      ? v => T + PH - (Math.log10(v) - Math.log10(ymin)) / (Math.log10(ymax) - Math.log10(ymin)) * PH
      : v => T + PH - (v - ymin) / (ymax - ymin) * PH;
    const s = svg("chart-" + c.id, H, c.title);
    // Each category shades its own band of the height, every window faintly, so that
    // where many overlap the band is dark: density, not just presence.
    const band = PH / data.categories.length;
    for (const w of data.shades) {
      const i = data.categories.findIndex(k => k.name === w.category);
      if (i < 0) continue;
      const k = data.categories[i];
      el(s, "rect", { x: x(w.from), y: T + i * band, width: Math.max(0.5, x(Math.min(w.to, data.xmax)) - x(w.from)), height: band, fill: k.color, opacity: k.opacity });
    }
    if (data.load_end > 0 && data.load_end < data.xmax) {
      el(s, "line", { x1: x(data.load_end), y1: T, x2: x(data.load_end), y2: T + PH, stroke: "#555", "stroke-dasharray": "4 3" });
      el(s, "text", { x: x(data.load_end) - 3, y: T - 3, "font-size": 10, fill: "#555", "text-anchor": "end" }, "load ends");
    }
    for (const t of ticks) {
      el(s, "line", { x1: L, y1: y(t), x2: L + PW, y2: y(t), stroke: "#e5e5e5" });
      el(s, "text", { x: L - 4, y: y(t) + 3, "font-size": 10, "text-anchor": "end" }, tick(t));
    }
    xAxis(s, T + PH, x);
    el(s, "text", { x: L + PW / 2, y: H - 6, "font-size": 11, "text-anchor": "middle" }, "seconds since the load started");
    el(s, "text", { x: L - 44, y: T + PH / 2, "font-size": 11, transform: `rotate(-90 ${L - 44} ${T + PH / 2})`, "text-anchor": "middle" }, c.unit);
    c.lines.forEach((l, i) => {
      let pts = [];
      const flush = () => {
        if (pts.length > 1) el(s, "polyline", { fill: "none", stroke: l.color, "stroke-width": 1.6, points: pts.join(" ") });
        else if (pts.length === 1) { const [px, py] = pts[0].split(","); el(s, "circle", { cx: px, cy: py, r: 1.5, fill: l.color }); }
        pts = [];
      };
      l.ys.forEach((v, j) => {
        if (v === null || (c.log && v <= 0)) { flush(); return; }
        pts.push(x(data.xs[j]).toFixed(1) + "," + y(v).toFixed(1));
      });
      flush();
      const ly = T + 14 + i * 16;
      el(s, "line", { x1: W - R + 12, y1: ly - 4, x2: W - R + 30, y2: ly - 4, stroke: l.color, "stroke-width": 3 });
      el(s, "text", { x: W - R + 34, y: ly, "font-size": 11 }, l.name);
    });
    data.categories.forEach((k, i) => {
      const ly = T + 14 + (c.lines.length + i) * 16;
      el(s, "rect", { x: W - R + 12, y: ly - 9, width: 18, height: 9, fill: k.color, opacity: 0.35 });
      el(s, "text", { x: W - R + 34, y: ly, "font-size": 11 }, k.label);
    });
  }

  function timeline(tl) {
    const lane = 18, base = T + tl.kinds.length * lane;
    const s = svg("chart-faults", base + B, "Faults over time (filled: hit, hollow: scheduled but missed)");
    const x = v => L + Math.min(v, data.xmax) / data.xmax * PW;
    tl.kinds.forEach((k, i) => {
      const yy = T + i * lane;
      el(s, "text", { x: L - 4, y: yy + 12, "font-size": 10, "text-anchor": "end" }, k);
      el(s, "line", { x1: L, y1: yy + lane - 1, x2: L + PW, y2: yy + lane - 1, stroke: "#eee" });
    });
    for (const m of tl.marks) {
      const color = tl.colors[m.lane];
      const r = el(s, "rect", { x: x(m.from), y: T + m.lane * lane + 3, width: Math.max(1.2, x(m.to) - x(m.from)), height: lane - 7,
        fill: m.fired ? color : "none", stroke: color, "stroke-width": 0.6, opacity: 0.8 });
      el(r, "title", {}, m.title);
    }
    xAxis(s, base, x);
  }

  data.charts.forEach(lineChart);
  timeline(data.timeline);
})();
