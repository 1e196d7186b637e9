/* kvscope report: builds the Chart.js charts from the JSON block #kvscope-data.
   Every label here is drawn on a canvas by Chart.js (never parsed as HTML). */
(function () {
  "use strict";
  var holder = document.getElementById("kvscope-data");
  if (!holder || typeof Chart === "undefined") { return; }
  var data = JSON.parse(holder.textContent);
  var GRID = "rgba(0,0,0,0.08)";
  Chart.defaults.font.family = 'system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif';
  Chart.defaults.animation = false;
  window.kvscopeCharts = [];

  function gib(v) { return (v === null || v === undefined) ? "—" : Number(v).toFixed(2) + " GiB"; }
  function num(v) { return Number(v).toLocaleString("en-US"); }

  function memoryChart(canvas, m) {
    var box = canvas.parentNode;
    box.style.height = Math.max(140, 60 + 30 * m.labels.length) + "px";
    var datasets = m.datasets.map(function (d) {
      return { label: d.label, data: d.values, backgroundColor: d.colour, borderColor: "rgba(0,0,0,0.25)",
               borderWidth: 0.5, what: d.what, notes: d.notes, barPercentage: 0.85, categoryPercentage: 0.9 };
    });
    return new Chart(canvas, {
      type: "bar",
      data: { labels: m.labels, datasets: datasets },
      options: {
        indexAxis: "y", responsive: true, maintainAspectRatio: false,
        scales: { x: { stacked: true, title: { display: true, text: "GiB" }, grid: { color: GRID } },
                  y: { stacked: true, grid: { display: false } } },
        plugins: {
          legend: { position: "bottom" },
          tooltip: { callbacks: {
            label: function (ctx) { return ctx.dataset.label + ": " + gib(ctx.raw); },
            afterLabel: function (ctx) {
              var note = ctx.dataset.notes[ctx.dataIndex];
              return ctx.dataset.what + (note ? " (" + note + ")" : "");
            } } }
        }
      }
    });
  }

  function whatifChart(canvas, c) {
    var pts = c.points, lastX = pts[pts.length - 1].x, firstX = pts[0].x;
    var rated = c.risk_from !== null && c.risk_from !== undefined;
    var riskStart = rated ? Math.max(firstX, Math.min(lastX, c.risk_from)) : lastX;
    var datasets = [
      { label: "KV tokens", yAxisID: "y", data: pts.map(function (p) { return { x: p.x, y: p.tokens }; }),
        borderColor: "#27ae60", backgroundColor: "#27ae60", pointRadius: 2, tension: 0 },
      { label: c.reserve_label, yAxisID: "y2",
        data: pts.map(function (p) { return { x: p.x, y: p.reserve_gib }; }),
        borderColor: "#8e44ad", backgroundColor: "#8e44ad", pointRadius: 2, borderDash: [5, 3], tension: 0 },
      { label: "current " + c.knob + " = " + c.current, yAxisID: "band",
        data: [{ x: c.current, y: 0 }, { x: c.current, y: 1 }], pointRadius: 0, borderWidth: 2,
        borderColor: "#0969da", backgroundColor: "#0969da" }
    ];
    if (rated) {
      datasets.splice(2, 0, { label: c.risk_words ? "OOM risk: " + c.risk_words : "OOM risk: under " + c.margin_gib.toFixed(1) + " GiB left",
        yAxisID: "band", data: [{ x: riskStart, y: 1 }, { x: lastX, y: 1 }], fill: "origin", pointRadius: 0, borderWidth: 0,
        backgroundColor: "rgba(207,34,46,0.14)", borderColor: "rgba(207,34,46,0.4)" });
    }
    return new Chart(canvas, {
      type: "line",
      data: { datasets: datasets },
      options: {
        responsive: true, maintainAspectRatio: false, parsing: true,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", min: firstX, max: lastX, title: { display: true, text: c.knob }, grid: { color: GRID },
               ticks: { callback: function (v) { return Number(v).toFixed(2); } } },
          y: { position: "left", title: { display: true, text: "KV tokens" }, grid: { color: GRID },
               ticks: { callback: function (v) { return num(v); } } },
          y2: { position: "right", title: { display: true, text: "GiB left" }, grid: { display: false } },
          band: { display: false, min: 0, max: 1 }
        },
        plugins: {
          legend: { position: "bottom" },
          tooltip: { filter: function (item) { return item.dataset.yAxisID !== "band"; },
            callbacks: {
              title: function (items) { return items.length ? c.knob + " = " + Number(items[0].parsed.x).toFixed(2) : ""; },
              label: function (ctx) {
                if (ctx.dataset.yAxisID !== "y") { return "left: " + gib(ctx.parsed.y); }
                var conc = pts[ctx.dataIndex] && pts[ctx.dataIndex].concurrency;
                return "KV tokens: " + num(ctx.parsed.y) + (conc === null || conc === undefined ? ""
                  : " (" + Number(conc).toFixed(2) + " requests at once)");
              } } }
        }
      }
    });
  }

  var PALETTE = ["#0969da", "#27ae60", "#8e44ad", "#f39c12", "#e74c3c", "#17a2b8", "#6e7781", "#bf3989"];

  function runtimeChart(canvas, r) {
    var datasets = r.series.map(function (s, i) {
      return { label: s.label || s.name, yAxisID: s.axis, borderColor: PALETTE[i % PALETTE.length],
               backgroundColor: PALETTE[i % PALETTE.length], pointRadius: r.x.length > 200 ? 0 : 2, borderWidth: 1.5,
               spanGaps: true, data: r.x.map(function (x, j) { return { x: x, y: s.values[j] }; }) };
    });
    var hasY2 = r.series.some(function (s) { return s.axis === "y2"; });
    var hasY = r.series.some(function (s) { return s.axis === "y"; });
    return new Chart(canvas, {
      type: "line",
      data: { datasets: datasets },
      options: {
        responsive: true, maintainAspectRatio: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", title: { display: true, text: r.x_label }, grid: { color: GRID } },
          y: { display: hasY, position: "left", title: { display: true, text: "requests" }, grid: { color: GRID } },
          y2: { display: hasY2, position: "right", min: 0, max: 1, title: { display: true, text: "KV usage" },
                ticks: { callback: function (v) { return Math.round(v * 100) + " %"; } }, grid: { display: false } }
        },
        plugins: { legend: { position: "bottom" } }
      }
    });
  }

  function waterfallChart(canvas, w) {
    var colours = { total: "#0969da", up: "#27ae60", down: "#cf222e" };
    return new Chart(canvas, {
      type: "bar",
      data: { labels: w.bars.map(function (b) { return b.label; }),
              datasets: [{ label: "KV tokens", data: w.bars.map(function (b) { return [b.from, b.to]; }),
                           backgroundColor: w.bars.map(function (b) { return colours[b.kind]; }), borderSkipped: false }] },
      options: {
        responsive: true, maintainAspectRatio: false,
        scales: { y: { title: { display: true, text: "KV tokens" }, grid: { color: GRID },
                       ticks: { callback: function (v) { return num(v); } } },
                  x: { title: { display: true, text: "term" }, grid: { display: false } } },
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: {
            label: function (ctx) {
              var b = w.bars[ctx.dataIndex];
              if (b.kind === "total") { return "KV tokens: " + num(b.to); }
              var delta = b.to - b.from;
              return (delta >= 0 ? "+" : "") + num(delta) + " tokens" + (b.gib === null || b.gib === undefined ? ""
                : " (" + (b.gib >= 0 ? "+" : "") + Number(b.gib).toFixed(2) + " GiB)");
            },
            afterLabel: function (ctx) { return w.bars[ctx.dataIndex].cause || ""; } } }
        }
      }
    });
  }

  var builders = { memory: memoryChart, whatif: whatifChart, runtime: runtimeChart, waterfall: waterfallChart };
  var canvases = document.querySelectorAll("canvas[data-chart]");
  for (var i = 0; i < canvases.length; i++) {
    var canvas = canvases[i], kind = canvas.getAttribute("data-chart");
    var scopeName = canvas.getAttribute("data-scope");
    var scope = scopeName === "prediction" ? data.prediction
      : scopeName === "diff" ? (data.diff || [])[Number(canvas.getAttribute("data-index"))]
      : data.startups[Number(canvas.getAttribute("data-startup"))];
    var spec = scope && scope[kind];
    if (!spec || !builders[kind]) { continue; }
    try {
      window.kvscopeCharts.push(builders[kind](canvas, spec));
    } catch (err) {
      canvas.parentNode.textContent = "Chart could not be drawn: " + err;
    }
  }
}());
