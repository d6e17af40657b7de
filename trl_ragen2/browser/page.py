"""The report's one HTML file: a page that draws the runs' data (embedded as JSON) with inline CSS and JS.

[`render`] returns the page for the data of `trl_ragen2.browser.data.load_run` (one run, or two to compare). This
module keeps no state. Safety rules, each tested in `tests/test_run_browser*.py`:

- the data sits in a `<script type="application/json">` block, which browsers never execute, with every `<`, `>`
  and `&` written as a JSON escape, so no text (model text included) can close the block or open a tag;
- the page's script builds every element with `textContent` and `createElement`, never `innerHTML`, so model text
  is always text;
- a Content-Security-Policy allows the page's own script only (by its SHA-256) and no request at all: nothing
  loads from the network, and a script that did get into the page would not run.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json

from ..runs.samples import json_safe


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:10px 16px;background:#263238;color:#fff}header h1{font-size:18px;margin:0}
nav{display:flex;gap:4px;padding:8px 16px;background:#eceff1;position:sticky;top:0;z-index:2;flex-wrap:wrap}
nav button{border:1px solid #90a4ae;background:#fff;padding:4px 12px;cursor:pointer;border-radius:3px}
nav button.on{background:#37474f;color:#fff}nav .ctl{margin-left:12px}
main{padding:8px 16px}.view{display:none}.view.on{display:block}
.notes{font-size:12px;color:#555;margin:4px 0}.notes li{margin:0}
.panels{display:flex;flex-wrap:wrap;gap:12px}.panel{background:#fff;border:1px solid #ddd;padding:6px}
.panel h3{margin:0 0 4px;font-size:13px}.legend{font-size:11px;display:flex;flex-wrap:wrap;gap:8px;max-width:560px}
.legend i{display:inline-block;width:14px;height:3px;margin-right:3px;vertical-align:middle}
.cols{display:flex;gap:12px;align-items:flex-start}.col{flex:1;min-width:0}
.group{background:#fff;border:1px solid #ccc;border-left:6px solid #999;margin:8px 0;padding:6px}
.group.kept{border-left-color:#2e7d32}.group.dropped{border-left-color:#c62828;opacity:.9}
.badge{font-weight:bold;padding:1px 6px;border-radius:3px;color:#fff;font-size:12px}
details.rollout.dropped summary{color:#c62828}.badge.kept{background:#2e7d32}.badge.dropped{background:#c62828}.badge.miss{background:#c62828}
.badge.hit{background:#2e7d32}
pre{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre;overflow:auto;max-height:24em;
background:#f5f5f5;padding:4px;margin:2px 0;font-size:12px;line-height:1.25}
.turn{border-top:1px dashed #ccc;margin-top:4px}.lbl{font-size:11px;color:#666;text-transform:uppercase}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
tr.miss td{background:#ffebee}tr.sel td{outline:2px solid #1565c0}
.pair{display:flex;gap:8px}span.shared{background:#fff59d}.pair>div{flex:1;min-width:0}svg text{font-size:10px;fill:#444}
"""

