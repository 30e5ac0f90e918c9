// rayjobs' page: the curves (uPlot) and the followed log. Everything else is htmx attributes.
"use strict";
(function () {
  const COLORS = ["#0b5cad", "#c4432b", "#2a8a3e", "#8250df", "#b08800", "#1b7c83", "#cf222e", "#57606a"];
  const DASHES = [[], [6, 3], [2, 2], [8, 3, 2, 3]];  // not colour alone: each series its own dash

  function series(names) {
    return [{ label: "step" }].concat(names.map((n, i) => ({
      label: n, stroke: COLORS[i % COLORS.length], dash: DASHES[i % DASHES.length],
      width: 2, spanGaps: true, points: { show: true, size: 4 } })));
  }

  const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];

  // marks: steps to draw a labelled vertical line at (a sweep's halving rungs)
  function plot(el, title, x, names, data, width, marks) {
    const opts = { title: title, width: width, height: 240, scales: { x: { time: false } }, series: series(names),
                   axes: [{ label: "step", incrs: STEPS }, {}], hooks: { draw: [(u) => rungs(u, marks || [])] } };
    return new uPlot(opts, [x].concat(data), el);
  }

  function rungs(u, marks) {
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = "#57606a";
    ctx.fillStyle = "#57606a";
    ctx.setLineDash([4, 4]);
    ctx.font = "12px sans-serif";
    for (const step of marks) {
      const x = Math.round(u.valToPos(step, "x", true));
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.fillText("rung " + step, x + 4, u.bbox.top + 14);
    }
    ctx.restore();
  }

  // A job: one small chart per metric shown, updated from the page's metrics route.
  function jobCurves(el) {
    const charts = {};
    const draw = (c) => {
      const w = Math.max(320, Math.min(640, el.clientWidth / 2 - 16));
      for (const name of c.shown) {
        if (!charts[name]) {
          const box = document.createElement("div");
          box.className = "chart";
          el.appendChild(box);
          charts[name] = plot(box, name, c.x, [name], [c.series[name]], w);
        } else {
          charts[name].setData([c.x, c.series[name]]);
        }
      }
      const pts = document.getElementById("points");
      if (pts) pts.textContent = String(c.x.length);
    };
    draw(JSON.parse(document.getElementById("curves-data").textContent));
    if (el.dataset.live !== "1") return;
    const tick = () => fetch(el.dataset.src, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : null)).then((c) => { if (c) draw(c); })
      .catch(() => {}).finally(() => setTimeout(tick, 5000));
    setTimeout(tick, 5000);
  }

  // A job's log from an offset, polled: each answer says the next offset and whether it is over.
  // Shown as text (never markup), its ANSI colour codes dropped, its last 200 kB kept.
  const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;
  function followLog(pre) {
    const KEEP = 200000;
    let offset = 0;
    // a long poll: the door answers once there are new bytes (or after 20 s, or at the end)
    const tick = () => fetch(pre.dataset.src + "?wait=20&offset=" + offset, { credentials: "same-origin" })
      .then((r) => {
        if (!r.ok) return null;
        const next = parseInt(r.headers.get("X-Rayjobs-Next") || String(offset), 10);
        const over = r.headers.get("X-Rayjobs-Over") === "1";
        return r.text().then((t) => ({ t, next, over }));
      }).then((got) => {
        if (!got) return setTimeout(tick, 4000);
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        if (got.t) {
          let text = pre.textContent + got.t.replace(ANSI, "");
          if (text.length > KEEP) text = text.slice(text.length - KEEP);
          pre.textContent = text;
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        offset = got.next;
        pre.dataset.offset = String(offset);
        if (!got.over || got.t) setTimeout(tick, got.t ? 1000 : 100);  // at most a second behind, a request a second
      }).catch(() => setTimeout(tick, 4000));
    tick();
  }

  // A sweep: every point's curve of the ranking metric on one chart.
  function sweepChart(el) {
    const c = JSON.parse(document.getElementById("sweep-data").textContent);
    const names = Object.keys(c.series);
    plot(el, null, c.x, names, names.map((n) => c.series[n]), Math.max(480, Math.min(1100, el.clientWidth)),
         JSON.parse(el.dataset.rungs || "[]"));
  }

  document.addEventListener("DOMContentLoaded", () => {
    const curves = document.getElementById("curves");
    if (curves) jobCurves(curves);
    const log = document.getElementById("log");
    if (log) followLog(log);
    const sweep = document.getElementById("sweep-chart");
    if (sweep) sweepChart(sweep);
  });
})();
