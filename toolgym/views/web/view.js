// toolgym view: the page over the JSON API under /api (docs/view.md).
// Every text from a run is put on the page with textContent (el() below): nothing is parsed as HTML.
"use strict";

const FOLD = 600; // characters shown before "show all"
const POLL_MS = 1500;
const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");
const statusLine = document.getElementById("status-line");
let renderId = 0;
let watched = null; // {run, version} of the page shown, for live updates
const runInfo = new Map(); // run name → GET /api/runs/{run}, reused while its version is current
const latestVersion = new Map(); // run name → the version the last poll saw

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// An error of the API says which it is: the server did not answer (`unreachable`), or it
// answered with an error status (`status`); any other error is the page's own.
async function api(path) {
  let response;
  try {
    response = await fetch(path, { credentials: "same-origin" });
  } catch (err) {
    throw Object.assign(new Error(err.message), { unreachable: true });
  }
  const data = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw Object.assign(new Error(data.error || `${response.status}`), { status: response.status });
  return data;
}

function problemText(err) {
  if (err.unreachable) return `server unreachable (${err.message})`;
  if (err.status) return `server error ${err.status} (${err.message})`;
  return `page error (${err.message}); reload the page`;
}

const enc = encodeURIComponent;
const num = (v, d = 3) => (v === null || v === undefined ? "" : Number.isInteger(v) ? String(v) : Number(v).toFixed(d));
const json = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 1));

// A long value folded, never dropped: the first FOLD characters and a button that shows the rest.
function fold(value, cls) {
  const text = value === null || value === undefined ? "" : json(value);
  const pre = el("pre", { class: cls || null });
  if (text.length <= FOLD) {
    pre.textContent = text;
    return pre;
  }
  pre.textContent = text.slice(0, FOLD) + "…";
  const button = el("button", {
    class: "more", type: "button",
    text: `show all ${text.length.toLocaleString()} characters`,
    onclick: () => { pre.textContent = text; button.remove(); },
  });
  return el("div", { class: "folded" }, pre, button);
}

// A search snippet: the matched part between \x02 and \x03 becomes a <mark> (built as nodes).
function snippet(text) {
  const span = el("span", {});
  const re = /\x02([\s\S]*?)\x03/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    span.append(text.slice(last, m.index), el("mark", { text: m[1] }));
    last = m.index + m[0].length;
  }
  span.append(text.slice(last));
  return span;
}

// Replace the page's content (nested lists flattened, empty parts skipped).
function show(...nodes) {
  main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
}

function setCrumbs(...items) {
  crumbs.replaceChildren(...items.map(([label, href]) => (href ? el("a", { href, text: label }) : el("span", { text: label }))));
}

function ready(version) {
  if (window.toolgymReadyMs === undefined) window.toolgymReadyMs = performance.now(); // first render, for benchmarks
  document.documentElement.dataset.ready = "1";
  if (version !== undefined) document.documentElement.dataset.version = String(version);
}

// A file path shown by its name (the whole path is in the element's title).
const baseName = (path) => String(path).split(/[\\/]/).pop();
// "scripted:/some/dir/script.json" → "scripted:script.json", as run labels show a model given as a file.
const shortModel = (model) => { const i = String(model).indexOf(":"); return i > 0 && model.includes("/") ? `${model.slice(0, i)}:${baseName(model)}` : model; };

// The page of a trajectory given as RUN/EXAMPLE_ID/TRIAL (the example id may hold slashes).
function refLink(ref) {
  const [run, ...rest] = ref.split("/");
  const trial = rest.pop();
  return `#/t/${enc(run)}/${enc(rest.join("/"))}/${trial}`;
}

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || "") };
}

async function route() {
  const id = ++renderId;
  document.documentElement.dataset.ready = "0";
  watched = null;
  const { parts, params } = parseHash();
  try {
    if (parts.length === 0) await runsPage(id);
    else if (parts[0] === "run" && parts.length === 2) await examplesPage(id, parts[1], params);
    else if (parts[0] === "t" && parts.length >= 4) await trajectoryPage(id, parts[1], parts.slice(2, -1).join("/"), parts[parts.length - 1]);
    else if (parts[0] === "diff") await diffPage(id, params);
    else if (parts[0] === "compare") await comparePage(id, params);
    else show(el("p", { text: "No such page." }));
  } catch (err) {
    if (id === renderId) show(el("p", { class: "error-box", text: `Error: ${err.message}` }));
  }
  if (id === renderId) ready(watched ? watched.version : undefined);
}

