// Line charts drawn as SVG, with no library: lines, shaded bands (a spread or an interval)
// and points with error bars (held-out evaluations).
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function tickLabel(value) {
  if (Math.abs(value) >= 100) return String(Math.round(value));
  return String(Number(value.toPrecision(2)));
}

function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

// spec: {title, yLabel, yMin?, yMax?, lines: [{name, color, xs, ys, lows?, highs?}],
//        points: [{name, color, xs, ys, lows, highs}]}
function lineChart(container, spec) {
  const width = 460, height = 220, left = 48, right = 12, top = 26, bottom = 34;
  const lines = spec.lines || [], points = spec.points || [];
  const xs = [...lines, ...points].flatMap((s) => s.xs);
  const ys = [...lines, ...points].flatMap((s) => [...s.ys, ...(s.lows || []), ...(s.highs || [])])
    .filter((y) => y !== null && !Number.isNaN(y));
  const xMin = Math.min(0, ...xs), xMax = Math.max(1, ...xs);
  let yMin = spec.yMin ?? Math.min(0, ...ys), yMax = spec.yMax ?? Math.max(yMin, ...ys);
  if (yMax - yMin < 1e-9) yMax = yMin + 1;  // a flat series (all zeros) still gets a scale
  const x = (v) => left + ((v - xMin) / (xMax - xMin)) * (width - left - right);
  const y = (v) => top + (1 - (v - yMin) / (yMax - yMin)) * (height - top - bottom);

  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img" });
  chart.append(Object.assign(svg("text", { x: left, y: 16, class: "chart-title" }),
    { textContent: spec.title }));
  for (const tick of [yMin, (yMin + yMax) / 2, yMax]) {
    chart.append(svg("line", { x1: left, x2: width - right, y1: y(tick), y2: y(tick), class: "grid" }));
    chart.append(Object.assign(svg("text", { x: left - 6, y: y(tick) + 4, class: "tick", "text-anchor": "end" }),
      { textContent: tickLabel(tick) }));
  }
  const steps = [...new Set(xs)].sort((a, b) => a - b);
  const every = Math.max(1, Math.ceil(steps.length / 8));
  steps.filter((_, i) => i % every === 0).forEach((step) => {
    chart.append(Object.assign(svg("text", { x: x(step), y: height - bottom + 16, class: "tick", "text-anchor": "middle" }),
      { textContent: step }));
  });
  chart.append(Object.assign(svg("text", { x: width / 2, y: height - 4, class: "tick", "text-anchor": "middle" }),
    { textContent: "RL step" }));

  for (const line of lines) {
    const kept = line.xs.map((v, i) => i).filter((i) => line.ys[i] !== null && !Number.isNaN(line.ys[i]));
    if (line.lows && kept.length) {
      const upper = kept.map((i) => `${x(line.xs[i])},${y(line.highs[i])}`);
      const lower = kept.slice().reverse().map((i) => `${x(line.xs[i])},${y(line.lows[i])}`);
      chart.append(svg("polygon", { points: [...upper, ...lower].join(" "), fill: line.color, class: "band" }));
    }
    chart.append(svg("polyline", {
      points: kept.map((i) => `${x(line.xs[i])},${y(line.ys[i])}`).join(" "),
      stroke: line.color, class: "line", "data-series": line.name,
    }));
    for (const i of kept) {
      chart.append(svg("circle", { cx: x(line.xs[i]), cy: y(line.ys[i]), r: 2.5, fill: line.color }));
    }
  }
  for (const series of points) {
    series.xs.forEach((step, i) => {
      chart.append(svg("line", { x1: x(step), x2: x(step), y1: y(series.lows[i]), y2: y(series.highs[i]),
        stroke: series.color, class: "errorbar" }));
      chart.append(svg("rect", { x: x(step) - 4, y: y(series.ys[i]) - 4, width: 8, height: 8,
        fill: series.color, "data-series": series.name }));
    });
  }
  const legend = el("div", { class: "legend" },
    [...lines, ...points].map((s) => el("span", {}, el("i", { style: `background:${s.color}` }), s.name)));
  container.replaceChildren(el("figure", {}, chart, legend));
}
