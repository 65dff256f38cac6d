// abtest history dashboard: filters -> /api/points -> plotly chart (per-build value, 95 % CI error bars,
// change points marked at the first build after the step) and the change-point table. Clicking a change point
// (marker or row link) opens its compare/explain report.
"use strict";
let SERIES = [];

function uniq(xs) { return [...new Set(xs)].sort(); }
function sel(id) { return document.getElementById(id); }
function fill(id, values, keep) {
  const s = sel(id), old = keep || s.value;
  s.innerHTML = "";
  for (const v of values) { const o = document.createElement("option"); o.value = o.textContent = v; s.appendChild(o); }
  if (values.includes(old)) s.value = old;
}
function params() {
  return new URLSearchParams(location.search);
}
function refreshFilters(init) {
  const p = init ? params() : new URLSearchParams();
  fill("device", uniq(SERIES.map(s => s.device)), p.get("device"));
  const d = sel("device").value;
  fill("workload", uniq(SERIES.filter(s => s.device === d).map(s => s.workload)), p.get("workload"));
  const w = sel("workload").value;
  fill("metric", uniq(SERIES.filter(s => s.device === d && s.workload === w).map(s => s.metric)), p.get("metric"));
}
function esc(t) { const e = document.createElement("span"); e.textContent = String(t); return e.innerHTML; }

async function draw() {
  const q = new URLSearchParams({device: sel("device").value, workload: sel("workload").value,
                                 metric: sel("metric").value});
  history.replaceState(null, "", "?" + q.toString());
  const doc = await (await fetch("/api/points?" + q.toString())).json();
  const pts = doc.points, s = doc.series, cps = doc.change_points;
  const x = pts.map(p => p.label);
  const y = pts.map(p => p.value);
  const plus = pts.map(p => p.ci_high === null ? 0 : p.ci_high - p.value);
  const minus = pts.map(p => p.ci_low === null ? 0 : p.value - p.ci_low);
  const series = {x: x, y: y, name: s.metric, mode: "lines+markers", type: "scatter",
                  error_y: {type: "data", array: plus, arrayminus: minus, visible: true},
                  customdata: pts.map(p => [p.n, p.date]),
                  hovertemplate: "%{x}<br>%{y:.4g} " + s.unit + " (n=%{customdata[0]})<br>%{customdata[1]}<extra></extra>"};
  const byLabel = Object.fromEntries(pts.map(p => [p.label, p.value]));
  const marks = {x: cps.map(c => c.after.label), y: cps.map(c => byLabel[c.after.label]), name: "change points",
                 mode: "markers", type: "scatter", customdata: cps.map(c => c.id),
                 text: cps.map(c => c.kind + " " + c.delta_pct.toFixed(2) + " %"),
                 marker: {symbol: "x", size: 16, color: cps.map(c => c.kind === "regression" ? "#c00" : "#080")},
                 hovertemplate: "%{text}<br>click: report<extra></extra>"};
  const shapes = cps.map(c => ({type: "line", xref: "x", yref: "paper", x0: c.after.label, x1: c.after.label,
                                y0: 0, y1: 1, line: {dash: "dot", color: c.kind === "regression" ? "#c00" : "#080"}}));
  const layout = {title: s.device + " / " + s.workload + " / " + s.metric, shapes: shapes,
                  xaxis: {title: "build", type: "category"}, yaxis: {title: s.metric + " (" + s.unit + ")"},
                  margin: {t: 40}, showlegend: true};
  await Plotly.react("chart", [series, marks], layout, {responsive: true});
  const chart = sel("chart");
  chart.removeAllListeners && chart.removeAllListeners("plotly_click");
  chart.on("plotly_click", ev => {
    const pt = ev.points[0];
    if (pt.curveNumber === 1) window.location = "/report/" + pt.customdata;
  });
  const body = document.querySelector("#changepoints tbody");
  body.innerHTML = "";
  for (const c of cps) {
    const tr = document.createElement("tr");
    tr.className = c.kind;
    tr.innerHTML = `<td class="kind">${esc(c.kind)}</td><td>${c.delta_pct.toFixed(2)} %</td>` +
      `<td>${c.p_value.toExponential(1)}</td><td>${esc(c.before.label)} &rarr; ${esc(c.after.label)}</td>` +
      `<td>${esc(c.triage)}</td><td><a id="cp-${c.id}" href="/report/${c.id}">compare / explain</a></td>` +
      `<td><code>${esc(c.commands.bisect)}</code></td>`;
    body.appendChild(tr);
  }
  sel("status").textContent = `${pts.length} builds, ${cps.length} change point(s)`;
  sel("status").dataset.ready = "1";
}

async function main() {
  SERIES = await (await fetch("/api/series")).json();
  if (!SERIES.length) { sel("status").textContent = "no series: run abtest history add STORE"; return; }
  refreshFilters(true);
  for (const id of ["device", "workload"]) sel(id).addEventListener("change", () => { refreshFilters(false); draw(); });
  sel("metric").addEventListener("change", draw);
  await draw();
}
main();