// --- runs ------------------------------------------------------------------------------------

function summaryTable(summary) {
  const headers = ["grader", "mean ± stderr", "n", "errors", "unscored", "passed", "measure"];
  const table = el("table", { class: "summary" },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { text: h })))),
    el("tbody", {}, summary.map((row) => el("tr", { dataset: { grader: row.grader } },
      el("td", { text: row.grader }),
      ...headers.slice(1).map((h) => el("td", { class: h === "measure" ? null : "num", text: row.cells[h] }))))));
  // what a grader compares, when its measure says (steps_exact: tool names only)
  const notes = summary.filter((row) => row.compares).map((row) =>
    el("p", { class: "note", text: `${row.grader} compares ${row.compares}.` }));
  return notes.length ? el("div", {}, table, ...notes) : table;
}

function settingsLine(s) {
  const items = [["env", s.env], ["agent", s.agent && s.agent.agent], ["model", s.model], ["trials", s.trials],
    ["dataset", s.dataset && s.dataset.path], ["started", s.started_at], ["finished", s.finished_at]];
  if (s.protocol) items.push(["protocol", json(s.protocol)]);
  return el("div", { class: "settings" }, items.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => el("span", { title: k === "dataset" || k === "model" ? v : null }, `${k}: `,
      el("b", { text: k === "dataset" ? baseName(v) : k === "model" ? shortModel(v) : v }))));
}

async function runsPage(id) {
  setCrumbs(["runs"]);
  const data = await api("/api/runs");
  if (id !== renderId) return;
  const runs = data.runs;
  const names = runs.map((r) => r.name);
  const pick = (idName, sel) => el("select", { id: idName }, names.map((n, i) => el("option", { value: n, text: n, selected: i === sel })));
  const compare = el("form", { class: "filters", id: "compare-form", onsubmit: (e) => {
    e.preventDefault();
    location.hash = `#/compare?a=${enc(document.getElementById("cmp-a").value)}&b=${enc(document.getElementById("cmp-b").value)}`;
  } },
  el("label", {}, "run A", pick("cmp-a", 0)), el("label", {}, "run B", pick("cmp-b", Math.min(1, names.length - 1))),
  el("button", { type: "submit", text: "compare" }));
  show(el("h1", { text: `${runs.length} run${runs.length === 1 ? "" : "s"}` }),
    runs.length > 1 ? compare : null,
    el("div", { id: "runs" }, runs.map((r) => el("section", { class: "run", dataset: { name: r.name } },
      el("h2", {}, el("a", { href: `#/run/${enc(r.name)}`, text: r.name }), " ",
        r.label ? el("span", { class: "settings", text: r.label }) : null, " ",
        r.live ? el("span", { class: "badge live", text: "live" }) : null,
        r.error ? el("span", { class: "badge error", text: "unreadable" }) : null),
      el("div", { class: "settings" }, el("span", { text: r.directory }),
        r.indexing ? el("span", { class: "indexing", text: indexingText(r.indexing) })
          : r.indexed ? el("span", { text: `${r.n_trajectories.toLocaleString()} trajectories` }) : el("span", { text: "indexing…" })),
      r.settings ? settingsLine(r.settings) : null,
      r.error ? el("p", { class: "error-box", text: r.error }) : null,
      r.problem ? el("p", { class: "settings", text: r.problem }) : null,
      r.summary && r.indexing ? el("p", { class: "note summary-partial", text: `summary over the first ${r.n_trajectories.toLocaleString()} trajectories indexed (partial); the whole run's when the index is complete` }) : null,
      r.summary ? summaryTable(r.summary) : null))));
  watched = { run: null, version: runs.map((r) => `${r.name}:${r.version}`).join(",") };
}

// --- indexing --------------------------------------------------------------------------------

// "indexing: 12,200 of 100,000 trajectories so far", from the `indexing` field of the API's answers.
function indexingText(ix) {
  const of = ix.total_lines ? ` of ${ix.total_lines.toLocaleString()}` : "";
  const phase = ix.phase === "dataset" ? " (reading the dataset)" : ix.phase === "summary" ? " (summing up)" : "";
  return `indexing: ${ix.rows.toLocaleString()}${of} trajectories so far${phase}`;
}

