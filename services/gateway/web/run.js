// A run's page: its record, the curves of its steps (updated while it runs) and its kept
// trajectories (the worst first, or as the filters above the table choose).
"use strict";

const RUN_ID = decodeURIComponent(location.pathname.split("/").filter(Boolean).pop());
const Z = 1.96;

function wilson(rate, n) {
  if (!n) return [rate, rate];
  const denominator = 1 + (Z * Z) / n;
  const centre = (rate + (Z * Z) / (2 * n)) / denominator;
  const spread = (Z * Math.sqrt((rate * (1 - rate)) / n + (Z * Z) / (4 * n * n))) / denominator;
  return [Math.max(0, centre - spread), Math.min(1, centre + spread)];
}

function column(records, key) {
  return records.map((r) => (r[key] === undefined ? null : r[key]));
}

function heldOut(evaluations, lastStep) {
  const byTier = {};
  for (const e of evaluations) {
    const [label, tier] = e.phase.split("/");
    (byTier[tier] ||= []).push({ step: label === "eval_after" ? lastStep : 0, ...e });
  }
  const colours = ["#2ca02c", "#d62728", "#9467bd", "#8c564b"];
  return Object.entries(byTier).map(([tier, points], i) => ({
    name: `held-out pass@1, ${tier}`, color: colours[i % colours.length],
    xs: points.map((p) => p.step), ys: points.map((p) => p.pass_at_1),
    lows: points.map((p) => p.ci_low), highs: points.map((p) => p.ci_high),
  }));
}

function drawCharts(metrics) {
  const rl = metrics.rl;
  const steps = column(rl, "step");
  const lastStep = Math.max(0, ...steps);
  const charts = document.getElementById("charts");
  const boxes = [];
  const box = () => { const div = el("div"); boxes.push(div); return div; };
  const mean = column(rl, "reward_mean"), std = rl.map((r) => r.reward_std ?? 0);
  lineChart(box(), { title: "Training reward (mean ± std over the step's rollouts)", lines: [
    { name: "mean reward", color: "#1f77b4", xs: steps, ys: mean,
      lows: mean.map((m, i) => m - std[i]), highs: mean.map((m, i) => m + std[i]) }] });
  const rate = column(rl, "pass_rate");
  const intervals = rl.map((r) => wilson(r.pass_rate, r.sequences || 0));
  lineChart(box(), { title: "Pass rate (95% interval) and held-out pass@1", yMin: 0, yMax: 1,
    lines: [{ name: "pass rate", color: "#ff7f0e", xs: steps, ys: rate,
      lows: intervals.map((i) => i[0]), highs: intervals.map((i) => i[1]) }],
    points: heldOut(metrics.eval, lastStep) });
  lineChart(box(), { title: "Behaviour", lines: [
    { name: "tool calls per turn", color: "#1f77b4", xs: steps, ys: column(rl, "tool_calls_per_turn") },
    { name: "parallel share", color: "#2ca02c", xs: steps, ys: column(rl, "parallel_share") },
    { name: "reads before first edit", color: "#9467bd", xs: steps, ys: column(rl, "reads_before_first_edit") }] });
  lineChart(box(), { title: "Staleness (policy versions behind)", lines: [
    { name: "mean", color: "#8c564b", xs: steps, ys: column(rl, "staleness_mean") },
    { name: "max", color: "#e377c2", xs: steps, ys: column(rl, "staleness_max") }] });
  lineChart(box(), { title: "Throughput (trained tokens per second)", lines: [
    { name: "tokens/s", color: "#17becf", xs: steps, ys: column(rl, "tokens_per_second") }] });
  charts.replaceChildren(...boxes);
}

function drawSummary(run) {
  document.title = `Étude — ${run.run_id}`;
  const rows = [
    ["status", el("span", { class: `status-${run.status}`, id: "run-status" }, run.status)],
    ["step", el("span", { id: "run-step" }, `${run.step} / ${run.config.trainer?.steps ?? "?"}`)],
    ["policy version", run.policy_version],
    ["task set", run.config.tasks?.taskset ?? ""],
    ["reward (latest)", fmt(run.metrics.reward_mean)],
    ["pass rate (latest)", fmt(run.metrics.pass_rate)],
    ["output", run.output_dir || "—"],
  ];
  if (run.error) rows.push(["error", el("span", { class: "error" }, run.error)]);
  document.getElementById("summary").replaceChildren(el("table", {},
    rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))));
}

