// pinlab's charts, drawn with uPlot (loaded before this script). A page
// embeds each chart's data (package chart's Chart, as JSON) and a figure
// element per chart (data-chart="ID", with .plot, .legend, .readout and a
// details.data for the table); pinlabChart.draw turns one into a chart.
(function () {
  "use strict";

  // Every drawn chart by ID, as drawn: what the browser tests read.
  const drawn = {};
  window.pinlabCharts = drawn;
  const plots = {}; // the uPlot instances by ID

  const live = []; // {fig, spec, handle}: redrawn on theme change and resize

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function theme() {
    const palette = [];
    for (let i = 0; i < 10; i++) palette.push(cssVar("--c" + i) || "#4e79a7");
    return {
      fg: cssVar("--fg") || "#222", muted: cssVar("--muted") || "#666",
      grid: cssVar("--grid") || "rgba(0,0,0,.1)", band: cssVar("--band") || "rgba(0,0,255,.06)",
      bandText: cssVar("--band-text") || "#555", err: cssVar("--err-band") || "rgba(255,0,0,.15)",
      mark: cssVar("--mark") || "#7a4cc2", palette: palette,
    };
  }

  function color(t, i) { return t.palette[i % t.palette.length]; }

  // fmt shows a figure exactly as the data has it.
  function fmt(v) { return v === null || v === undefined ? "none" : String(v); }

  function withUnit(v, unit) { return v === null || v === undefined ? "none" : fmt(v) + (unit ? " " + unit : ""); }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function seriesName(s) { return s.name || s.label; }

  function dataMax(spec) {
    let m = 0;
    for (const s of spec.series) for (const v of s.values) if (v !== null && v > m) m = v;
    return m;
  }

  // niceMax rounds the top of the y axis up to 1, 2 or 5 times a power of ten.
  function niceMax(m) {
    if (!(m > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    for (const f of [1, 2, 5, 10]) if (f * p >= m) return f * p;
    return 10 * p;
  }

  function xRange(spec) {
    const x = spec.x, n = x.length;
    if (spec.kind === "bars") {
      const last = spec.x_max || Math.max(n - 1, 0);
      return [-0.5, last + 0.5];
    }
    const lo = n ? x[0] : 0;
    let hi = spec.x_max || (n ? x[n - 1] + 1 : 1);
    if (hi <= lo) hi = lo + 1;
    return [lo, hi];
  }

  // bandsHook shades windows and error windows under the series.
  function drawBands(u, spec, t) {
    if (!spec.bands || !spec.bands.length) return;
    const ctx = u.ctx, b = u.bbox, dpr = uPlot.pxRatio;
    ctx.save();
    ctx.font = Math.round(10 * dpr) + "px sans-serif";
    ctx.textBaseline = "top";
    for (const band of spec.bands) {
      const x0 = Math.max(u.valToPos(band.from, "x", true), b.left);
      const x1 = Math.min(u.valToPos(band.to, "x", true), b.left + b.width);
      if (x1 <= x0) continue;
      ctx.fillStyle = band.kind === "error" ? t.err : t.band;
      ctx.fillRect(x0, b.top, x1 - x0, b.height);
      if (band.kind === "window" && x1 - x0 > 30 * dpr) {
        ctx.fillStyle = t.bandText;
        ctx.fillText(band.text, x0 + 3 * dpr, b.top + 3 * dpr, x1 - x0 - 6 * dpr);
      }
    }
    ctx.restore();
  }

  // drawMarks draws the timeline steps as dashed lines with their text.
  function drawMarks(u, spec, t) {
    if (!spec.marks || !spec.marks.length) return;
    const ctx = u.ctx, b = u.bbox, dpr = uPlot.pxRatio;
    ctx.save();
    ctx.strokeStyle = t.mark;
    ctx.fillStyle = t.mark;
    ctx.lineWidth = 1.5 * dpr;
    ctx.setLineDash([4 * dpr, 3 * dpr]);
    ctx.font = Math.round(11 * dpr) + "px sans-serif";
    ctx.textBaseline = "top";
    let row = 0;
    for (const m of spec.marks) {
      const x = Math.round(u.valToPos(m.at, "x", true));
      if (x < b.left || x > b.left + b.width) continue;
      ctx.beginPath();
      ctx.moveTo(x, b.top);
      ctx.lineTo(x, b.top + b.height);
      ctx.stroke();
      const w = ctx.measureText(m.text).width;
      const tx = x + w + 4 * dpr > b.left + b.width ? x - w - 4 * dpr : x + 4 * dpr;
      ctx.fillText(m.text, tx, b.top + (16 + 13 * (row++ % 3)) * dpr);
    }
    ctx.restore();
  }

  // tooltipLines are the exact figures at data index i.
  function tooltipLines(spec, i, maxRows) {
    const lines = [];
    if (spec.kind === "bars") {
      lines.push({head: spec.categories ? spec.categories[i] : fmt(spec.x[i])});
      for (const s of spec.series) lines.push({text: seriesName(s) + ": " + withUnit(s.values[i], spec.unit)});
      if (spec.notes && spec.notes[i]) lines.push({note: spec.notes[i]});
      return lines;
    }
    const x = spec.x[i];
    lines.push({head: spec.x_unit === "s" ? fmt(x) + " s to " + fmt(x + 1) + " s" : (spec.x_label ? spec.x_label + " " : "") + fmt(x)});
    const rows = spec.series.map((s, k) => ({k: k, s: s, v: s.values[i]}));
    rows.sort((a, b) => (b.v === null ? -1 : b.v) - (a.v === null ? -1 : a.v) || a.k - b.k);
    rows.slice(0, maxRows).forEach(r => lines.push({k: r.k, text: seriesName(r.s) + ": " + withUnit(r.v, spec.unit)}));
    if (rows.length > maxRows) lines.push({note: (rows.length - maxRows) + " more series (see the table)"});
    for (const m of spec.marks || []) if (m.at >= x && m.at < x + 1) lines.push({note: "step at " + m.at + " s: " + m.text});
    for (const b of spec.bands || []) if (b.from < x + 1 && b.to > x) lines.push({note: b.text});
    return lines;
  }

  function readoutText(lines) {
    return lines.map(l => l.head || l.text || l.note).join("; ");
  }

  function fillTip(tip, spec, lines, t) {
    tip.textContent = "";
    for (const l of lines) {
      if (l.head !== undefined) { tip.appendChild(el("div", "tip-head", l.head)); continue; }
      if (l.note !== undefined) { tip.appendChild(el("div", "tip-note", l.note)); continue; }
      const row = el("div", "tip-row");
      if (l.k !== undefined) {
        const sw = el("span", "swatch");
        sw.style.background = color(t, l.k);
        row.appendChild(sw);
      }
      row.appendChild(document.createTextNode(l.text));
      tip.appendChild(row);
    }
  }

  // buildTable fills details.data with the chart's data as a table.
  function buildTable(details, spec) {
    const table = el("table", "data-table");
    const head = table.createTHead().insertRow();
    const bars = spec.kind === "bars";
    head.appendChild(el("th", "", bars ? (spec.x_label || "") : (spec.x_label || "x")));
    for (const s of spec.series) {
      const th = el("th", "", seriesName(s) + (spec.unit ? " (" + spec.unit + ")" : ""));
      th.scope = "col";
      head.appendChild(th);
    }
    if (bars && spec.notes) head.appendChild(el("th", "", "details"));
    const body = table.createTBody();
    for (let i = 0; i < spec.x.length; i++) {
      const tr = body.insertRow();
      const th = el("th", "", bars && spec.categories ? spec.categories[i] : fmt(spec.x[i]));
      th.scope = "row";
      tr.appendChild(th);
      for (const s of spec.series) tr.appendChild(el("td", "num", fmt(s.values[i])));
      if (bars && spec.notes) tr.appendChild(el("td", "", spec.notes[i] || ""));
    }
    if (spec.bands && spec.bands.length || spec.marks && spec.marks.length) {
      const cap = el("caption");
      const parts = [];
      for (const m of spec.marks || []) parts.push("step at " + m.at + " s: " + m.text);
      for (const b of spec.bands || []) parts.push(b.text + " (" + b.from + " s to " + b.to + " s)");
      cap.textContent = parts.join("; ");
      table.appendChild(cap);
    }
    details.appendChild(table);
  }

  function legend(box, spec, t) {
    box.textContent = "";
    if (spec.kind === "bars") return;
    const max = 24;
    spec.series.slice(0, max).forEach((s, k) => {
      const item = el("span", "legend-item");
      const sw = el("span", "swatch");
      sw.style.background = color(t, k);
      item.appendChild(sw);
      item.appendChild(document.createTextNode(s.label));
      item.title = seriesName(s);
      box.appendChild(item);
    });
    if (spec.series.length > max) box.appendChild(el("span", "legend-item", "and " + (spec.series.length - max) + " more"));
  }

  // options are uPlot's options for the chart cur() returns: the chart as
  // it is now, since a live chart gets new data (and new bars) in place.
  function options(cur, width, t, onCursor) {
    const spec = cur();
    const bars = spec.kind === "bars";
    const series = [{label: spec.x_label}];
    spec.series.forEach((s, k) => {
      const o = {label: s.label, stroke: color(t, k), width: bars ? 0 : 1, points: {show: false}};
      if (bars) {
        const colors = spec.series.length === 1 ? () => cur().x.map((_, i) => color(t, i)) : null;
        o.fill = color(t, k);
        o.paths = uPlot.paths.bars({size: [0.7, 64], disp: colors ? {fill: {unit: 3, values: colors}} : undefined});
      }
      series.push(o);
    });
    const xAxis = {
      stroke: t.fg, grid: {stroke: t.grid, width: 1}, ticks: {stroke: t.grid, width: 1}, label: spec.x_label,
      labelSize: 20, font: "11px sans-serif", labelFont: "12px sans-serif",
    };
    if (bars) {
      xAxis.splits = () => {
        const x = cur().x, every = Math.max(1, Math.ceil(x.length / 24));
        return x.filter((_, i) => i % every === 0);
      };
      xAxis.values = (u, splits) => splits.map(v => cur().categories ? (cur().categories[v] || "") : fmt(v));
      xAxis.grid = {show: false};
    }
    return {
      width: width, height: bars ? 220 : 260, series: series,
      legend: {show: false},
      scales: {
        x: {time: false, range: () => xRange(cur())},
        y: {range: (u, lo, hi) => [0, cur().y_max || niceMax(Math.max(hi, dataMax(cur())))]},
      },
      axes: [xAxis, {
        stroke: t.fg, grid: {stroke: t.grid, width: 1}, ticks: {stroke: t.grid, width: 1}, label: spec.y_label,
        labelSize: 20, size: 56, font: "11px sans-serif", labelFont: "12px sans-serif",
      }],
      cursor: {drag: {x: false, y: false, setScale: false}, points: {show: !bars}},
      hooks: {
        drawClear: [u => drawBands(u, cur(), t)],
        draw: [u => drawMarks(u, cur(), t)],
        setCursor: [u => onCursor(u)],
      },
    };
  }

  // draw draws spec into fig and returns a handle: {update(spec), destroy()}.
  // normal fills in what JSON leaves out (nil slices are null).
  function normal(spec) {
    spec.x = spec.x || [];
    spec.series = (spec.series || []).map(s => Object.assign({}, s, {values: s.values || []}));
    return spec;
  }

  function draw(fig, spec) {
    spec = normal(spec);
    const box = fig.querySelector(".plot");
    const readout = fig.querySelector(".readout");
    const details = fig.querySelector("details.data");
    let t = theme();
    let tip = el("div", "tip");
    tip.hidden = true;
    let u = null;
    let keyIdx = null;

    const onCursor = (uu) => {
      const i = uu.cursor.idx;
      if (i === null || i === undefined || uu.cursor.left < 0) { tip.hidden = true; return; }
      const lines = tooltipLines(spec, i, 12);
      fillTip(tip, spec, lines, t);
      tip.hidden = false;
      const w = box.clientWidth;
      const left = uu.cursor.left + uu.over.offsetLeft;
      tip.style.left = (left + 14 + 240 > w ? Math.max(0, left - 254) : left + 14) + "px";
      tip.style.top = Math.max(0, uu.cursor.top + uu.over.offsetTop - 10) + "px";
      if (readout) readout.textContent = readoutText(lines);
      drawn[spec.id].tooltip = tip.textContent;
    };

    const make = () => {
      const width = Math.max(box.clientWidth || fig.clientWidth || 600, 240);
      box.textContent = "";
      u = new uPlot(options(() => spec, width, t, onCursor), [spec.x].concat(spec.series.map(s => s.values)), box);
      box.appendChild(tip);
      legend(fig.querySelector(".legend") || el("div"), spec, t);
      drawn[spec.id] = {kind: spec.kind, series: u.series.length - 1, points: u.data[0].length, tooltip: ""};
      plots[spec.id] = u;
    };
    make();

    // Keyboard: the arrow keys, Home and End move the cursor through the
    // points; Escape hides the tooltip.
    const moveTo = (i) => {
      const n = spec.x.length;
      if (!n) return;
      keyIdx = Math.min(Math.max(i, 0), n - 1);
      let top = u.bbox.height / uPlot.pxRatio / 3;
      const s = spec.series[0];
      if (spec.kind === "bars" && s && s.values[keyIdx] !== null) top = u.valToPos(s.values[keyIdx], "y");
      u.setCursor({left: u.valToPos(spec.x[keyIdx], "x"), top: top});
    };
    box.addEventListener("keydown", (e) => {
      const cur = keyIdx === null ? -1 : keyIdx;
      const page = Math.max(1, Math.round(spec.x.length / 10));
      switch (e.key) {
        case "ArrowRight": moveTo(cur + 1); break;
        case "ArrowLeft": moveTo(cur - 1); break;
        case "PageDown": moveTo(cur + page); break;
        case "PageUp": moveTo(cur - page); break;
        case "Home": moveTo(0); break;
        case "End": moveTo(spec.x.length - 1); break;
        case "Escape": tip.hidden = true; keyIdx = null; return;
        default: return;
      }
      e.preventDefault();
    });
    box.addEventListener("focus", () => { if (keyIdx === null) moveTo(0); });
    box.addEventListener("blur", () => { tip.hidden = true; });

    if (details && !details.dataset.bound) {
      details.dataset.bound = "1";
      details.addEventListener("toggle", () => {
        if (details.open && !details.querySelector("table")) buildTable(details, spec);
      });
    }

    const handle = {
      get plot() { return u; },
      update(next) {
        next = normal(next);
        const reshaped = next.series.length !== spec.series.length || next.kind !== spec.kind ||
          next.series.some((s, k) => s.label !== spec.series[k].label) || (next.categories || []).join() !== (spec.categories || []).join();
        spec = next;
        const table = details && details.querySelector("table");
        if (table) table.remove();
        if (details && details.open) buildTable(details, spec);
        if (reshaped) { u.destroy(); make(); return; }
        u.setData([spec.x].concat(spec.series.map(s => s.values)));
        drawn[spec.id] = {kind: spec.kind, series: u.series.length - 1, points: u.data[0].length, tooltip: drawn[spec.id].tooltip};
      },
      retheme() { t = theme(); u.destroy(); make(); },
      resize() {
        const width = Math.max(box.clientWidth || 600, 240);
        if (Math.abs(width - u.width) > 2) u.setSize({width: width, height: u.height});
      },
      destroy() {
        u.destroy();
        delete drawn[spec.id];
        delete plots[spec.id];
        const at = live.indexOf(handle);
        if (at >= 0) live.splice(at, 1);
      },
    };
    live.push(handle);
    return handle;
  }

  // drawAll draws every figure[data-chart] of the page whose ID is in specs
  // (an array of charts) and returns the handles by ID.
  function drawAll(specs) {
    const byID = {};
    for (const s of specs) byID[s.id] = s;
    const out = {};
    document.querySelectorAll("figure[data-chart]").forEach(fig => {
      const spec = byID[fig.dataset.chart];
      if (spec) out[spec.id] = draw(fig, spec);
    });
    return out;
  }

  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => live.forEach(h => h.retheme()));
  }
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => live.forEach(h => h.resize()), 150);
  });

  window.pinlabChart = {draw: draw, drawAll: drawAll, table: buildTable, plot: id => plots[id]};
})();