// The note on a page answered while the run is still being indexed; the poll keeps its numbers
// current and redraws the page when the index is whole.
function indexingNote(ix) {
  if (!ix) return null;
  return el("p", { id: "indexing", class: "note", role: "status" }, el("span", { id: "indexing-text", text: indexingText(ix) }),
    " · rows, counts, sorts, filters and searches cover the trajectories indexed so far (partial); the page refreshes when the index is complete.");
}

// --- examples --------------------------------------------------------------------------------

function hashWith(run, params) {
  for (const [k, v] of [...params.entries()]) if (v === "") params.delete(k);
  return `#/run/${enc(run)}?${params.toString()}`;
}

function filterForm(run, info, params) {
  const field = (label, node) => el("label", {}, label, node);
  const select = (idName, name, options, value) => el("select", { id: idName, name },
    options.map(([v, t]) => el("option", { value: v, text: t, selected: v === value })));
  const facets = info.facets || {};
  const statusOptions = [["", "any"], ...Object.keys(facets.status || {}).sort().map((s) => [s, `${s} (${facets.status[s]})`])];
  const errorOptions = [["", "any"], ...Object.entries(facets.first_error || {}).sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, `${k} (${n})`])];
  const graders = [["", "any (all graders)"], ...info.graders.filter((g) => info.measures[g].pass_fail).map((g) => [g, g])];
  const form = el("form", { class: "filters", id: "filters" },
    field("search", el("input", { id: "q", name: "q", type: "search", value: params.get("q") || "", placeholder: "text in inputs, turns, calls, results" })),
    field("status", select("status", "status", statusOptions, params.get("status") || "")),
    field("grader", select("grader", "grader", graders, params.get("grader") || "")),
    field("result", select("passed", "passed", [["", "any"], ["1", "passed"], ["0", "failed"], ["none", "unscored"]], params.get("passed") || "")),
    field("first error", select("first-error", "first_error", errorOptions, params.get("first_error") || "")),
    ...Object.entries(info.metadata || {}).map(([key, values]) => field(`metadata ${key}`, values
      ? select(`meta-${key}`, `meta.${key}`, [["", "any"], ...values.map((v) => [v, v])], params.get(`meta.${key}`) || "")
      : el("input", { id: `meta-${key}`, name: `meta.${key}`, value: params.get(`meta.${key}`) || "" }))),
    field("duration ≥ s", el("input", { id: "min-duration", name: "min_duration", type: "number", step: "any", value: params.get("min_duration") || "" })),
    field("duration ≤ s", el("input", { id: "max-duration", name: "max_duration", type: "number", step: "any", value: params.get("max_duration") || "" })),
    field("tokens ≥", el("input", { id: "min-tokens", name: "min_tokens", type: "number", value: params.get("min_tokens") || "" })),
    field("tokens ≤", el("input", { id: "max-tokens", name: "max_tokens", type: "number", value: params.get("max_tokens") || "" })),
    field("per page", select("per-page", "per_page", [["25", "25"], ["50", "50"], ["100", "100"], ["250", "250"]], params.get("per_page") || "50")));
  const apply = () => {
    const next = new URLSearchParams(new FormData(form));
    for (const k of ["sort", "order"]) if (params.get(k)) next.set(k, params.get(k));
    location.hash = hashWith(run, next);
  };
  let timer = null;
  form.addEventListener("change", apply);
  form.addEventListener("submit", (e) => { e.preventDefault(); apply(); });
  form.querySelector("#q").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(apply, 300); });
  return form;
}

