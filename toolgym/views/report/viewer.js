/* toolgym report viewer: pages through the trajectories and renders a trace when it is opened.
 * All data comes from the JSON in #toolgym-index and #toolgym-traces and reaches the page only
 * through textContent (never innerHTML), so model and tool text is always shown as text. */
(function () {
  "use strict";

  var index = JSON.parse(document.getElementById("toolgym-index").textContent);
  var tracesDoc = null;
  var items = index.items;
  var graders = index.graders;
  var rules = index.rules;
  var runs = index.runs;
  var state = { run: "", status: "", failedOnly: false, failedBy: "", search: "", page: 0, pageSize: 100 };
  var shown = [];

  function traces() {
    // parsed on first use: the first paint needs only the small index
    if (tracesDoc === null) {
      tracesDoc = JSON.parse(document.getElementById("toolgym-traces").textContent);
    }
    return tracesDoc;
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function add(parent, child) { parent.appendChild(child); return child; }

  function fmt(v) {
    if (v === null || v === undefined) { return "unscored"; }
    return Number.isInteger(v) ? String(v) : v.toFixed(3);
  }

  function json(v) { return JSON.stringify(v); }

  function callText(name, args) {
    if (args === undefined || args === null || (typeof args === "object" && Object.keys(args).length === 0)) {
      return name + "()";
    }
    return name + "(" + (typeof args === "string" ? args : json(args)) + ")";
  }

  function expectedText(c) {
    return typeof c === "string" ? c : callText(c[0], c[1]);
  }

  function isFailed(item) {
    // pass and fail were decided by each grader's pass rule when the report was written
    if (state.failedBy === "") { return item[6] === 1; }
    if (item[3] !== "completed") { return true; }
    return item[9][state.failedBy] === 0;
  }

  function passClass(passed) {
    return passed === 1 ? "pass" : passed === 0 ? "fail" : "";
  }

  function filter() {
    var needle = state.search.toLowerCase();
    shown = [];
    for (var i = 0; i < items.length; i++) {
      var it = items[i];
      if (state.run !== "" && String(it[0]) !== state.run) { continue; }
      if (state.status !== "" && it[3] !== state.status) { continue; }
      if (state.failedOnly && !isFailed(it)) { continue; }
      if (needle && String(it[1]).toLowerCase().indexOf(needle) < 0) { continue; }
      shown.push(i);
    }
  }

  function option(select, value, text) {
    var o = add(select, el("option", null, text));
    o.value = value;
    return o;
  }

  function labelled(parent, text, control) {
    var l = add(parent, el("label"));
    add(l, el("span", null, text));
    l.appendChild(control);
    return control;
  }

  function buildControls() {
    var box = document.getElementById("controls");
    var run = labelled(box, "run", el("select"));
    run.id = "filter-run";
    option(run, "", "all runs (" + runs.length + ")");
    runs.forEach(function (r, i) { option(run, String(i), r.label + " · " + r.env); });
    run.addEventListener("change", function () { state.run = run.value; refresh(); });

    var status = labelled(box, "status", el("select"));
    status.id = "filter-status";
    ["", "completed", "step_limit", "repeat_limit", "abandoned", "error", "aborted"].forEach(function (s) { option(status, s, s || "any"); });
    status.addEventListener("change", function () { state.status = status.value; refresh(); });

    var failed = el("input");
    failed.type = "checkbox";
    failed.id = "failed-only";
    labelled(box, "failures only", failed);
    failed.addEventListener("change", function () { state.failedOnly = failed.checked; refresh(); });

    var by = labelled(box, "failed by", el("select"));
    by.id = "failed-by";
    option(by, "", "any grader with a pass rule");
    graders.forEach(function (g, i) {
      if (rules[i] !== null) { option(by, String(i), g + " not " + rules[i]); }
    });
    by.addEventListener("change", function () { state.failedBy = by.value; refresh(); });

    var search = el("input");
    search.type = "search";
    search.id = "filter-id";
    search.placeholder = "example id contains…";
    labelled(box, "example", search);
    search.addEventListener("input", function () { state.search = search.value; refresh(); });

    var size = labelled(box, "per page", el("select"));
    [25, 100, 500].forEach(function (n) { option(size, String(n), String(n)); });
    size.value = String(state.pageSize);
    size.addEventListener("change", function () { state.pageSize = Number(size.value); state.page = 0; render(); });

    var head = document.querySelector("#examples-table thead");
    var tr = add(head, el("tr"));
    ["", "run", "env", "example", "trial", "status", "calls / expected", "diverges at", "first error", "duration s", "tokens"].forEach(function (h) {
      add(tr, el("th", null, h));
    });
    graders.forEach(function (g) { add(tr, el("th", "num", g)); });
  }

  function refresh() { state.page = 0; filter(); render(); }

  function renderPager() {
    var pager = document.getElementById("pager");
    pager.textContent = "";
    var pages = Math.max(1, Math.ceil(shown.length / state.pageSize));
    var prev = add(pager, el("button", null, "‹ previous"));
    prev.id = "page-prev";
    prev.disabled = state.page === 0;
    prev.addEventListener("click", function () { state.page -= 1; render(); });
    var info = add(pager, el("span", null,
      "page " + (state.page + 1) + " of " + pages + " · " + shown.length + " of " + items.length + " trajectories"));
    info.id = "page-info";
    var next = add(pager, el("button", null, "next ›"));
    next.id = "page-next";
    next.disabled = state.page + 1 >= pages;
    next.addEventListener("click", function () { state.page += 1; render(); });
  }

  function render() {
    renderPager();
    var body = document.querySelector("#examples-table tbody");
    body.textContent = "";
    var start = state.page * state.pageSize;
    var end = Math.min(shown.length, start + state.pageSize);
    for (var k = start; k < end; k++) { body.appendChild(itemRow(shown[k])); }
  }

  function itemRow(i) {
    var it = items[i];
    var run = runs[it[0]];
    var failed = isFailed(it);
    var tr = el("tr", "item" + (failed ? " failed" : ""));
    tr.dataset.index = String(i);
    tr.dataset.failed = failed ? "1" : "0";
    var button = add(add(tr, el("td")), el("button", "toggle", "▸"));
    button.setAttribute("aria-label", "show trace");
    add(tr, el("td", null, run.label));
    add(tr, el("td", null, run.env));
    add(tr, el("td", "mono example-id", it[1]));
    add(tr, el("td", "num", it[2]));
    add(tr, el("td", "status status-" + it[3], it[3]));
    add(tr, el("td", "num", it[4] + " / " + (it[5] === null ? "?" : it[5])));
    add(tr, el("td", "num", it[7] === null ? "" : "call " + (it[7] + 1)));
    var fe = add(tr, el("td", null, it[10] ? it[10][0] + (it[10][1] ? " @" + it[10][1] : "") : ""));
    if (it[10]) { fe.title = it[10][2]; }
    add(tr, el("td", "num", it[11] === null ? "" : it[11].toFixed(2)));
    add(tr, el("td", "num", it[12] ? String(it[12]) : ""));
    graders.forEach(function (g, gi) {
      var v = it[8][String(gi)];
      var cls = v === undefined ? "num" : v === null ? "num unscored" : ("num " + passClass(it[9][String(gi)])).trim();
      add(tr, el("td", cls, v === undefined ? "" : fmt(v)));
    });
    tr.addEventListener("click", function () { toggle(tr, i, button); });
    return tr;
  }

  function toggle(tr, i, button) {
    var next = tr.nextSibling;
    if (next && next.classList && next.classList.contains("detail")) {
      next.parentNode.removeChild(next);
      button.textContent = "▸";
      return;
    }
    var detail = el("tr", "detail");
    var td = add(detail, el("td"));
    td.colSpan = 11 + graders.length;
    td.appendChild(traceView(i));
    tr.parentNode.insertBefore(detail, tr.nextSibling);
    button.textContent = "▾";
  }

  function field(parent, key, value) {
    var s = add(parent, el("span"));
    add(s, el("span", "k", key + ": "));
    add(s, el("span", null, value));
    return s;
  }

  function alignmentLine(a, firstError, step) {
    // one tool step's place in trajectory_match's alignment: its milestone, or why it matched none
    if (!a.ty && a.m) { return el("div", "align matched", a.ok && a.n ? "✓ " + a.n : "✓ milestone " + a.m); }
    // the first error's text starts "step N (tool): ..." or "turn K, step N (tool): ..."
    var isFirst = firstError !== null && firstError !== undefined &&
      new RegExp("^(turn \\d+, )?step " + step + "[ :]").test(firstError);
    var bad = a.er === 1 || isFirst;
    var text = (bad ? "✗ " : "· ") + String(a.ty || "unmatched").replace(/_/g, " ");
    if (a.m) { text += " (" + a.m + (a.arg ? ", argument " + a.arg : "") + ")"; }
    if (a.n) { text += ": " + a.n; }
    if (a.ok) { text += " [allowed by extra_calls: " + a.ok + "]"; }
    if (a.x !== undefined && ["wrong_arguments", "wrong_tool", "forbidden", "out_of_order"].indexOf(a.ty) >= 0) {
      text += "; expected " + json(a.x);
    }
    var div = el("div", "align " + (bad ? "error" : "extra"), text);
    div.dataset.type = a.ty || "";
    return div;
  }

  function stateChangeText(c) {
    // [op, path, before, after, has_before, has_after]; move and copy: [op, path, from, after, 1, 1]
    var path = c[1] || "(whole state)";
    if (c[0] === "move" || c[0] === "copy") { return "state " + path + " ← " + c[2] + ": " + json(c[3]); }
    if (c[4] && c[5]) { return "state " + path + ": " + json(c[2]) + " → " + json(c[3]); }
    if (c[5]) { return "state " + path + ": + " + json(c[3]); }
    return "state " + path + ": − " + json(c[2]);
  }

  function traceView(i) {
    var doc = traces();
    var t = doc.traces[i];
    var it = items[i];
    var run = runs[it[0]];
    var ex = t.x === null || t.x === undefined ? null : doc.examples[t.x];
    var expected = ex ? ex.exp : (t.exp || null);
    var box = el("div", "trace-view");

    var head = add(box, el("div", "trace-head"));
    field(head, "run", run.label + " · " + run.env);
    field(head, "example", it[1] + " · trial " + it[2]);
    field(head, "status", it[3]);
    field(head, "duration", t.d.toFixed(2) + " s");
    field(head, "tool calls", it[4] + " made, " + (expected ? expected.length : "?") + " expected");
    if (t.e) { add(box, el("div", "problem", "error: " + t.e)); }

    if (ex) {
      add(box, el("h4", null, "input"));
      if (typeof ex.in === "string") {
        add(box, el("pre", "input", ex.in));
      } else {
        ex.in.forEach(function (turn) {
          var p = add(box, el("pre", "input-turn"));
          add(p, el("span", "role", turn.role));
          add(p, el("span", null, turn.content));
        });
      }
    }

    add(box, el("h4", null, "scores"));
    var ul = add(box, el("ul", "scores"));
    if (t.sc.length === 0) { add(ul, el("li", "meta", it[3] === "error" ? "not graded (error)" : "no scores")); }
    t.sc.forEach(function (s) {
      var li = add(ul, el("li"));
      add(li, el("b", null, s[0] + " = "));
      add(li, el("span", s[1] === null ? "meta" : passClass(s[3]), fmt(s[1])));
      add(li, el("span", null, " · " + s[2]));
    });

    if (t.dv) {
      add(box, el("div", "divergence", "First divergence: " + t.dv[1]));
    }

    add(box, el("h4", null, "steps (expected calls beside the calls made)"));
    var table = add(box, el("table", "trace"));
    var hr = add(add(table, el("thead")), el("tr"));
    [["n", "#"], ["kind", ""], ["actual", "what happened"], ["expected", "expected call"]].forEach(function (h) {
      add(hr, el("th", h[0], h[1]));
    });
    var body = add(table, el("tbody"));
    var toolIndex = 0;
    t.s.forEach(function (s, n) {
      var tr = add(body, el("tr"));
      add(tr, el("td", "n", n + 1));
      if (s.u !== undefined) {
        tr.className = "user";
        add(tr, el("td", "kind", s.stop ? "stop" : "user"));
        var ucell = add(tr, el("td", "actual"));
        add(ucell, el("div", "meta", "turn " + s.tn + (s.l !== undefined ? " · simulated user · " + s.l.toFixed(3) + " s" : "")));
        add(ucell, el("pre", "text", s.u || "(ends the conversation)"));
        add(tr, el("td", "expected"));
      } else if (s.m !== undefined) {
        tr.className = "model";
        add(tr, el("td", "kind", "model"));
        var cell = add(tr, el("td", "actual"));
        var meta = s.l.toFixed(3) + " s";
        if (s.ti !== undefined || s.to !== undefined) {
          meta += " · " + (s.ti === undefined ? "?" : s.ti) + " in → " + (s.to === undefined ? "?" : s.to) + " out tokens";
        }
        if (s.nc) { meta += " · " + s.nc + (s.nc === 1 ? " call" : " calls"); }
        add(cell, el("div", "meta", meta));
        if (s.r) {
          var fold = add(cell, el("details", "reasoning"));
          add(fold, el("summary", "meta", "reasoning" + (s.rt === undefined ? "" : " (" + s.rt + " tokens)")));
          add(fold, el("pre", "text", s.r));
        }
        if (s.m) { add(cell, el("pre", "text", s.m)); }
        (s.c || []).forEach(function (c) {
          var line = add(cell, el("div", "mono", "→ " + callText(c[0], c[1]) + " (not executed)"));
          if (c[2]) { add(line, el("span", "badge bad", "malformed: " + c[2])); }
          if (c[3]) { add(cell, el("pre", "raw", c[3])); }
        });
        add(tr, el("td", "expected"));
      } else {
        tr.className = "tool" + (s.err ? " err" : "");
        add(tr, el("td", "kind", "tool"));
        var act = add(tr, el("td", "actual"));
        var line = add(act, el("div", "mono call", callText(s.t, s.a)));
        if (s.err) { add(line, el("span", "badge bad", "tool error")); }
        if (s.mf) { add(line, el("span", "badge bad", "malformed: " + s.mf)); }
        if (s.raw) { add(act, el("pre", "raw", s.raw)); }
        var out = add(act, el("pre", "out"));
        add(out, el("span", "meta", "⇒ "));
        add(out, el("span", null, s.o));
        if (s.al) { act.appendChild(alignmentLine(s.al, t.al ? t.al.fe : null, toolIndex + 1)); }
        if (s.sp) {
          s.sp.forEach(function (c) { add(act, el("div", "mono state-change", stateChangeText(c))); });
          if (s.spn) { add(act, el("div", "meta state-change", "… " + s.spn + " more state change(s)")); }
        }
        var expCell = add(tr, el("td", "expected mono"));
        if (expected && toolIndex < expected.length) {
          var want = expectedText(expected[toolIndex]);
          expCell.textContent = want;
          var wantName = typeof expected[toolIndex] === "string" ? expected[toolIndex] : expected[toolIndex][0];
          var same = typeof expected[toolIndex] === "string" ? wantName === s.t : want === callText(s.t, s.a);
          if (same) { expCell.classList.add("match"); }
        } else if (expected) {
          expCell.textContent = "(beyond the expected calls)";
        }
        if (t.dv && t.dv[0] === toolIndex) {
          tr.classList.add("diverge");
          add(line, el("span", "badge", "first divergence"));
        }
        toolIndex += 1;
      }
    });
    if (expected) {
      for (var k = toolIndex; k < expected.length; k++) {
        var tr = add(body, el("tr", "missing"));
        add(tr, el("td", "n", ""));
        add(tr, el("td", "kind", "—"));
        var miss = add(tr, el("td", "actual", "(no call made)"));
        add(tr, el("td", "expected mono", expectedText(expected[k])));
        if (t.dv && t.dv[0] === k) {
          tr.classList.add("diverge");
          add(miss, el("span", "badge", "first divergence"));
        }
      }
    }

    if (t.al) {
      var summary = add(box, el("div", "alignment-summary"));
      if (t.al.ms) { add(summary, el("div", "problem missing-milestones", "milestones never reached: " + t.al.ms.join(", "))); }
      if (t.al.mo) { add(summary, el("div", "meta", "optional milestones not reached: " + t.al.mo.join(", "))); }
      (t.al.mh || []).forEach(function (m) { add(summary, el("div", "problem", "minefield state reached: " + json(m))); });
      if (t.al.fe) { add(summary, el("div", "problem first-error", "first error: " + t.al.fe)); }
    }
    if (t.sn) { add(box, el("div", "meta state-note", "state: " + t.sn)); }

    if (t.fa !== undefined) {
      add(box, el("h4", null, "final answer"));
      add(box, el("pre", "final-answer", t.fa));
    }
    add(box, el("h4", null, "final state"));
    add(box, el("pre", "final-state", typeof t.fs === "string" ? t.fs : JSON.stringify(t.fs, null, 1)));
    return box;
  }

  buildControls();
  filter();
  render();
  document.documentElement.setAttribute("data-ready", "1");
  window.toolgymReadyMs = performance.now();
})();
