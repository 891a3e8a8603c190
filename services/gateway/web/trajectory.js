// One trajectory: the verdict and the reward's parts, each turn (a policy turn's tool calls
// side by side, as the environment ran them in parallel), the environment's answers, and
// the diff the episode left.
"use strict";

const PARTS = location.pathname.split("/").filter(Boolean);  // ui, runs, <id>, trajectory
const RUN = decodeURIComponent(PARTS[2]);
const QUERY = new URLSearchParams(location.search);

function verdict(r) {
  const tests = Object.entries(r.fail_to_pass).map(([test, passed]) =>
    el("li", { class: passed ? "pass" : "fail" }, `${passed ? "✓" : "✗"} ${test}`));
  const broken = r.pass_to_pass_broken.map((test) => el("li", { class: "fail" }, `✗ ${test}`));
  const parts = Object.entries(r.reward_components).map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, fmt(v))));
  return [
    el("table", { id: "reward" },
      el("tr", {}, el("th", {}, "reward"), el("td", {}, fmt(r.reward))), parts,
      el("tr", {}, el("th", {}, "finish"), el("td", {}, r.finish_reason)),
      el("tr", {}, el("th", {}, "turns"), el("td", {}, r.turns)),
      el("tr", {}, el("th", {}, "policy versions"), el("td", {}, `${r.policy_versions[0]}–${r.policy_versions[1]}`)),
      r.grading_error ? el("tr", {}, el("th", {}, "not graded"), el("td", { class: "error" }, r.grading_error)) : null),
    el("h2", {}, "Hidden tests"),
    el("ul", { id: "tests" }, tests,
      el("li", { class: "muted" }, `PASS_TO_PASS: ${r.pass_to_pass_count - broken.length} of ${r.pass_to_pass_count} still pass`),
      broken),
  ];
}

function turn(message, index) {
  if (message.role !== "policy") {
    const title = message.role === "prompt" ? "prompt" : "environment";
    return el("div", { class: `turn ${message.role}` }, el("h3", {}, title), el("pre", {}, message.text));
  }
  const calls = message.tool_calls.map((call) => el("div", { class: "call" },
    el("b", {}, call.name),
    Object.entries(call.arguments).map(([k, v]) => el("pre", {}, `${k} = ${v}`))));
  const errors = message.parse_errors.map((e) => el("p", { class: "error" }, e));
  return el("div", { class: "turn policy", "data-turn": index },
    el("h3", {}, `policy — ${message.tool_calls.length} call${message.tool_calls.length === 1 ? "" : "s"}`),
    el("pre", {}, message.text),
    calls.length ? el("div", { class: "batch" }, calls) : null, errors);
}

function diff(text) {
  if (!text) return el("p", { class: "muted" }, "No change to the repository.");
  const lines = text.split("\n").map((line) => {
    const kind = line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del"
      : line.startsWith("@@") ? "hunk" : "";
    return el("span", kind ? { class: kind } : {}, line + "\n");
  });
  return el("pre", { class: "diff", id: "diff-text" }, lines);
}

layout(RUN, [["verdict"], ["turns", "Turns"], ["diff", "Diff"]]);

(async function show() {
  const back = el("a", { href: `/ui/runs/${encodeURIComponent(RUN)}` }, RUN);
  document.getElementById("title").replaceChildren(back);
  let records;
  try {
    records = await api(`/runs/${encodeURIComponent(RUN)}/trajectories?step=${encodeURIComponent(QUERY.get("step"))}&limit=1000`);
  } catch (error) {
    showError(document.getElementById("verdict"), error);
    return;
  }
  const record = records.find((r) => r.group_id === QUERY.get("group") && String(r.sample_index) === QUERY.get("sample"));
  if (!record) {
    document.getElementById("verdict").replaceChildren(el("p", { class: "error" }, "No such trajectory in this run."));
    return;
  }
  document.getElementById("title").append(` · step ${record.step} · ${record.task_id} · sample ${record.sample_index}`);
  document.getElementById("verdict").replaceChildren(...verdict(record));
  document.getElementById("turns").replaceChildren(...record.messages.map(turn));
  document.getElementById("diff").replaceChildren(diff(record.diff));
})();