async function examplesPage(id, run, params) {
  setCrumbs(["runs", "#/"], [run]);
  const query = new URLSearchParams(params);
  // the run's facets are fetched once per version of the run, in parallel with the rows
  const cached = runInfo.get(run);
  const [info, data] = await Promise.all([
    cached && cached.version === latestVersion.get(run) ? cached : api(`/api/runs/${enc(run)}`),
    api(`/api/runs/${enc(run)}/trajectories?${query.toString()}`),
  ]);
  runInfo.set(run, info);
  if (!latestVersion.has(run)) latestVersion.set(run, info.version);
  if (id !== renderId) return;
  const sort = params.get("sort") || "order";
  const desc = params.get("order") === "desc";
  const header = (label, key) => el("th", {
    class: `sortable${sort === key ? " sorted" : ""}${sort === key && desc ? " desc" : ""}`, dataset: { sort: key }, text: label,
    onclick: () => { const p = new URLSearchParams(params); p.set("sort", key); p.set("order", sort === key && !desc ? "desc" : "asc"); p.delete("page"); location.hash = hashWith(run, p); },
  });
  const graders = info.graders;
  const table = el("table", { id: "rows" },
    el("thead", {}, el("tr", {}, header("example", "example_id"), header("trial", "trial"), header("status", "status"),
      header("steps", "steps"), header("first error", "first_error"), header("duration s", "duration"), header("tokens", "tokens"),
      graders.map((g) => header(g, `score:${g}`)))),
    el("tbody", {}, data.rows.map((r) => {
      const href = `#/t/${enc(run)}/${enc(r.example_id)}/${r.trial}`;
      return el("tr", { class: "row", dataset: { example: r.example_id, trial: r.trial, failed: r.failed ? "1" : "0" }, onclick: () => { location.hash = href; } },
        el("td", {}, el("a", { href, text: r.example_id }), r.match ? el("div", { class: "snippet" }, `${r.match.column}: `, snippet(r.match.snippet)) : null),
        el("td", { class: "num", text: r.trial }),
        el("td", { class: r.status === "completed" ? null : "fail", text: r.status }),
        el("td", { class: "num", text: r.n_expected === null ? r.n_tool_steps : `${r.n_tool_steps}/${r.n_expected}` }),
        el("td", { title: r.first_error ? r.first_error.text : null, text: r.first_error ? `${r.first_error.type}${r.first_error.step ? ` @${r.first_error.step}` : ""}` : "" }),
        el("td", { class: "num", text: num(r.duration_s, 2) }),
        el("td", { class: "num", text: r.tokens || "" }),
        graders.map((g) => { const s = r.scores[g]; return el("td", { class: `num ${s && s.passed === true ? "pass" : s && s.passed === false ? "fail" : ""}`, text: s ? num(s.value) : "" }); }));
    })));
  const go = (page) => { const p = new URLSearchParams(params); p.set("page", String(page)); location.hash = hashWith(run, p); };
  const download = (fmt) => { const p = new URLSearchParams(params); p.delete("page"); p.delete("per_page"); p.set("format", fmt); return `/api/runs/${enc(run)}/trajectories?${p.toString()}`; };
  const pager = el("div", { class: "pager" },
    el("button", { id: "prev", type: "button", text: "← previous", disabled: data.page <= 1, onclick: () => go(data.page - 1) }),
    el("span", { id: "page-info", text: `page ${data.page} of ${data.pages} · ${data.total.toLocaleString()} of ${info.n_trajectories.toLocaleString()} trajectories` }),
    el("button", { id: "next", type: "button", text: "next →", disabled: data.page >= data.pages, onclick: () => go(data.page + 1) }),
    el("a", { id: "download-csv", href: download("csv"), download: `${run}.csv`, text: "download CSV" }),
    el("a", { id: "download-jsonl", href: download("jsonl"), download: `${run}.jsonl`, text: "JSONL" }));
  const focused = document.activeElement && document.activeElement.id === "q";
  show(el("h1", {}, run, " ", info.live ? el("span", { class: "badge live", text: "live" }) : null),
    indexingNote(data.indexing), info.settings ? settingsLine(info.settings) : null, filterForm(run, info, params), pager, table);
  if (focused) { const q = document.getElementById("q"); q.focus(); q.setSelectionRange(q.value.length, q.value.length); }
  watched = { run, version: info.version };
}

// --- one trajectory --------------------------------------------------------------------------

function patchView(patch) {
  if (patch === null || patch === undefined) return el("div", { class: "meta", text: "state change not recorded" });
  if (patch.length === 0) return el("div", { class: "meta patch", text: "state unchanged" });
  return el("div", { class: "patch" }, el("div", { class: "meta", text: "state change" }),
    patch.map((op) => el("div", {}, `${op.op} ${op.path}`, op.from !== undefined ? ` from ${op.from}` : "", op.value !== undefined ? " = " : "", op.value !== undefined ? fold(op.value) : null)));
}

