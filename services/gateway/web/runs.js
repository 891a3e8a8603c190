// The runs list: newest first, refreshed every few seconds.
"use strict";

async function showRuns() {
  const where = document.getElementById("runs");
  let runs;
  try {
    runs = await api("/runs?limit=200");
  } catch (error) {
    showError(where, error);
    return;
  }
  if (!runs.length) {
    where.replaceChildren(el("p", { class: "muted" }, "No runs yet: etude runs start CONFIG, or etude train CONFIG."));
    return;
  }
  const rows = runs.map((run) => el("tr", {},
    el("td", {}, el("a", { href: `/ui/runs/${encodeURIComponent(run.run_id)}` }, run.run_id)),
    el("td", { class: `status-${run.status}` }, run.status),
    el("td", {}, `${run.step} / ${run.config.trainer?.steps ?? "?"}`),
    el("td", {}, fmt(run.metrics.reward_mean)),
    el("td", {}, fmt(run.metrics.pass_rate)),
    el("td", {}, run.config.tasks?.taskset ?? ""),
    el("td", {}, whenIso(run.created_ms)),
    el("td", { class: "error" }, run.error || "")));
  where.replaceChildren(el("table", { id: "runs-table" },
    el("tr", {}, ["run", "status", "step", "reward", "pass rate", "task set", "created", "error"]
      .map((h) => el("th", {}, h))),
    rows));
}

layout("runs", [["runs"]]);
showRuns();
setInterval(showRuns, 5000);