function drawTrajectories(records) {
  const where = document.getElementById("trajectories");
  if (!records.length) {
    where.replaceChildren(el("p", { class: "muted" }, "None kept yet."));
    return;
  }
  where.replaceChildren(el("table", {},
    el("tr", {}, ["step", "task", "sample", "reward", "finish", "turns", "FAIL_TO_PASS"].map((h) => el("th", {}, h))),
    records.map((r) => {
      const href = `/ui/runs/${encodeURIComponent(RUN_ID)}/trajectory?step=${r.step}`
        + `&group=${encodeURIComponent(r.group_id)}&sample=${r.sample_index}`;
      const tests = Object.values(r.fail_to_pass);
      return el("tr", {},
        el("td", {}, r.step), el("td", {}, el("a", { href, class: "trajectory-link" }, r.task_id)),
        el("td", {}, r.sample_index), el("td", {}, fmt(r.reward)), el("td", {}, r.finish_reason),
        el("td", {}, r.turns), el("td", {}, `${tests.filter(Boolean).length}/${tests.length}`));
    })));
}

// Which trajectories the table lists; kept in the page's query string, so a link or a
// reload shows the same ones.
const FILTER_DEFAULTS = { order: "worst", step: "", task: "", limit: "10" };

function filters() {
  const query = new URLSearchParams(location.search);
  return Object.fromEntries(
    Object.entries(FILTER_DEFAULTS).map(([name, value]) => [name, query.get(name) ?? value]));
}

function trajectoriesPath() {
  const chosen = Object.entries(filters()).filter(([, value]) => value !== "");
  return `/runs/${encodeURIComponent(RUN_ID)}/trajectories?${new URLSearchParams(chosen)}`;
}

function drawFilters() {
  const now = filters();
  const select = (name, options) => el("select", { name },
    options.map(([value, text]) => el("option", value === now[name] ? { value, selected: "" } : { value }, text)));
  const form = el("form", { id: "trajectory-filters" },
    el("label", {}, "order ", select("order",
      [["worst", "lowest reward first"], ["best", "highest reward first"], ["", "by step"]])),
    el("label", {}, " step ", el("input", { name: "step", type: "number", min: "0", placeholder: "all", value: now.step })),
    el("label", {}, " task ", el("input", { name: "task", placeholder: "all", value: now.task })),
    el("label", {}, " show ", select("limit", ["10", "50", "200", "1000"].map((n) => [n, n]))));
  form.addEventListener("submit", (event) => event.preventDefault());
  form.addEventListener("change", async () => {
    const chosen = [...new FormData(form)].filter(([name, value]) => value !== FILTER_DEFAULTS[name]);
    history.replaceState(null, "", `${location.pathname}?${new URLSearchParams(chosen)}`);
    drawTrajectories(await api(trajectoriesPath()).catch(() => []));
  });
  document.getElementById("filters").replaceChildren(form);
}

async function refresh() {
  try {
    const [run, metrics, trajectories] = await Promise.all([
      api(`/runs/${encodeURIComponent(RUN_ID)}`),
      api(`/runs/${encodeURIComponent(RUN_ID)}/metrics`),
      api(trajectoriesPath()).catch(() => []),
    ]);
    drawSummary(run);
    drawCharts(metrics);
    drawTrajectories(trajectories);
    return run.status;
  } catch (error) {
    showError(document.getElementById("summary"), error);
    return "error";
  }
}

layout(RUN_ID, [["summary"], ["charts", "Training"], ["filters", "Trajectories"],
  ["trajectories"]]);
document.getElementById("charts").className = "charts";
drawFilters();

(async function live() {
  const status = await refresh();
  // Live while the run can still change; a finished page stays as it is.
  if (!["finished", "failed", "stopped", "error"].includes(status)) setTimeout(live, 2000);
})();