function modelStep(step, n) {
  const tokens = [step.input_tokens !== null ? `${step.input_tokens} in` : null, step.output_tokens !== null ? `${step.output_tokens} out` : null,
    step.reasoning_tokens ? `${step.reasoning_tokens} reasoning` : null].filter(Boolean).join(" · ");
  return el("div", { class: "step model", dataset: { index: step.index } },
    el("div", { class: "meta", text: `model turn ${n} · ${num(step.latency_s, 2)} s${tokens ? ` · ${tokens} tokens` : ""}` }),
    step.reasoning ? el("details", { class: "reasoning" }, el("summary", { text: `reasoning (${step.reasoning.length.toLocaleString()} characters)` }), fold(step.reasoning)) : null,
    step.text ? fold(step.text) : null,
    step.tool_calls.filter((c) => c.malformed).map((c) => el("div", { class: "label-error" }, `malformed call ${c.name}: ${c.malformed}`, c.raw ? fold(c.raw) : null)),
    step.tool_calls.length ? el("div", { class: "meta", text: `${step.tool_calls.length} tool call${step.tool_calls.length === 1 ? "" : "s"}` }) : null);
}

function toolStep(step, firstErrorStep) {
  const label = step.label || {};
  const isFirst = firstErrorStep !== null && firstErrorStep === step.tool_index + 1;
  return el("div", { class: `step tool${step.error ? " error" : ""}${isFirst ? " first-error" : ""}`, dataset: { index: step.index, tool: step.tool_index } },
    el("div", { class: "meta" }, `tool step ${step.tool_index + 1} · `, el("b", { text: step.name }),
      step.milestone ? el("span", { class: "milestone", text: ` milestone ${step.milestone}` }) : null,
      label.type ? el("span", { class: "label-error", text: ` ${label.type}${label.note ? `: ${label.note}` : ""}` }) : null,
      isFirst ? el("span", { class: "label-error", text: " first error" }) : null,
      step.error ? el("span", { class: "fail", text: " error" }) : null,
      step.rejected ? el("span", { class: "fail", text: " rejected" }) : null),
    el("div", { class: "meta", text: "arguments" }), fold(step.arguments, "arguments"),
    el("div", { class: "meta", text: "result" }), fold(step.output, "output"),
    patchView(step.state_patch),
    (step.milestones_met || []).map((m) => el("div", { class: "milestone state-met", text: `✓ ${m.kind} milestone ${m.id} met` })),
    step.state_after !== undefined ? el("details", {}, el("summary", { text: "state after" }), fold(step.state_after)) : null);
}

function userStep(step) {
  const sim = step.latency_s !== null && step.latency_s !== undefined;
  const tokens = [step.input_tokens !== null && step.input_tokens !== undefined ? `${step.input_tokens} in` : null,
    step.output_tokens !== null && step.output_tokens !== undefined ? `${step.output_tokens} out` : null].filter(Boolean).join(" · ");
  const what = step.stop ? `user stops${step.text ? ` · last message, turn ${step.turn}` : ""}` : `user · turn ${step.turn}`;
  return el("div", { class: `step user${step.stop ? " stop" : ""}`, dataset: { index: step.index, turn: step.turn } },
    el("div", { class: "meta", text: `${what}${sim ? ` · simulated user · ${num(step.latency_s, 2)} s${tokens ? ` · ${tokens} tokens` : ""}` : ""}` }),
    step.text ? fold(step.text) : el("div", { class: "meta", text: "(ends the conversation)" }));
}

function stepsView(detail) {
  const fe = detail.first_error;
  let turn = 0;
  return detail.trajectory.steps.map((s) => (s.kind === "user" ? userStep(s) : s.kind === "model" ? modelStep(s, ++turn) : toolStep(s, fe ? fe.step : null)));
}

function trajectoryHead(detail) {
  const t = detail.trajectory, row = detail.row || {};
  return [
    el("div", { class: "settings" },
      el("span", {}, "status: ", el("b", { class: t.status === "completed" ? null : "fail", text: t.status })),
      el("span", { text: `duration ${num(t.duration_s, 2)} s` }),
      row.tokens ? el("span", { text: `tokens ${row.input_tokens} in · ${row.output_tokens} out` }) : null,
      t.model ? el("span", { title: t.model, text: `model ${shortModel(t.model)}` }) : null,
      t.parent ? el("span", { id: "parent" }, "fork of ", detail.parent_ref
        ? el("a", { href: refLink(detail.parent_ref), text: detail.parent_ref })
        : `${t.parent.run} · ${t.parent.example_id} · trial ${t.parent.trial} (not served here)`, ` at step ${t.parent.step}`) : null),
    t.error ? el("p", { class: "error-box", text: t.error }) : null,
    detail.first_error ? el("div", { class: "firsterror", id: "first-error-box" }, el("b", { text: `first error: ${detail.first_error.type}` }),
      detail.first_error.step ? ` at tool step ${detail.first_error.step}` : "", " — ", detail.first_error.text || "") : null,
    el("table", { class: "scores" }, el("tbody", {}, detail.scores.map((s) => el("tr", {},
      el("td", { text: s.grader }), el("td", { class: `num ${s.passed === true ? "pass" : s.passed === false ? "fail" : ""}`, text: s.value === null ? "unscored" : num(s.value) }),
      el("td", { text: s.explanation })))))];
}