SCRIPT = r"""
"use strict";
const T0 = performance.now();
const DATA = JSON.parse(document.getElementById("report-data").textContent);
const RUNS = DATA.runs;
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
const SVGNS = "http://www.w3.org/2000/svg";

function el(tag, cls, ...kids) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    node.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS(SVGNS, tag);
  for (const k in attrs) node.setAttribute(k, attrs[k]);
  return node;
}
function fmt(v) {
  if (v === null || v === undefined || typeof v !== "number") return "–";
  if (!isFinite(v)) return String(v);
  return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : String(+v.toFixed(4));
}
// Axis ticks at round values: a step of 1, 2, 2.5 or 5 times a power of ten, about `count` ticks over [lo, hi],
// the axis widened to the outer ticks; labels with the decimals the step needs.
function niceTicks(lo, hi, count) {
  const raw = (hi - lo) / Math.max(count - 1, 1), power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * power).find(c => c >= raw * (1 - 1e-9));
  const first = Math.floor(lo / step + 1e-9) * step, last = Math.ceil(hi / step - 1e-9) * step;
  const ticks = [];
  for (let t = first; t <= last + step * 1e-6; t += step) ticks.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9) + (step / power === 2.5 ? 1 : 0));
  const extra = step / power === 2.5 ? 1 : 0;  // 2.5 x 10^k needs one more digit than its power
  const label = v => {
    if (v === 0) return "0";
    if (Math.abs(v) < 1e5 && step >= 1e-3) return v.toFixed(decimals);
    const digits = Math.floor(Math.log10(Math.abs(v)) + 1e-9) - Math.floor(Math.log10(step) + 1e-9) + extra;
    return v.toExponential(Math.min(Math.max(0, digits), 6));
  };
  return {ticks, lo: first, hi: last, label};
}
function text(v) { return v === null || v === undefined ? "" : String(v); }
function arr(v) { return Array.isArray(v) ? v : []; }
function score(v) { return typeof v === "number" ? v : -Infinity; }

// ---- curves
function chart(series, alarms, opts) {
  const W = 560, H = 200, L = 52, R = 8, Tp = 8, B = 24;
  let xs = [], ys = [];
  for (const s of series) {
    for (const p of s.points) { xs.push(p[0]); ys.push(p[1]); }
    for (const b of arr(s.band)) { ys.push(b[1], b[2]); }
  }
  if (!xs.length) return null;
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (opts && opts.hlines) for (const h of opts.hlines) { y0 = Math.min(y0, h); y1 = Math.max(y1, h); }
  if (opts && opts.vlines) for (const v of opts.vlines) { x0 = Math.min(x0, v); x1 = Math.max(x1, v); }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= 1; y1 += 1; }
  const yt = niceTicks(y0, y1, 5), xt = niceTicks(x0, x1, 6);
  y0 = yt.lo; y1 = yt.hi; x0 = xt.lo; x1 = xt.hi;
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R), sy = y => H - B - (y - y0) / (y1 - y0) * (H - Tp - B);
  const root = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  root.appendChild(svg("rect", {x: L, y: Tp, width: W - L - R, height: H - Tp - B, fill: "#fff", stroke: "#bbb"}));
  for (const y of yt.ticks) {
    const ty = svg("text", {x: 2, y: sy(y) + 3}); ty.textContent = yt.label(y); root.appendChild(ty);
  }
  for (const x of xt.ticks) {
    const tx = svg("text", {x: sx(x) - 10, y: H - 8}); tx.textContent = xt.label(x); root.appendChild(tx);
  }
  for (const a of alarms || []) {
    if (a < x0 || a > x1) continue;
    root.appendChild(svg("line", {x1: sx(a), x2: sx(a), y1: Tp, y2: H - B, stroke: "#d62728", "stroke-dasharray": "4 3",
                                  class: "alarm"}));
  }
  for (const h of (opts && opts.hlines) || []) {
    root.appendChild(svg("line", {x1: L, x2: W - R, y1: sy(h), y2: sy(h), stroke: "#999", "stroke-dasharray": "2 2"}));
  }
  for (const v of (opts && opts.vlines) || []) {
    root.appendChild(svg("line", {x1: sx(v), x2: sx(v), y1: Tp, y2: H - B, stroke: "#999", "stroke-dasharray": "2 2"}));
  }
  for (const s of series) {
    if (s.band && s.band.length) {
      const up = s.band.map(b => `${sx(b[0])},${sy(b[2])}`), down = s.band.map(b => `${sx(b[0])},${sy(b[1])}`).reverse();
      root.appendChild(svg("polygon", {points: up.concat(down).join(" "), fill: s.color, opacity: 0.15}));
    }
    const pts = s.points.map(p => `${sx(p[0])},${sy(p[1])}`).join(" ");
    const dash = s.role === "eval" ? "6 3" : s.role === "reference" ? "2 2" : s.run ? "8 2 2 2" : "";
    root.appendChild(svg("polyline", {points: pts, fill: "none", stroke: s.color, "stroke-width": 1.4,
                                      "stroke-dasharray": dash, class: "series"}));
    if (s.points.length <= 60) {  // sparse lines (the MI diagnostics every few steps): mark each point
      for (const p of s.points) root.appendChild(svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2, fill: s.color}));
    }
  }
  return root;
}

function legend(series) {
  const box = el("div", "legend");
  for (const s of series) {
    const swatch = el("i"); swatch.style.background = s.color;
    box.appendChild(el("span", null, swatch, s.label));
  }
  return box;
}

function renderCurves() {
  const view = document.getElementById("view-curves");
  const panels = new Map();
  RUNS.forEach((run, r) => {
    for (const p of run.curves) {
      if (!panels.has(p.title)) panels.set(p.title, {title: p.title, ylabel: p.ylabel, alarms: p.alarms, series: []});
      const groups = new Map();
      for (const s of p.series) {
        if (!groups.has(s.group)) groups.set(s.group, groups.size);
        const tag = RUNS.length > 1 ? ` [${run.name}]` : "";
        panels.get(p.title).series.push(Object.assign({}, s, {run: r, label: s.label + tag,
          color: COLORS[(groups.get(s.group) + 4 * r) % COLORS.length]}));
      }
    }
  });
  const box = el("div", "panels");
  for (const p of panels.values()) {
    const alarms = p.alarms ? [].concat(...RUNS.map(run => run.alarms)) : [];
    const c = chart(p.series, alarms);
    if (!c) continue;
    box.appendChild(el("div", "panel", el("h3", null, p.title + " (" + p.ylabel + ")"), c, legend(p.series)));
  }
  RUNS.forEach((run, r) => {
    for (const g of run.regimes) {
      const pts = g.points;
      const series = [{label: "run path", role: "train", color: COLORS[r * 4 % COLORS.length],
                       points: pts.map(p => [p[1], p[2]])}];
      const c = chart(series, [], {hlines: [g.mi_threshold], vlines: [g.entropy_threshold]});
      const last = pts[pts.length - 1];
      box.appendChild(el("div", "panel regime",
        el("h3", null, `Reasoning regime, ${g.scope} [${run.name}]: x = H(Z|X), y = MI-Est`), c,
        el("div", "notes", `last diagnostic (step ${last[0]}): ${last[3]}; thresholds MI-Est ${g.mi_threshold},` +
           ` H(Z|X) ${g.entropy_threshold}`)));
    }
  });
  if (!box.childNodes.length) box.appendChild(el("p", null, "No curves: the run has logged no metric yet."));
  view.appendChild(box);
}

// ---- step browser
function allSteps(key) {
  const steps = new Set();
  for (const run of RUNS) for (const rec of run.samples) if (key(rec)) steps.add(rec.step);
  return [...steps].sort((a, b) => a - b);
}
function recordAt(run, step, key) {
  let best = null;
  for (const rec of run.samples) if (key(rec) && rec.step <= step) best = rec;
  return best;
}
function stepPicker(id, steps, onchange) {
  const sel = el("select"); sel.id = id;
  for (const s of steps) { const o = el("option", null, "step " + s); o.value = String(s); sel.appendChild(o); }
  sel.addEventListener("change", () => onchange(+sel.value));
  const prev = el("button", null, "◀"), next = el("button", null, "▶");
  prev.addEventListener("click", () => { if (sel.selectedIndex > 0) { sel.selectedIndex--; onchange(+sel.value); } });
  next.addEventListener("click", () => {
    if (sel.selectedIndex < steps.length - 1) { sel.selectedIndex++; onchange(+sel.value); } });
  return el("span", "ctl", prev, sel, next);
}

function block(label, value) {
  return el("div", null, el("div", "lbl", label), el("pre", null, text(value)));
}

function groupCard(g, size) {
  const kept = g.kept !== false;
  const card = el("div", "group " + (kept ? "kept" : "dropped"));
  card.dataset.group = String(g.index);
  card.dataset.kept = kept ? "1" : "0";
  card.appendChild(el("div", null, el("span", "badge " + (kept ? "kept" : "dropped"), kept ? "KEPT" : "DROPPED"),
    ` group ${text(g.index)} · reward variance ${fmt(g.variance)} · rewards ${arr(g.rewards).map(fmt).join(", ")}`));
  card.appendChild(block("prompt", g.prompt));
  arr(g.rollouts).forEach((ro, i) => {
    const d = el("details", "rollout");
    if (i === 0) d.open = true;
    if (ro.kept === false) { d.classList.add("dropped"); d.dataset.kept = "0"; }
    d.appendChild(el("summary", null, `rollout ${i}${ro.kept === false ? " (dropped)" : ""} · reward ${fmt(ro.reward)} · ${arr(ro.turns).length} turn(s)`));
    arr(ro.turns).forEach((t, j) => {
      const turn = el("div", "turn", el("div", "lbl", "turn " + j));
      if (t.observation) turn.appendChild(block("environment", t.observation));
      turn.appendChild(block("reasoning", t.reasoning));
      turn.appendChild(block("answer", t.answer));
      d.appendChild(turn);
    });
    card.appendChild(d);
  });
  return card;
}

function renderSteps() {
  const view = document.getElementById("view-steps");
  const has = rec => rec.groups.length > 0;
  const steps = allSteps(has);
  if (!steps.length) { view.appendChild(el("p", null, "No sample log in this run: no step to browse.")); return; }
  const cols = el("div", "cols");
  const show = step => {
    cols.textContent = "";
    for (const run of RUNS) {
      const col = el("div", "col");
      const rec = recordAt(run, step, has);
      col.appendChild(el("h3", null, run.name));
      if (!rec) { col.appendChild(el("p", null, "no logged step at or before " + step)); cols.appendChild(col); continue; }
      const kept = rec.groups.filter(g => g.kept !== false).length;
      col.appendChild(el("div", "notes", `step ${rec.step}${rec.step !== step ? " (nearest logged before " + step + ")" : ""}: ` +
        `${rec.groups.length} of ${text(rec.num_groups)} groups logged, ` +
        (rec.filter ? `${kept} kept by the filter (${text(rec.filter)})` : "no filter: every group trains") +
        (rec.generation_rounds > 1 ? `; the first of ${rec.generation_rounds} generation rounds (refill: ` +
          `${text(rec.refill_kept_groups)} groups kept over all rounds)` : "") +
        `; sorted by reward variance`));
      const groups = rec.groups.slice().sort((a, b) => score(b.variance) - score(a.variance));
      for (const g of groups) col.appendChild(groupCard(g, rec.group_size));
      cols.appendChild(col);
    }
    document.body.dataset.step = String(step);
  };
  view.appendChild(stepPicker("step-select", steps, show));
  view.appendChild(cols);
  show(steps[0]);
}

// ---- MI view
function renderMI() {
  const view = document.getElementById("view-mi");
  const has = rec => Object.keys(rec.mi || {}).length > 0;
  const steps = allSteps(has);
  if (!steps.length) { view.appendChild(el("p", null, "No MI matrix in the sample log (no diagnosed step logged).")); return; }
  const cols = el("div", "cols");
  const show = step => {
    cols.textContent = "";
    for (const run of RUNS) {
      const col = el("div", "col", el("h3", null, run.name));
      const rec = recordAt(run, step, has);
      if (!rec) { col.appendChild(el("p", null, "no diagnosed step at or before " + step)); cols.appendChild(col); continue; }
      for (const scope of Object.keys(rec.mi)) col.appendChild(matrixView(run, rec, scope));
      cols.appendChild(col);
    }
  };
  view.appendChild(stepPicker("mi-select", steps, show));
  view.appendChild(cols);
  show(steps[0]);
}

function matrixView(run, rec, scope) {
  const m = rec.mi[scope];
  const box = el("div", "matrix");
  box.dataset.scope = scope;
  const logged = (run.logged[scope] || {})[String(rec.step)];
  box.appendChild(el("h4", null, `${scope} at step ${rec.step}: Retrieval-Acc of this matrix ${fmt(m.retrieval_acc)}` +
    ` (chance ${fmt(m.retrieval_chance)}; logged ${fmt(logged)}); misses in red`));
  box.dataset.acc = String(m.retrieval_acc);
  const table = el("table");
  table.appendChild(el("tr", null, el("th", null, "chain"), el("th", null, "group"), el("th", null, "own prompt"),
    el("th", null, "best prompt"), el("th", null, "own log p / token"), el("th", null, "best log p / token"),
    el("th", null, "retrieved")));
  const detail = el("div", "pair");
  const ctx = c => text(arr(m.contexts)[arr(m.column_context)[c]]);
  arr(m.retrieval).forEach((v, n) => {
    const len = arr(m.lengths)[n] || 1, row = arr(m.logp)[n] || [];
    const miss = v.hit < 1;
    const tr = el("tr", miss ? "miss" : "hit", el("td", null, String(n)), el("td", null, text(arr(m.groups)[n])),
      el("td", null, "column " + v.own), el("td", null, "column " + v.best),
      el("td", null, fmt(score(row[v.own]) / len)), el("td", null, fmt(score(row[v.best]) / len)),
      el("td", null, el("span", "badge " + (miss ? "miss" : "hit"), v.hit === 1 ? "hit" : v.hit > 0 ? "tie " + fmt(v.hit) : "miss")));
    tr.dataset.hit = String(v.hit);
    tr.addEventListener("click", () => {
      for (const other of table.querySelectorAll("tr.sel")) other.classList.remove("sel");
      tr.classList.add("sel");
      detail.textContent = "";
      detail.appendChild(el("div", null, block("chain " + n + " (reasoning)", arr(m.chains)[n])));
      detail.appendChild(el("div", null, block("its own prompt (column " + v.own + ")", ctx(v.own))));
      detail.appendChild(el("div", null, block("the prompt it scores highest under (column " + v.best + ")", ctx(v.best))));
    });
    table.appendChild(tr);
  });
  box.appendChild(table);
  box.appendChild(detail);
  box.appendChild(acrossPrompts(m));
  const first = table.querySelector("tr.miss") || table.querySelectorAll("tr")[1];
  if (first) first.dispatchEvent(new Event("click"));
  return box;
}

// One chain per prompt group, side by side; the words of any word trigram that chains of two or more groups share
// are highlighted: the text template metrics made visible.
function acrossPrompts(m) {
  const firstOfGroup = new Map();
  arr(m.groups).forEach((g, n) => { if (!firstOfGroup.has(g) && firstOfGroup.size < 6) firstOfGroup.set(g, n); });
  const chains = [...firstOfGroup.entries()].map(([g, n]) => [g, text(arr(m.chains)[n]).slice(0, 3000)]);
  const tokens = chains.map(([, c]) => c.split(/(\s+)/));
  const groupsOf = new Map();
  tokens.forEach((toks, i) => {
    const words = toks.filter(t => t && !/^\s+$/.test(t));
    for (let w = 0; w + 2 < words.length; w++) {
      const key = words.slice(w, w + 3).join(" ");
      if (!groupsOf.has(key)) groupsOf.set(key, new Set());
      groupsOf.get(key).add(i);
    }
  });
  const box = el("div", "across", el("h4", null, "The same template across prompts? One chain per group; word " +
    "trigrams shared with another group's chain highlighted"));
  const row = el("div", "pair");
  tokens.forEach((toks, i) => {
    const words = [], positions = [];
    toks.forEach((t, p) => { if (t && !/^\s+$/.test(t)) { words.push(t); positions.push(p); } });
    const shared = new Set();
    for (let w = 0; w + 2 < words.length; w++) {
      if (groupsOf.get(words.slice(w, w + 3).join(" ")).size > 1) { shared.add(w); shared.add(w + 1); shared.add(w + 2); }
    }
    const pre = el("pre");
    const isShared = new Set([...shared].map(w => positions[w]));
    toks.forEach((t, p) => pre.appendChild(isShared.has(p) ? el("span", "shared", t) : document.createTextNode(t)));
    row.appendChild(el("div", null, el("div", "lbl", "group " + chains[i][0]), pre));
  });
  box.appendChild(row);
  return box;
}

// ---- page
function header() {
  const h = document.getElementById("runs");
  for (const run of RUNS) {
    h.appendChild(el("div", null, `${run.name}: last step ${text(run.last_step)}, ${run.samples.length} logged step(s); ` +
      `metrics from ${text(run.source)}`));
    if (run.notes.length) { const ul = el("ul", "notes"); for (const n of run.notes) ul.appendChild(el("li", null, n)); h.appendChild(ul); }
  }
}
function tabs() {
  const buttons = document.querySelectorAll("nav button[data-view]");
  for (const b of buttons) b.addEventListener("click", () => {
    for (const o of buttons) o.classList.toggle("on", o === b);
    for (const v of document.querySelectorAll(".view")) v.classList.toggle("on", v.id === b.dataset.view);
  });
}
header(); tabs(); renderCurves(); renderSteps(); renderMI();
document.body.dataset.renderMs = String(Math.round(performance.now() - T0));
document.body.dataset.ready = "1";
"""


def _embed(data) -> str:
    """`data` as JSON that cannot end its `<script>` block or open a tag: `<`, `>` and `&` as `\\u` escapes."""
    text = json.dumps(json_safe(data), allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(runs: list[dict], title: str = "trl-ragen2 run browser") -> str:
    """The report page for one run's data (or two, compared step by step)."""
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
    policy = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{digest}'"
    names = " vs ".join(run["name"] for run in runs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}: {html.escape(names)}</title>
<style>{STYLE}</style></head>
<body>
<header><h1>{html.escape(title)}: {html.escape(names)}</h1><div id="runs"></div></header>
<nav><button data-view="view-curves" class="on">Curves</button><button data-view="view-steps">Steps</button>
<button data-view="view-mi">MI retrieval</button></nav>
<main><section class="view on" id="view-curves"></section><section class="view" id="view-steps"></section>
<section class="view" id="view-mi"></section></main>
<script type="application/json" id="report-data">{_embed({"runs": runs})}</script>
<script>{SCRIPT}</script>
</body></html>
"""