async function trajectoryPage(id, run, exampleId, trial) {
  setCrumbs(["runs", "#/"], [run, `#/run/${enc(run)}`], [`${exampleId} · trial ${trial}`]);
  const detail = await api(`/api/runs/${enc(run)}/trajectories/${enc(exampleId)}/${enc(trial)}`);
  if (id !== renderId) return;
  const t = detail.trajectory, ex = detail.example;
  const others = detail.same_example_in || [];  // only the runs that hold this example and trial
  const diffForm = others.length ? el("form", { class: "filters", id: "diff-form", onsubmit: (e) => {
    e.preventDefault();
    const b = document.getElementById("diff-run").value;
    location.hash = `#/diff?a=${enc(`${run}/${exampleId}/${trial}`)}&b=${enc(`${b}/${exampleId}/${trial}`)}`;
  } }, el("label", {}, "side by side with the same example in", el("select", { id: "diff-run" }, others.map((n) => el("option", { value: n, text: n })))),
  el("button", { type: "submit", text: "diff" })) : null;
  const parentLink = detail.parent_ref ? el("a", { id: "diff-parent", href: `#/diff?a=${enc(detail.parent_ref)}&b=${enc(`${run}/${exampleId}/${trial}`)}`, text: "side by side with its parent" }) : null;
  show(el("h1", { text: `${exampleId} · trial ${trial}` }), ...trajectoryHead(detail), diffForm, parentLink,
    ex ? el("h2", { text: "input" }) : null, ex ? fold(ex.input) : null,
    ex && ex.expected_calls ? el("details", {}, el("summary", { text: `expected calls (${ex.expected_calls.length})` }), fold(ex.expected_calls)) : null,
    ex && ex.milestones ? el("details", {}, el("summary", { text: `milestones (${ex.milestones.length})` }), fold(ex.milestones)) : null,
    t.initial_state ? el("details", {}, el("summary", { text: "initial state" }), fold(t.initial_state)) : null,
    el("h2", { text: `steps (${t.steps.length})` }), el("div", { id: "steps" }, stepsView(detail)),
    t.state_note ? el("p", { class: "meta", text: t.state_note }) : null,
    el("h2", { text: "final answer" }), fold(t.final_answer || ""),
    el("details", {}, el("summary", { text: "final state" }), fold(t.final_state)));
}

// --- side by side ----------------------------------------------------------------------------

async function diffPage(id, params) {
  const a = params.get("a"), b = params.get("b");
  setCrumbs(["runs", "#/"], ["side by side"]);
  const data = await api(`/api/diff?a=${enc(a)}&b=${enc(b)}`);
  if (id !== renderId) return;
  const toolsA = data.a.trajectory.steps.filter((s) => s.kind === "tool");
  const toolsB = data.b.trajectory.steps.filter((s) => s.kind === "tool");
  const cell = (step, cls, fe) => (step ? el("div", { class: `cell ${cls}` }, toolStep(step, fe)) : el("div", { class: "cell empty" }));
  const feA = data.a.first_error ? data.a.first_error.step : null, feB = data.b.first_error ? data.b.first_error.step : null;
  const counts = data.pairs.reduce((acc, p) => { acc[p.status] = (acc[p.status] || 0) + 1; return acc; }, {});
  show(el("h1", { text: "side by side" }),
    el("p", { class: "settings", id: "diff-summary", text: `aligned by ${data.method}: ${Object.entries(counts).map(([k, n]) => `${n} ${k.replace("_", " ")}`).join(", ") || "no tool steps"}` }),
    el("div", { class: "diff", id: "diff" },
      el("div", { class: "side-head" }, el("a", { href: refLink(a), text: `A: ${a}` })), el("div", { class: "side-head" }, el("a", { href: refLink(b), text: `B: ${b}` })),
      el("div", {}, ...trajectoryHead(data.a)), el("div", {}, ...trajectoryHead(data.b)),
      data.pairs.map((p) => {
        const cls = p.status === "same" ? "same" : p.status === "different" ? "different" : "only";
        return [el("div", { class: `pair-status pair ${p.status}`, dataset: { status: p.status } },
          `${p.status.replace("_", " ")}${p.milestone ? ` · milestone ${p.milestone}` : ""}${p.differences.length ? ` · differs in ${p.differences.join(", ")}` : ""}`),
        cell(p.a === null ? null : toolsA[p.a], cls, feA), cell(p.b === null ? null : toolsB[p.b], cls, feB)];
      }),
      el("div", {}, el("h2", { text: "final answer A" }), fold(data.a.trajectory.final_answer || "")),
      el("div", {}, el("h2", { text: "final answer B" }), fold(data.b.trajectory.final_answer || ""))));
}

// --- two runs --------------------------------------------------------------------------------

async function comparePage(id, params) {
  const a = params.get("a"), b = params.get("b");
  setCrumbs(["runs", "#/"], [`compare ${a} · ${b}`]);
  const q = new URLSearchParams({ a, b });
  if (params.get("grader")) q.set("grader", params.get("grader"));
  const data = await api(`/api/compare?${q.toString()}`);
  if (id !== renderId) return;
  const t = data.test;
  const testLine = !t ? "" : t.error ? t.error
    : `A ${num(t.mean_a)} · B ${num(t.mean_b)} · B − A ${num(t.diff)} · ${t.method} p = ${num(t.p_value, 4)}${t.method.startsWith("mcnemar") ? ` (A only ${t.b}, B only ${t.c})` : ` (95% interval ${num(t.low)} to ${num(t.high)})`} · ${t.n_paired} paired examples`;
  const titles = { both_pass: "both pass", only_a: `only A passes (${a})`, only_b: `only B passes (${b})`, both_fail: "both fail" };
  show(el("h1", { text: `${a} vs ${b}` }),
    el("form", { class: "filters" }, el("label", {}, "grader", el("select", { id: "cmp-grader", onchange: (e) => { location.hash = `#/compare?a=${enc(a)}&b=${enc(b)}&grader=${enc(e.target.value)}`; } },
      data.graders.map((g) => el("option", { value: g, text: g, selected: g === data.grader }))))),
    el("p", { id: "paired-test", text: testLine }),
    el("div", { class: "groups" }, Object.entries(titles).map(([key, title]) => el("section", { class: "group", dataset: { group: key } },
      el("h2", { text: `${title}: ${data.counts[key]}` }),
      el("ul", {}, data.examples[key].map((eid) => el("li", {}, el("a", { href: `#/diff?a=${enc(`${a}/${eid}/0`)}&b=${enc(`${b}/${eid}/0`)}`, text: eid })))),
      data.counts[key] > data.examples[key].length ? el("p", { class: "meta", text: `first ${data.examples[key].length} shown` }) : null))),
    data.counts.unpaired ? el("p", { class: "meta", text: `${data.counts.unpaired} examples not scored in both runs` }) : null);
}

// --- live updates ----------------------------------------------------------------------------

async function poll() {
  try {
    if (watched && document.documentElement.dataset.ready === "1") {
      const data = await api("/api/runs");
      for (const r of data.runs) latestVersion.set(r.name, r.version);
      const version = watched.run === null ? data.runs.map((r) => `${r.name}:${r.version}`).join(",")
        : (data.runs.find((r) => r.name === watched.run) || {}).version;
      const live = data.runs.filter((r) => r.live).length;
      statusLine.textContent = live ? `${live} run${live === 1 ? "" : "s"} being written · updating live` : "";
      const shown = watched.run === null ? null : data.runs.find((r) => r.name === watched.run);
      const note = document.getElementById("indexing-text");
      if (note && shown && shown.indexing) note.textContent = indexingText(shown.indexing);
      if (version !== undefined && version !== watched.version) await route();
      else if (note && shown && !shown.indexing) await route(); // the index became whole
    }
  } catch (err) {
    statusLine.textContent = problemText(err);
    if (!err.unreachable && !err.status) console.error(err);
  }
  setTimeout(poll, POLL_MS);
}

window.addEventListener("hashchange", route);
route();
setTimeout(poll, POLL_MS);
