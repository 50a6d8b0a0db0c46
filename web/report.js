/*
 * report.js - the report page: reads the data embedded by `boundsort report`
 * (<script id="bs-data">, written by src/report/*.c), draws it with plot.js,
 * and keeps the curation (labels, merge groups) that the page exports.
 *
 * Data: typed arrays arrive as {dtype, n, b64} (little-endian bytes in
 * base64) and are decoded once. Units are indexed 0..n_units-1 in ascending
 * cluster id (unit_ids). Per unit: columns[] (table values), templates
 * (int8 waveforms x scale on RP_TEMPLATE_CHANS channels), spikes (a
 * subsample, u16-quantized: value = lo + q / 65534 * (hi - lo), 65535 =
 * missing; offsets in spikes.off), acg (|lag| bins), similar (unit indices
 * and scores), ccg (pairs a < b, lag = t_b - t_a). drift_map (sparse or
 * dense cells: count, u8 amplitude), motion, run, mem.
 *
 * Curation state: a label per unit (good / mua / noise / unsorted; starts
 * from cluster_group.tsv, else KSLabel) and merge groups (disjoint sets of
 * units). It is kept in localStorage under a key made of the folder name and
 * the sorting's size, so reloading the page keeps the work, and exported as
 * a SpikeInterface curation JSON (format_version "2": unit_ids,
 * label_definitions {quality: good/mua/noise, exclusive}, manual_labels
 * [{unit_id, labels: {quality: [label]}}], merges [{unit_ids, new_unit_id}]
 * with new ids max_id + 1, + 2, ... as Phy allocates them, removed [],
 * splits [see below]) and as Phy's cluster_group.tsv (cluster_id<TAB>group, a row per
 * unit, ascending id).
 *
 * Splits (when the page holds every spike, spikes.all): a box dragged on a
 * unit's amplitude plot selects the spikes whose quantized time and
 * amplitude lie in it; "split" (or s) makes the unit two: the box's spikes
 * and the rest. The box is kept in quantized units, so the indices are the
 * same on every reload; exported as {unit_id, mode "indices", indices
 * [[spike indices within the unit's train]], new_unit_ids [box, rest]},
 * new ids after the merges'. A unit is merged or split, not both
 * (SpikeInterface applies the merges first, on the original ids).
 *
 * Every curation action (a label, a merge, an unmerge, a split, a reset) first pushes
 * the state before it on an undo stack (the redo stack is cleared); undo
 * and redo swap states between the two stacks (buttons, Ctrl+Z, Ctrl+Y or
 * Ctrl+Shift+Z). The stacks live as long as the page; the state itself is
 * saved as above after every change.
 *
 * Tabs: each is reachable by the URL's hash (#units, #drift, #traces, #run,
 * #curation); showing a tab sets the hash. The traces tab draws the
 * stretches of preprocessed traces the page holds (D.traces), each spike
 * over its unit's loud channels in the unit's colour, the selected unit's in
 * red; clicking a spike selects its unit.
 *
 * Keyboard (listed on the page): up/down (or j/k) move through the table,
 * g/m/n/u relabel the selected unit, x ticks it for merging, s splits it by
 * the box drawn on its amplitude plot, Ctrl+Z / Ctrl+Y
 * undo and redo.
 */
"use strict";
(function () {
  const t_start = performance.now();
  const P = BSPlot;
  const D = JSON.parse(document.getElementById("bs-data").textContent);
  const LABELS = ["good", "mua", "noise", "unsorted"];
  const LABEL_COLOR = { good: "#2e7d32", mua: "#c77700", noise: "#8d6e63", unsorted: "#9e9e9e" };

  function typed(o) {
    if (!o) return null;
    const bin = atob(o.b64), u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    const T = { u8: Uint8Array, i8: Int8Array, u16: Uint16Array, i16: Int16Array, u32: Uint32Array, i32: Int32Array, f32: Float32Array }[o.dtype];
    return new T(u8.buffer, 0, o.n);
  }

  /* ---- decoded data ---- */
  const U = D.n_units;
  const ids = Array.from(typed(D.unit_ids));
  const maxId = ids.length ? Math.max.apply(null, ids) : -1;
  const unitOfId = new Map(ids.map((id, u) => [id, u]));
  const cols = D.columns;
  const colByKey = new Map(cols.map((c) => [c.key, c]));
  const T = D.templates;
  const tpl = { peak: typed(T.peak_ch), chans: typed(T.chans), scale: typed(T.scale), pos: typed(T.pos), wave: typed(T.wave) };
  const S = D.spikes;
  const sp = { off: typed(S.off), t: typed(S.t), amp: S.amp ? typed(S.amp) : null, ampLo: typed(S.amp_lo), ampHi: typed(S.amp_hi), x: typed(S.x), y: typed(S.y) };
  /* every spike of every unit (for splits), or null: unit u's k-th spike at all.off[u] + k */
  const all = S.all ? { off: typed(S.all.off), t: typed(S.all.t), amp: typed(S.all.amp), lo: typed(S.all.amp_lo), hi: typed(S.all.amp_hi) } : null;
  const acg = typed(D.acg.counts);
  const sim = { unit: typed(D.similar.unit), score: typed(D.similar.score), n: D.similar.n };
  const ccgPairs = typed(D.ccg.pairs), ccgCounts = typed(D.ccg.counts);
  const pairIndex = new Map();
  for (let i = 0; i < ccgPairs.length / 2; i++) pairIndex.set(ccgPairs[2 * i] * 1048576 + ccgPairs[2 * i + 1], i);
  const ringFull = new Set(D.acg.ring_full);

  /* A quantized value back: lo + q / (top - 1) * (hi - lo); the top code (65535 for u16, 255 for u8) is "missing". */
  function deq(q, lo, hi, top = 65535) { return q === top ? NaN : lo + q / (top - 1) * (hi - lo); }
  /* Every spike of unit u: times (s), amplitudes, and the quantized values a split is defined on. */
  function unitAll(u) {
    const a = all.off[u], n = all.off[u + 1] - a, qt = all.t.subarray(a, a + n), qa = all.amp.subarray(a, a + n);
    const t = new Float64Array(n), amp = new Float64Array(n), lo = all.lo[u], hi = all.hi[u];
    for (let i = 0; i < n; i++) {
      t[i] = deq(qt[i], 0, S.t_hi);
      amp[i] = deq(qa[i], lo, hi, 255);
    }
    return { t, amp, n, qt, qa };
  }
  /* The spikes of unit u inside a split's box (quantized bounds, inclusive): indices into the unit's train. */
  function splitIndices(sp) {
    const a = all.off[sp.u], n = all.off[sp.u + 1] - a, out = [];
    for (let i = 0; i < n; i++) {
      const qt = all.t[a + i], qa = all.amp[a + i];
      if (qt >= sp.qt0 && qt <= sp.qt1 && qa >= sp.qa0 && qa <= sp.qa1 && qa !== 255) out.push(i);
    }
    return out;
  }
  function unitSpikes(u) {
    const a = sp.off[u], b = sp.off[u + 1], n = b - a;
    const t = new Float64Array(n), amp = new Float64Array(n), x = new Float64Array(n), y = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      t[i] = deq(sp.t[a + i], 0, S.t_hi);
      amp[i] = sp.amp ? deq(sp.amp[a + i], sp.ampLo[u], sp.ampHi[u]) : NaN;
      x[i] = deq(sp.x[a + i], S.x_lo, S.x_hi);
      y[i] = deq(sp.y[a + i], S.y_lo, S.y_hi);
    }
    return { t, amp, x, y, n };
  }
  /* In the unit view the selected unit is drawn in the first palette colour and its k-th most similar unit in
     colour k + 1, the same in the position plot and the cross-correlograms. */
  function unitColor(u) {
    if (u === state.selected) return P.PALETTE[0];
    const k = similarOf(state.selected).findIndex((o) => o.v === u);
    return k >= 0 ? P.PALETTE[1 + (k % (P.PALETTE.length - 1))] : "#999";
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c])); }
  function colVal(key, u) { const c = colByKey.get(key); return c ? c.values[u] : null; }

  /* ---- curation state ---- */
  const storeKey = `boundsort-report:${D.folder}:${D.n_units}:${D.n_spikes}:${maxId}`;
  function initialLabel(u) {
    for (const k of ["group", "KSLabel"]) {
      const v = colVal(k, u);
      if (v && LABELS.includes(String(v).toLowerCase())) return String(v).toLowerCase();
    }
    return "unsorted";
  }
  const initial = ids.map((_, u) => initialLabel(u));
  const state = { labels: initial.slice(), groups: [], rejected: [], splits: [], pending: null, notice: "", checked: new Set(), selected: U ? 0 : -1, sortKey: "cluster_id", sortDir: 1, filter: "", labelFilter: "" };
  /* merge proposals (merge_proposals.tsv): a pair is accepted when its units are in one merge group, rejected when
     its key is in state.rejected, else open */
  const PROPOSALS = D.merge_proposals || [];
  const pairKey = (p) => `${ids[p.a]}-${ids[p.b]}`;
  try {
    const saved = JSON.parse(localStorage.getItem(storeKey) || "null");
    if (saved && Array.isArray(saved.labels) && saved.labels.length === U) {
      state.labels = saved.labels.map((l) => (LABELS.includes(l) ? l : "unsorted"));
      state.groups = (saved.groups || []).map((g) => g.filter((u) => u >= 0 && u < U)).filter((g) => g.length >= 2);
      state.rejected = Array.isArray(saved.rejected) ? saved.rejected.filter((k) => typeof k === "string") : [];
      state.splits = all && Array.isArray(saved.splits) ? saved.splits.filter((x) => x && x.u >= 0 && x.u < U) : [];
    }
  } catch (e) { /* storage unavailable (private mode): curation lives for this visit */ }
  function save() {
    try { localStorage.setItem(storeKey, JSON.stringify({ labels: state.labels, groups: state.groups, rejected: state.rejected, splits: state.splits })); } catch (e) { /* ignore */ }
  }
  /* undo / redo: snapshots of labels, merge groups, rejected proposals and splits */
  const undoStack = [], redoStack = [];
  const snapshot = () => ({ labels: state.labels.slice(), groups: state.groups.map((g) => g.slice()), rejected: state.rejected.slice(),
                            splits: state.splits.map((x) => Object.assign({}, x)) });
  function remember() {
    undoStack.push(snapshot());
    if (undoStack.length > 1000) undoStack.shift();
    redoStack.length = 0;
  }
  function refresh() {
    save();
    if (activeTab === "units" && state.selected >= 0) drawAmplitudes(state.selected);
    renderRows();
    renderUnitHead();
    renderCuration();
    renderHistory();
  }
  function travel(from, to) {
    if (!from.length) return;
    to.push(snapshot());
    const s = from.pop();
    state.labels = s.labels;
    state.groups = s.groups;
    state.rejected = s.rejected;
    state.splits = s.splits;
    state.pending = null;
    state.checked.clear();
    refresh();
  }
  const undo = () => travel(undoStack, redoStack), redo = () => travel(redoStack, undoStack);
  function groupOf(u) { return state.groups.findIndex((g) => g.includes(u)); }

  function setLabel(u, label) {
    if (u < 0 || !LABELS.includes(label) || state.labels[u] === label) return;
    remember();
    state.labels[u] = label;
    refresh();
  }
  const splitOf = (u) => state.splits.findIndex((x) => x.u === u);
  /* A refused action says why in the header for a few seconds (state.notice, for tests). */
  let noticeTimer = null;
  function notify(msg) {
    const n = document.getElementById("notice");
    state.notice = msg;
    n.textContent = msg;
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { n.hidden = true; }, 6000);
  }
  function mergeUnits(units) {
    const set = new Set(units);
    if (set.size < 2) return;
    const split = Array.from(set).filter((u) => splitOf(u) >= 0);
    if (split.length) { /* SpikeInterface applies merges before splits, on the original ids: one or the other */
      notify(`unit ${split.map((u) => ids[u]).join(", ")} is split: unsplit it before merging`);
      return;
    }
    const keep = [];
    for (const g of state.groups) {
      if (g.some((u) => set.has(u))) g.forEach((u) => set.add(u));
      else keep.push(g);
    }
    keep.push(Array.from(set).sort((a, b) => ids[a] - ids[b]));
    remember();
    state.groups = keep;
    state.checked.clear();
    refresh();
  }
  function proposalStatus(p) {
    const g = groupOf(p.a);
    if (g >= 0 && state.groups[g].includes(p.b)) return "accepted";
    return state.rejected.includes(pairKey(p)) ? "rejected" : "open";
  }
  function acceptProposal(i) { const p = PROPOSALS[i]; if (p) mergeUnits([p.a, p.b]); }
  function rejectProposal(i) {
    const p = PROPOSALS[i];
    if (!p || state.rejected.includes(pairKey(p))) return;
    remember();
    state.rejected.push(pairKey(p));
    refresh();
  }
  function reopenProposal(i) {
    const p = PROPOSALS[i];
    if (!p) return;
    remember();
    state.rejected = state.rejected.filter((k) => k !== pairKey(p));
    const g = groupOf(p.a);
    if (g >= 0 && state.groups[g].includes(p.b)) {
      state.groups[g] = state.groups[g].filter((u) => u !== p.b);
      if (state.groups[g].length < 2) state.groups.splice(g, 1);
    }
    refresh();
  }
  function unmerge(gi) {
    remember();
    state.groups.splice(gi, 1);
    refresh();
  }
  /* Split the selected unit: the spikes inside the box drawn on its amplitude plot become one new unit, the
     rest another (a unit has at most one split; splitting it again replaces the box). */
  function splitUnit(u, box) {
    if (!all || u < 0 || !box) return;
    if (groupOf(u) >= 0) { notify(`unit ${ids[u]} is in a merge group: unmerge it before splitting`); return; }
    const sp = Object.assign({ u }, box), k = splitIndices(sp).length, n = all.off[u + 1] - all.off[u];
    if (k === 0 || k === n) { notify(`the box holds ${k} of the unit's ${n} spikes: nothing to split`); return; }
    remember();
    const i = splitOf(u);
    if (i >= 0) state.splits[i] = sp; else state.splits.push(sp);
    state.pending = null;
    refresh();
  }
  function unsplit(u) {
    const i = splitOf(u);
    if (i < 0) return;
    remember();
    state.splits.splice(i, 1);
    refresh();
  }
  /* new ids: merges take max id + 1, + 2, ...; then each split (ascending unit id) two more, the box's part first */
  function splitIds() {
    const out = new Map();
    let next = maxId + 1 + state.groups.length;
    state.splits.slice().sort((a, b) => ids[a.u] - ids[b.u]).forEach((x) => { out.set(x.u, [next, next + 1]); next += 2; });
    return out;
  }

  /* ---- exports ---- */
  function curationJSON() {
    const manual = [], sid = splitIds();
    ids.forEach((id, u) => { if (state.labels[u] !== "unsorted") manual.push({ unit_id: id, labels: { quality: [state.labels[u]] } }); });
    return {
      format_version: "2",
      unit_ids: ids.slice(),
      label_definitions: { quality: { name: "quality", label_options: ["good", "mua", "noise"], exclusive: true } },
      manual_labels: manual,
      removed: [],
      merges: state.groups.map((g, i) => ({ unit_ids: g.map((u) => ids[u]).sort((a, b) => a - b), new_unit_id: maxId + 1 + i })),
      splits: state.splits.slice().sort((a, b) => ids[a.u] - ids[b.u])
        .map((x) => ({ unit_id: ids[x.u], mode: "indices", indices: [splitIndices(x)], new_unit_ids: sid.get(x.u) })),
    };
  }
  /* JSON with one item per line, except arrays of plain values, which stay on one line. */
  function prettyJSON(o) {
    return JSON.stringify(o, null, 1).replace(/\[\s+([^\[\]{}]*?)\s+\]/g, (m, inner) => "[" + inner.split(/,\s+/).join(", ") + "]") + "\n";
  }
  function clusterGroupTSV() {
    return "cluster_id\tgroup\n" + ids.map((id, u) => `${id}\t${state.labels[u]}\n`).join("");
  }
  function download(name, text, type) {
    const blob = new Blob([text], { type }), a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 2000);
  }

  /* ---- header, tabs, notes ---- */
  const $ = (id) => document.getElementById(id);
  document.title = `boundsort report: ${D.folder}`;
  $("folder").textContent = D.folder;
  const dur = D.duration_s;
  $("summary").innerHTML = [
    `<b>${U}</b> units`, `<b>${D.n_spikes.toLocaleString("en")}</b> spikes`, `<b>${P.fmt(dur)}</b> s (${esc(D.duration_source)})`,
    `${P.fmt(D.fs_hz / 1000)} kHz`, `${D.channels.n} channels`, `boundsort ${esc(D.boundsort_version)}`,
  ].join(" · ");
  const notes = $("notes");
  if (D.notes.length) {
    notes.innerHTML = `<details><summary>${D.notes.length} note${D.notes.length > 1 ? "s" : ""} on what this folder lacks</summary><ul>${D.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul></details>`;
  }
  let activeTab = "units";
  const drawn = {};
  const TABS = Array.from(document.querySelectorAll("#tabs button")).map((b) => b.dataset.tab);
  function showTab(name) {
    if (!TABS.includes(name)) name = "units";
    activeTab = name;
    if (location.hash !== "#" + name) history.replaceState(null, "", "#" + name);
    document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
    document.querySelectorAll(".tab").forEach((s) => s.classList.toggle("active", s.id === "tab-" + name));
    if (name === "units") renderUnit();
    if (name === "drift") renderDrift();
    if (name === "traces") renderTraces();
    if (name === "run") renderRun();
    if (name === "curation") renderCuration();
  }
  document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
  window.addEventListener("hashchange", () => showTab(location.hash.slice(1)));
  $("undo").addEventListener("click", () => undo());
  $("redo").addEventListener("click", () => redo());
  function renderHistory() {
    $("undo").disabled = !undoStack.length;
    $("redo").disabled = !redoStack.length;
  }
  document.addEventListener("keydown", (ev) => {
    if (ev.target.matches("input, select, textarea") || !(ev.ctrlKey || ev.metaKey)) return;
    const k = ev.key.toLowerCase();
    if (k === "z" && !ev.shiftKey) undo();
    else if (k === "y" || (k === "z" && ev.shiftKey)) redo();
    else return;
    ev.preventDefault();
  });
  $("export-json").addEventListener("click", () => download("curation.json", prettyJSON(curationJSON()), "application/json"));
  $("export-tsv").addEventListener("click", () => download("cluster_group.tsv", clusterGroupTSV(), "text/tab-separated-values"));

  /* ---- unit table ---- */
  const tableCols = [{ key: "cluster_id", label: "id", kind: "num", digits: 0, get: (u) => ids[u] },
                     { key: "label", label: "label", kind: "text", get: (u) => state.labels[u] },
                     { key: "merge", label: "merge", kind: "num", digits: 0, get: (u) => { const g = groupOf(u); return g < 0 ? null : g + 1; } }];
  /* Short headers for the columns shown by default (the full name is the header's tooltip and the filter's key). */
  const SHORT = { unit_type: "type", KSLabel: "KS", qc_label: "qc", n_spikes: "spikes", fr_hz: "Hz", amp_mean: "amp",
                  y_um: "depth", isi_violations_ratio: "isi", presence_ratio: "presence", amplitude_cutoff: "cutoff" };
  for (const c of cols) {
    if (c.key === "group") continue; /* shown as the editable label */
    let key = c.key; /* a file's column named like one of ours (id, label, merge) keeps its file name */
    if (tableCols.some((t) => t.key.toLowerCase() === key.toLowerCase())) key = `${c.key}(${c.source})`;
    tableCols.push({ key, label: SHORT[key] || key, kind: c.kind, digits: c.digits, source: c.source, get: (u) => c.values[u] });
  }
  const reason = colByKey.get("reason"); /* cluster_unit_type.tsv: why the unit has its type (the type cell's tooltip) */
  /* The columns shown: a default set that fits the table's half of a 1400-px window; the "Columns" menu shows the
     others (every column stays usable in the filter), and the choice is remembered in localStorage. */
  const DEFAULT_SHOWN = ["cluster_id", "label", "merge", "unit_type", "n_spikes", "fr_hz", "y_um", "snr",
                         "isi_violations_ratio", "amplitude_cutoff"];
  const colStore = "boundsort-report-columns";
  let shownKeys = new Set(DEFAULT_SHOWN);
  try {
    const saved = JSON.parse(localStorage.getItem(colStore) || "null");
    if (Array.isArray(saved)) shownKeys = new Set(saved);
  } catch (e) { /* storage unavailable */ }
  if (!tableCols.some((c) => shownKeys.has(c.key))) shownKeys = new Set(DEFAULT_SHOWN);
  let shownCols = [];
  const thead = document.querySelector("#units thead"), tbody = document.querySelector("#units tbody");
  const wrap = document.querySelector(".table-wrap");
  /* Only the rows in view (plus a margin) are in the DOM: laying out 1,000 rows x 30 cells takes seconds on a slow
     machine, a screenful takes milliseconds. Rows have a fixed height and the columns fixed widths (from the
     longest value of each column), so the table does not move while it scrolls. */
  const ROW_H = 24;
  const widthOf = new Map(tableCols.map((c) => {
    let n = c.label.length + 2;
    if (c.key === "label") n = 8;
    else for (let u = 0; u < U; u++) { const v = c.get(u); if (v !== null && v !== undefined) n = Math.max(n, (c.kind === "num" ? P.fmt(v, c.digits) : String(v)).length); }
    return [c.key, Math.min(220, 14 + 7.6 * n)];
  }));
  const table = document.getElementById("units");
  function buildHeader() {
    shownCols = tableCols.filter((c) => shownKeys.has(c.key));
    const w = shownCols.map((c) => widthOf.get(c.key));
    table.style.width = (26 + w.reduce((a, b) => a + b, 0)) + "px";
    const old = table.querySelector("colgroup");
    if (old) old.remove();
    table.insertAdjacentHTML("afterbegin", "<colgroup><col style=\"width:26px\">" + w.map((x) => `<col style="width:${x}px">`).join("") + "</colgroup>");
    thead.innerHTML = "<tr><th class=\"chk\"><input type=\"checkbox\" id=\"check-all\" title=\"tick every shown unit\"></th>" +
      shownCols.map((c) => `<th data-key="${esc(c.key)}" title="${esc(c.key + (c.source ? " (" + c.source + ")" : ""))}">${esc(c.label)}<span class="arrow"></span></th>`).join("") + "</tr>";
  }
  buildHeader();
  const colMenu = $("col-menu");
  colMenu.innerHTML = tableCols.filter((c) => c.key !== "cluster_id").map((c) =>
    `<label title="${esc(c.source || "")}"><input type="checkbox" data-col="${esc(c.key)}"${shownKeys.has(c.key) ? " checked" : ""}> ${esc(c.key)}</label>`).join("") +
    "<button id=\"col-default\" class=\"small\">default columns</button>";
  $("col-btn").addEventListener("click", () => { colMenu.hidden = !colMenu.hidden; });
  function setColumns(keys) {
    shownKeys = new Set(keys);
    shownKeys.add("cluster_id");
    try { localStorage.setItem(colStore, JSON.stringify([...shownKeys])); } catch (e) { /* ignore */ }
    colMenu.querySelectorAll("input[data-col]").forEach((i) => { i.checked = shownKeys.has(i.dataset.col); });
    buildHeader();
    bindHeader();
    renderRows();
  }
  colMenu.addEventListener("change", (ev) => {
    const k = ev.target.dataset && ev.target.dataset.col;
    if (!k) return;
    const next = new Set(shownKeys);
    if (ev.target.checked) next.add(k); else next.delete(k);
    setColumns([...next]);
  });
  $("col-default").addEventListener("click", () => setColumns(DEFAULT_SHOWN));
  /* The header's handlers (sorting, tick all), bound again whenever the header is rebuilt. */
  function bindHeader() {
    thead.querySelectorAll("th[data-key]").forEach((th) => th.addEventListener("click", () => {
      const k = th.dataset.key;
      if (state.sortKey === k) state.sortDir = -state.sortDir; else { state.sortKey = k; state.sortDir = 1; }
      renderRows();
    }));
    $("check-all").addEventListener("change", (ev) => {
      for (const u of order) { if (ev.target.checked) state.checked.add(u); else state.checked.delete(u); }
      renderRows();
    });
  }

  /* Filter: space-separated terms, all must hold. "key>v", "key<=v", "key=v", "key!=v" on a column;
     a bare number is a cluster id; a bare word matches a text column (label, KSLabel, qc_label, unit_type).
     Hidden columns filter too. */
  function parseFilter(text) {
    const terms = [], errors = [];
    for (const tok of text.trim().split(/\s+/).filter((s) => s)) {
      const m = tok.match(/^([A-Za-z_][\w.]*)(>=|<=|!=|==|=|>|<)(.+)$/);
      if (m) {
        const c = tableCols.find((c) => c.key.toLowerCase() === m[1].toLowerCase());
        if (!c) { errors.push(`no column '${m[1]}'`); continue; }
        const op = m[2], raw = m[3], num = Number(raw);
        terms.push((u) => {
          const v = c.get(u);
          if (v === null || v === undefined) return op === "!=";
          if (c.kind === "num" && !Number.isNaN(num)) {
            return op === ">" ? v > num : op === "<" ? v < num : op === ">=" ? v >= num : op === "<=" ? v <= num : op === "!=" ? v !== num : v === num;
          }
          const eq = String(v).toLowerCase() === raw.toLowerCase();
          return op === "!=" ? !eq : (op === "=" || op === "==") ? eq : false;
        });
      } else if (/^\d+$/.test(tok)) {
        const id = Number(tok);
        terms.push((u) => ids[u] === id);
      } else {
        const w = tok.toLowerCase();
        const textCols = tableCols.filter((c) => c.kind === "text");
        terms.push((u) => textCols.some((c) => String(c.get(u) || "").toLowerCase() === w));
      }
    }
    return { test: (u) => terms.every((f) => f(u)), errors };
  }

  let order = [];
  function computeOrder() {
    const f = parseFilter(state.filter);
    $("filter").classList.toggle("bad", f.errors.length > 0);
    $("filter").title = f.errors.join("; ");
    const c = tableCols.find((c) => c.key === state.sortKey) || tableCols[0];
    const rows = [];
    for (let u = 0; u < U; u++) if ((!state.labelFilter || state.labels[u] === state.labelFilter) && f.test(u)) rows.push(u);
    const dir = state.sortDir;
    rows.sort((a, b) => {
      const va = c.get(a), vb = c.get(b);
      const na = va === null || va === undefined || (typeof va === "number" && Number.isNaN(va));
      const nb = vb === null || vb === undefined || (typeof vb === "number" && Number.isNaN(vb));
      if (na || nb) return na === nb ? a - b : na ? 1 : -1; /* missing values last */
      if (va < vb) return -dir;
      if (va > vb) return dir;
      return a - b;
    });
    order = rows;
  }
  function cellHTML(c, u) {
    const v = c.get(u);
    if (c.key === "label") return `<td><span class="chip" style="background:${LABEL_COLOR[v]}">${v}</span></td>`;
    if (v === null || v === undefined || (typeof v === "number" && Number.isNaN(v))) return "<td class=\"na\"></td>";
    if (c.kind === "num") return `<td class="num">${P.fmt(v, c.digits)}</td>`;
    if (c.key === "unit_type") return `<td class="utype ut-${esc(v)}" title="${esc(reason ? reason.values[u] || "" : "")}">${esc(v)}</td>`;
    return `<td>${esc(v)}</td>`;
  }
  let painted = [-1, -1];
  function paint(force) {
    const top = Math.max(0, wrap.scrollTop - 26), h = wrap.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_H) - 15), last = Math.min(order.length, Math.ceil((top + h) / ROW_H) + 15);
    if (!force && first === painted[0] && last === painted[1]) return;
    painted = [first, last];
    const pad = (n) => `<tr class="pad"><td colspan="${shownCols.length + 1}" style="height:${n * ROW_H}px"></td></tr>`;
    const parts = [pad(first)];
    for (let i = first; i < last; i++) {
      const u = order[i];
      parts.push(`<tr data-u="${u}"${u === state.selected ? " class=\"sel\"" : ""}><td class="chk"><input type="checkbox"${state.checked.has(u) ? " checked" : ""}></td>`);
      for (const c of shownCols) parts.push(cellHTML(c, u));
      parts.push("</tr>");
    }
    parts.push(pad(order.length - last));
    tbody.innerHTML = parts.join("");
  }
  wrap.addEventListener("scroll", () => requestAnimationFrame(() => paint(false)));
  function renderRows() {
    computeOrder();
    paint(true);
    thead.querySelectorAll("th[data-key]").forEach((th) => {
      th.querySelector(".arrow").textContent = th.dataset.key === state.sortKey ? (state.sortDir > 0 ? " ▲" : " ▼") : "";
    });
    $("row-count").textContent = `${order.length} of ${U} units`;
    $("merge-btn").disabled = state.checked.size < 2;
    $("merge-btn").textContent = `Merge ticked (${state.checked.size})`;
  }
  /* Scroll the table so that unit u's row is in view (when it passes the filter). */
  function reveal(u) {
    const i = order.indexOf(u);
    if (i < 0) return;
    const head = thead.offsetHeight, y = i * ROW_H;
    if (y < wrap.scrollTop) wrap.scrollTop = y;
    else if (y + ROW_H > wrap.scrollTop + wrap.clientHeight - head) wrap.scrollTop = y + ROW_H - wrap.clientHeight + head;
    paint(false);
  }
  tbody.addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr");
    if (!tr || tr.dataset.u === undefined) return;
    const u = Number(tr.dataset.u);
    if (ev.target.matches("input[type=checkbox]")) {
      if (ev.target.checked) state.checked.add(u); else state.checked.delete(u);
      $("merge-btn").disabled = state.checked.size < 2;
      $("merge-btn").textContent = `Merge ticked (${state.checked.size})`;
      return;
    }
    select(u);
  });
  bindHeader();
  $("filter").addEventListener("input", (ev) => { state.filter = ev.target.value; renderRows(); });
  $("label-filter").addEventListener("change", (ev) => { state.labelFilter = ev.target.value; renderRows(); });
  $("merge-btn").addEventListener("click", () => mergeUnits(Array.from(state.checked)));
  $("clear-checks").addEventListener("click", () => { state.checked.clear(); renderRows(); });

  function select(u) {
    if (u < 0 || u >= U) return;
    state.selected = u;
    state.pending = null;
    reveal(u);
    tbody.querySelectorAll("tr.sel").forEach((tr) => tr.classList.remove("sel"));
    const tr = tbody.querySelector(`tr[data-u="${u}"]`);
    if (tr) tr.classList.add("sel");
    renderUnit();
  }
  document.addEventListener("keydown", (ev) => {
    if (ev.target.matches("input, select, textarea") || ev.ctrlKey || ev.metaKey || ev.altKey || activeTab !== "units") return;
    const k = ev.key;
    if (k === "ArrowDown" || k === "ArrowUp" || k === "j" || k === "k") {
      const i = order.indexOf(state.selected), d = k === "ArrowDown" || k === "j" ? 1 : -1;
      const ni = i < 0 ? 0 : Math.min(order.length - 1, Math.max(0, i + d));
      if (order.length) select(order[ni]);
      ev.preventDefault();
    } else if (k === "g" || k === "m" || k === "n" || k === "u") {
      setLabel(state.selected, { g: "good", m: "mua", n: "noise", u: "unsorted" }[k]);
    } else if (k === "s" && state.pending && state.pending.u === state.selected) {
      splitUnit(state.selected, state.pending);
    } else if (k === "x" && state.selected >= 0) {
      if (state.checked.has(state.selected)) state.checked.delete(state.selected); else state.checked.add(state.selected);
      renderRows();
    }
  });

  /* ---- selected unit ---- */
  function similarOf(u) {
    const out = [];
    for (let k = 0; k < sim.n; k++) {
      const v = sim.unit[u * sim.n + k];
      if (v >= 0) out.push({ v, score: sim.score[u * sim.n + k] });
    }
    return out;
  }
  function renderUnitHead() {
    const u = state.selected;
    if (u < 0) return;
    $("unit-title").innerHTML = `Unit ${ids[u]} <span class="chip" style="background:${LABEL_COLOR[state.labels[u]]}">${state.labels[u]}</span>`;
    document.querySelectorAll("#label-buttons button").forEach((b) => b.classList.toggle("on", b.dataset.label === state.labels[u]));
    const g = groupOf(u);
    const bits = [];
    const ks = colVal("KSLabel", u), qc = colVal("qc_label", u);
    if (ks) bits.push(`KS: ${esc(ks)}`);
    if (qc) bits.push(`qc: ${esc(qc)}`);
    const ut = colVal("unit_type", u);
    if (ut) bits.push(`type: <span class="ut-${esc(ut)}" title="${esc(colVal("reason", u) || "")}">${esc(ut)}</span> (${esc(colVal("reason", u) || "")})`);
    bits.push(`${D.columns.find((c) => c.key === "n_spikes").values[u]} spikes`, `${P.fmt(colVal("fr_hz", u))} Hz`);
    const x = colVal("x_um", u), y = colVal("y_um", u);
    if (x !== null) bits.push(`at (${P.fmt(x, 1)}, ${P.fmt(y, 1)}) µm`);
    if (tpl.peak[u] >= 0) bits.push(`peak channel ${tpl.peak[u]}`);
    if (g >= 0) bits.push(`merge group ${g + 1}: ${state.groups[g].map((v) => ids[v]).join(" + ")} <button class="small" id="unmerge">unmerge</button>`);
    if (splitOf(u) >= 0) bits.push(`split into units ${splitIds().get(u).join(" and ")}`);
    if (ringFull.has(u)) bits.push("<span class=\"warn\">correlograms miss pairs (bursts over 256 spikes in 50 ms)</span>");
    $("unit-meta").innerHTML = bits.join(" · ");
    if (g >= 0) $("unmerge").addEventListener("click", () => unmerge(g));
  }
  function renderUnit() {
    const u = state.selected;
    if (u < 0 || activeTab !== "units") return;
    renderUnitHead();
    drawTemplate(u);
    drawACG(u);
    drawAmplitudes(u);
    drawPositions(u, unitSpikes(u));
    drawCCGs(u);
  }
  document.querySelectorAll("#label-buttons button").forEach((b) => b.addEventListener("click", () => setLabel(state.selected, b.dataset.label)));

  function drawTemplate(u) {
    const cv = $("c-template");
    $("template-note").textContent = "";
    if (!tpl.wave || tpl.peak[u] < 0) { P.message(cv, "no template for this unit"); return; }
    const nc = T.n_chan, nt = T.nt, ch = [];
    for (let k = 0; k < nc; k++) { const c = tpl.chans[u * nc + k]; if (c >= 0) ch.push({ c, k }); }
    const cx = D.channels.x, cy = D.channels.y;
    let xs = ch.map((o) => cx[o.c]), ys = ch.map((o) => cy[o.c]);
    const ux = Array.from(new Set(xs)).sort((a, b) => a - b), uy = Array.from(new Set(ys)).sort((a, b) => a - b);
    let dx = Infinity, dy = Infinity;
    for (let i = 1; i < ux.length; i++) dx = Math.min(dx, ux[i] - ux[i - 1]);
    for (let i = 1; i < uy.length; i++) dy = Math.min(dy, uy[i] - uy[i - 1]);
    if (!Number.isFinite(dy)) dy = Number.isFinite(dx) ? dx : 20;
    if (!Number.isFinite(dx)) dx = Math.max(dy * 1.6, 30);
    const wx = dx * 0.85;
    const xr = [Math.min(...xs) - wx * 0.6, Math.max(...xs) + wx * 0.6], yr = [Math.min(...ys) - dy, Math.max(...ys) + dy];
    const f = P.frame(cv, { xr, yr, xlabel: "x (µm)", ylabel: "depth (µm)", grid: false });
    const ctx = f.ctx;
    P.clip(f);
    ctx.fillStyle = "#ddd";
    for (let c = 0; c < D.channels.n; c++) {
      if (D.channels.shank[c] !== D.channels.shank[tpl.peak[u]]) continue;
      const X = f.X(cx[c]), Y = f.Y(cy[c]);
      ctx.fillRect(X - 3, Y - 3, 6, 6);
    }
    let mx = 0;
    const scale = tpl.scale[u];
    for (const o of ch) for (let s = 0; s < nt; s++) mx = Math.max(mx, Math.abs(tpl.wave[(u * nc + o.k) * nt + s]));
    const pxPerUnit = mx > 0 ? Math.abs(f.Y(0) - f.Y(dy)) * 1.3 / mx : 1; /* the largest deflection spans 1.3 pitches */
    const wpx = Math.abs(f.X(wx) - f.X(0));
    for (const o of ch) {
      const X0 = f.X(cx[o.c]) - wpx / 2, Y0 = f.Y(cy[o.c]), peak = o.c === tpl.peak[u];
      ctx.strokeStyle = peak ? unitColor(u) : "#555";
      ctx.lineWidth = peak ? 2 : 1.2;
      ctx.beginPath();
      for (let s = 0; s < nt; s++) {
        const v = tpl.wave[(u * nc + o.k) * nt + s];
        const X = X0 + s / (nt - 1) * wpx, Y = Y0 - v * pxPerUnit;
        if (s) ctx.lineTo(X, Y); else ctx.moveTo(X, Y);
      }
      ctx.stroke();
      ctx.fillStyle = "#999";
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.fillText(String(o.c), X0, Y0 + 3);
    }
    ctx.restore();
    $("template-note").textContent = `· peak channel ${tpl.peak[u]}, largest |value| ${P.fmt(mx * scale)} (template @ whitening_mat_inv)`;
    P.attachHit(cv, (x, y) => {
      let best = null, bd = Infinity;
      for (const o of ch) { const d = Math.hypot(f.X(cx[o.c]) - x, f.Y(cy[o.c]) - y); if (d < bd) { bd = d; best = o; } }
      if (!best || bd > 40) return null;
      let lo = 0, hi = 0;
      for (let s = 0; s < nt; s++) { const v = tpl.wave[(u * nc + best.k) * nt + s] * scale; lo = Math.min(lo, v); hi = Math.max(hi, v); }
      return `channel ${best.c} at (${cx[best.c]}, ${cy[best.c]}) µm\npeak-to-peak ${P.fmt(hi - lo)}`;
    });
  }

  function drawACG(u) {
    const nb = D.acg.n_bins, bw = D.acg.bin_ms, c = new Uint32Array(2 * nb);
    for (let i = 0; i < nb; i++) { const v = acg[u * nb + i]; c[nb + i] = v; c[nb - 1 - i] = v; }
    P.bars($("c-acg"), { edges0: -nb * bw, binw: bw, counts: c, color: unitColor(u), xlabel: "lag (ms)", ylabel: "spike pairs", unit: "ms", shade: [[-1.5, 1.5, "rgba(220,0,0,0.08)"]] });
  }

  /* Amplitudes over time: every spike when the page holds them (else the subsample). A drag draws a box
     (state.pending); "split" makes it the unit's split, drawn in red with the rest in the unit's colour. */
  function drawAmplitudes(u) {
    const cv = $("c-amp"), note = $("amp-note");
    note.textContent = "";
    if (!sp.amp || !S.have_amp) { P.message(cv, "amplitudes.npy absent"); return; }
    const n = D.columns.find((c) => c.key === "n_spikes").values[u];
    const s = all ? unitAll(u) : unitSpikes(u), lo = all ? all.lo[u] : sp.ampLo[u], hi = all ? all.hi[u] : sp.ampHi[u];
    const pad = (hi - lo) * 0.05 || 1, si = splitOf(u);
    const box = state.pending && state.pending.u === u ? state.pending : si >= 0 ? state.splits[si] : null;
    let series = [{ x: s.t, y: s.amp, color: unitColor(u), size: all ? 2 : 3, alpha: 0.6 }], k = 0;
    if (box) {
      const inb = new Uint8Array(s.n);
      for (const i of splitIndices(box)) inb[i] = 1;
      const part = (want) => {
        const x = [], y = [];
        for (let i = 0; i < s.n; i++) if (inb[i] === want) { x.push(s.t[i]); y.push(s.amp[i]); }
        return { x, y };
      };
      const a = part(1), b = part(0);
      k = a.x.length;
      series = [Object.assign(b, { color: unitColor(u), size: 2, alpha: 0.5 }), Object.assign(a, { color: P.PALETTE[1], size: 2, alpha: 0.7 })];
    }
    cv._bsFrame = P.scatter(cv, {
      series, xr: [0, dur], yr: [Math.min(0, lo - pad), hi + pad], xlabel: "time (s)", ylabel: "amplitude",
      tip: (j, i) => `t ${P.fmt(series[j].x[i])} s, amplitude ${P.fmt(series[j].y[i])}`,
    });
    const bits = [`· ${s.n} of ${n} spikes shown`];
    if (!all) bits.push("(the page does not hold every spike: no split; see the notes)");
    else if (state.pending && state.pending.u === u)
      bits.push(`· box: ${k} spikes <button class="small" id="split-go" title="split the unit: the box's spikes and the rest (s)">split</button> <button class="small plain" id="split-clear">clear</button>`);
    else if (si >= 0) {
      const nid = splitIds().get(u);
      bits.push(`· split: ${k} spikes → unit ${nid[0]}, ${s.n - k} → unit ${nid[1]} <button class="small plain" id="split-undo">unsplit</button>`);
    } else bits.push("· drag a box to split the unit");
    note.innerHTML = bits.join(" ");
    if ($("split-go")) $("split-go").addEventListener("click", () => splitUnit(u, state.pending));
    if ($("split-clear")) $("split-clear").addEventListener("click", () => { state.pending = null; drawAmplitudes(u); });
    if ($("split-undo")) $("split-undo").addEventListener("click", () => unsplit(u));
    if (!all) return;
    P.boxSelect(cv, (r) => {
      const v = state.selected;
      if (!r) { state.pending = null; drawAmplitudes(v); return; }
      const a = all.lo[v], b = all.hi[v], qa = (y) => (b > a ? (y - a) / (b - a) * 254 : y >= a ? 127 : -1);
      state.pending = { u: v, qt0: Math.max(0, Math.ceil(r.x0 / S.t_hi * 65534)), qt1: Math.min(65534, Math.floor(r.x1 / S.t_hi * 65534)),
                        qa0: Math.max(0, Math.ceil(qa(r.y0))), qa1: Math.min(254, Math.floor(qa(r.y1))) };
      drawAmplitudes(v);
    });
  }

  function drawPositions(u, s) {
    const cv = $("c-pos");
    if (!S.have_pos) { P.message(cv, "spike_positions.npy absent"); return; }
    const series = [], sims = similarOf(u).slice(0, 4);
    for (const o of sims) {
      const q = unitSpikes(o.v);
      series.push({ x: q.x, y: q.y, color: unitColor(o.v), size: 2, alpha: 0.35, label: `unit ${ids[o.v]}` });
    }
    series.push({ x: s.x, y: s.y, color: unitColor(u), size: 3, alpha: 0.8, label: `unit ${ids[u]}` });
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (let i = 0; i < s.n; i++) if (Number.isFinite(s.x[i]) && Number.isFinite(s.y[i])) {
      x0 = Math.min(x0, s.x[i]); x1 = Math.max(x1, s.x[i]); y0 = Math.min(y0, s.y[i]); y1 = Math.max(y1, s.y[i]);
    }
    if (!Number.isFinite(x0)) { P.message(cv, "no finite positions for this unit"); return; }
    const m = 40;
    P.scatter(cv, {
      series, xr: [x0 - m, x1 + m], yr: [y0 - m, y1 + m], xlabel: "x (µm)", ylabel: "depth (µm)", legend: true,
      background: (f) => {
        f.ctx.fillStyle = "#e6e6e6";
        for (let c = 0; c < D.channels.n; c++) f.ctx.fillRect(f.X(D.channels.x[c]) - 4, f.Y(D.channels.y[c]) - 4, 8, 8);
      },
    });
  }

  function ccgOf(u, v) { /* counts for lag = t_v - t_u, 1 ms bins over [-half, half) */
    const a = Math.min(u, v), b = Math.max(u, v), i = pairIndex.get(a * 1048576 + b), nb = D.ccg.n_bins;
    if (i === undefined) return null;
    const c = ccgCounts.subarray(i * nb, (i + 1) * nb);
    if (a === u) return c;
    const r = new Uint32Array(nb); /* reversed lag: bin edges mirror (a lag exactly on an edge may shift by one bin) */
    for (let k = 0; k < nb; k++) r[k] = c[nb - 1 - k];
    return r;
  }
  function drawCCGs(u) {
    const box = $("ccgs");
    const list = similarOf(u);
    box.innerHTML = list.length ? "" : "<p class=\"na\">no similar units</p>";
    const scoreName = D.similar.source && D.similar.source.startsWith("similar_templates") ? "similarity" : "distance (µm)";
    for (const o of list) {
      const fig = document.createElement("figure");
      fig.className = "ccg";
      const g = groupOf(u), same = g >= 0 && state.groups[g].includes(o.v);
      const sc = scoreName === "similarity" ? P.fmt(o.score) : P.fmt(-o.score);
      fig.innerHTML = `<figcaption><a href="#" data-v="${o.v}">unit ${ids[o.v]}</a> <span class="chip" style="background:${LABEL_COLOR[state.labels[o.v]]}">${state.labels[o.v]}</span> ${scoreName} ${sc}
        <button class="small" data-merge="${o.v}"${same ? " disabled" : ""}>${same ? "merged" : "merge"}</button></figcaption><canvas></canvas>`;
      box.appendChild(fig);
      const c = ccgOf(u, o.v);
      const cv = fig.querySelector("canvas");
      if (!c) { P.message(cv, "not computed"); continue; }
      P.bars(cv, { edges0: -D.ccg.half_ms, binw: D.ccg.bin_ms, counts: c, color: unitColor(o.v), xlabel: `lag t(${ids[o.v]}) - t(${ids[u]}) (ms)`, unit: "ms", left: 40, shade: [[-1, 1, "rgba(220,0,0,0.08)"]] });
    }
    box.querySelectorAll("a[data-v]").forEach((a) => a.addEventListener("click", (ev) => { ev.preventDefault(); select(Number(a.dataset.v)); }));
    box.querySelectorAll("button[data-merge]").forEach((b) => b.addEventListener("click", () => mergeUnits([u, Number(b.dataset.merge)])));
  }

  /* ---- drift ---- */
  function renderDrift() {
    const M = D.drift_map, cv = $("c-drift");
    $("drift-source").textContent = M ? `Source: ${M.source}. Colour: mean |amplitude| of the spikes in a cell (${P.fmt(M.amp_lo)} to ${P.fmt(M.amp_hi)}); faint cells hold few spikes.` : "";
    if (!M) { P.message(cv, "no drift map (no driftmap.npy, spike_positions.npy or templates)"); }
    else {
      const nx = M.nt, ny = M.nd, cnt = typed(M.count), amp = typed(M.amp), rgba = new Uint8ClampedArray(nx * ny * 4);
      const cells = M.layout === "sparse" ? typed(M.cells) : null;
      const n = cells ? cells.length : nx * ny;
      const sorted = Array.from(cnt).filter((v) => v > 0).sort((a, b) => a - b);
      const c98 = sorted.length ? sorted[Math.floor(0.98 * (sorted.length - 1))] : 1;
      const full = new Uint32Array(nx * ny);
      for (let i = 0; i < n; i++) {
        const cell = cells ? cells[i] : i, k = cnt[i];
        if (!k) continue;
        full[cell] = k;
        const col = P.viridis(amp[i] / 255), a = Math.min(1, 0.25 + 0.75 * Math.log1p(k) / Math.log1p(c98));
        rgba[cell * 4] = col[0]; rgba[cell * 4 + 1] = col[1]; rgba[cell * 4 + 2] = col[2]; rgba[cell * 4 + 3] = 255 * a;
      }
      const showMotion = $("show-motion").checked && D.motion;
      const f = P.heatmap(cv, {
        nx, ny, rgba, xr: [M.t0, M.t1], yr: [M.d0, M.d1], xlabel: "time (s)", ylabel: "depth (µm)", right: 70,
        overlay: (f) => {
          if (!showMotion) return;
          const mo = D.motion, um = typed(mo.um);
          f.ctx.lineWidth = 1.5;
          for (let b = 0; b < mo.nb; b++) {
            f.ctx.strokeStyle = "rgba(230,30,30,0.9)";
            f.ctx.beginPath();
            for (let i = 0; i < mo.nt; i++) {
              const X = f.X(mo.t_s[i]), Y = f.Y(mo.depth_um[b] + um[i * mo.nb + b]);
              if (i) f.ctx.lineTo(X, Y); else f.ctx.moveTo(X, Y);
            }
            f.ctx.stroke();
          }
        },
        tip: (ix, iy) => {
          const cell = iy * nx + ix, t0 = M.t0 + ix * (M.t1 - M.t0) / nx, d0 = M.d0 + iy * (M.d1 - M.d0) / ny;
          return `t ${P.fmt(t0)}..${P.fmt(t0 + (M.t1 - M.t0) / nx)} s, depth ${P.fmt(d0)}..${P.fmt(d0 + (M.d1 - M.d0) / ny)} µm\n${full[cell]} spikes`;
        },
      });
      P.colorbar(f, M.amp_lo, M.amp_hi, "|amplitude|", P.viridis);
    }
    const mv = $("c-motion");
    if (!D.motion) { P.message(mv, "drift.npy absent: no estimated motion"); return; }
    const mo = D.motion, um = typed(mo.um), series = [];
    for (let b = 0; b < mo.nb; b++) {
      const y = new Float64Array(mo.nt);
      for (let i = 0; i < mo.nt; i++) y[i] = um[i * mo.nb + b];
      const c = P.viridis(mo.nb > 1 ? b / (mo.nb - 1) : 0.5);
      series.push({ x: mo.t_s, y, color: `rgb(${c[0] | 0},${c[1] | 0},${c[2] | 0})`,
                    label: `block at ${P.fmt(mo.depth_um[b])} µm${mo.shank[b] ? ` (shank ${mo.shank[b]})` : ""}` });
    }
    /* same time axis as the drift map above */
    P.lines(mv, { series, xr: M ? [M.t0, M.t1] : null, xlabel: "time (s)", ylabel: "estimated motion (µm)", legend: mo.nb <= 8 });
  }
  $("show-motion").addEventListener("change", () => renderDrift());

  /* ---- run summary ---- */
  function renderRun() {
    const R = D.run, box = $("run-table");
    if (!R) {
      box.innerHTML = "<p class=\"na\">run_summary.json absent: no run summary.</p>";
      P.message($("c-stage-mem"), "no run summary");
      P.message($("c-stage-time"), "no run summary");
    } else {
      const st = R.stages || [];
      const head = [`boundsort ${esc(R.boundsort_version || "?")}`, `total ${P.fmt(R.total_wall_s)} s`, `peak RSS ${P.fmtBytes(R.peak_rss_bytes)}`,
                    `budget ${R.budget_bytes ? P.fmtBytes(R.budget_bytes) : "none"}`].join(" · ");
      const A = R.artifacts;
      const art = !A ? "" : !A.removal ? "<p>artifacts: not removed (--no-artifact-removal)</p>" :
        `<p>artifacts: ${A.periods} period${A.periods === 1 ? "" : "s"} blanked (${P.fmt(A.blanked_s, 3)} s, listed in artifacts.tsv); about ${P.fmt(A.expected_lost_spikes, 0)} spikes of the sorted units fell in them and are lost</p>`;
      const S = R.phase_shift;
      const ps = !S ? "" : S.applied ? `<p>phase shift: each channel's ADC sampling delay removed (up to ${P.fmt(S.max_delay_samples, 3)} samples)</p>` :
        `<p>phase shift: none (${esc(S.why_not || "")})</p>`;
      const B = R.bad_channels, BL = R.bad_channel_list || [];
      const bad = !B ? "" : `<p>bad channels (--bad-channels ${esc(B.mode || "")}): ${B.dead} dead, ${B.noisy} noisy, ${B.out} out of the brain of ${B.examined} examined; ${B.interpolated} interpolated, ${B.removed} removed${BL.length ? ": " + BL.map((c) => `${c.channel} (column ${c.column}, ${esc(c.label || "")}, ${esc(c.action || "")})`).join(", ") : ""}</p>`;
      const dn = R.denoise ? `<p>denoising: ${esc(R.denoise)}</p>` : "";
      box.innerHTML = `<p>${head}</p>${ps}${dn}${bad}${art}<table class="plain"><thead><tr><th>stage</th><th>wall (s)</th><th>planned peak</th><th>tracked peak</th><th>tracked / planned</th><th>RSS peak</th><th>disk planned</th><th>disk written</th><th>strategy</th></tr></thead><tbody>` +
        st.map((s) => {
          const r = s.planned_peak_bytes > 0 && s.tracked_peak_bytes !== null ? s.tracked_peak_bytes / s.planned_peak_bytes : null;
          return `<tr><td>${esc(s.name || "")}</td><td class="num">${P.fmt(s.wall_s, 2)}</td><td class="num">${P.fmtBytes(s.planned_peak_bytes)}</td><td class="num">${P.fmtBytes(s.tracked_peak_bytes)}</td>` +
            `<td class="num${r !== null && r > 1 ? " over" : ""}">${r === null ? "" : P.fmt(r, 2)}</td><td class="num">${P.fmtBytes(s.rss_peak_bytes)}</td>` +
            `<td class="num">${s.disk_planned_bytes == null ? "" : P.fmtBytes(s.disk_planned_bytes)}</td><td class="num">${s.disk_written_bytes == null || s.disk_written_bytes < 0 ? "" : P.fmtBytes(s.disk_written_bytes)}</td><td>${esc(s.strategy || "")}</td></tr>`;
        }).join("") + "</tbody></table>";
      const peak = Math.max(0, ...st.map((s) => Math.max(s.planned_peak_bytes || 0, s.tracked_peak_bytes || 0, s.rss_peak_bytes || 0)));
      drawStageBars($("c-stage-mem"), st, onScale(R.budget_bytes, peak, "stage-note"));
      const t = new Float64Array(st.map((s) => s.wall_s || 0));
      drawHBars($("c-stage-time"), st.map((s) => s.name || "?"), [{ v: t, color: "#1f77b4", label: "wall time" }], (v) => `${P.fmt(v)} s`, "wall time (s)");
    }
    const M = D.mem, mc = $("c-mem");
    if (!M) {
      P.message(mc, R && R.mem_trace ? `memory trace ${R.mem_trace} not read: see the notes at the top` : "no memory trace (sort --mem-trace FILE records one)");
      return;
    }
    const x1 = M.t_s.length > 1 ? 2 * M.t_s[M.t_s.length - 1] - M.t_s[M.t_s.length - 2] : M.t_s[0] + 1;
    const series = M.series.map((s, i) => ({ label: s.tag, y: s.bytes, color: s.tag === "other" ? "#bbb" : P.PALETTE[i % P.PALETTE.length] }));
    const budget = onScale(R && R.budget_bytes, M.peak_bytes, "mem-note");
    const hl = budget ? [[budget, "#d62728", "budget"]] : [];
    const f = P.stacked(mc, { x: M.t_s, x1, series, xlabel: "time (s)", ylabel: "tracked memory", yfmt: P.fmtBytes, hlines: hl, right: 190 });
    P.legend({ ctx: f.ctx, px: f.px + f.pw + 190 - 10, pw: 0, py: f.py }, series.slice().reverse());
  }

  /* The memory budget, when it is drawn: only if it is within 3x the largest value, otherwise everything measured
     would be squeezed against the axis; the caption (element noteId) then says where it is. */
  function onScale(budget, peak, noteId) {
    $(noteId).textContent = "";
    if (!budget) return 0;
    if (budget <= 3 * peak) return budget;
    $(noteId).textContent = `· budget ${P.fmtBytes(budget)}, ${P.fmt(budget / Math.max(1, peak), 0)}x the largest value: not drawn`;
    return 0;
  }

  /* Horizontal grouped bars: names down the side, one bar per series. */
  function drawHBars(cv, names, series, vfmt, xlabel, budget) {
    let mx = budget || 0;
    for (const s of series) for (const v of s.v) mx = Math.max(mx, v || 0);
    const ctx = cv.getContext("2d");
    ctx.font = "11px system-ui, sans-serif";
    const left = Math.min(170, 12 + Math.max(40, ...names.map((n) => ctx.measureText(n).width)));
    const f = P.frame(cv, { xr: [0, mx * 1.05 || 1], yr: [0, names.length], xlabel, left, xbytes: vfmt === P.fmtBytes, yticks: false, right: series.length > 1 || budget ? 120 : 10 });
    const rowH = f.ph / Math.max(1, names.length), bh = Math.min(14, (rowH - 4) / series.length);
    f.ctx.textAlign = "right";
    f.ctx.textBaseline = "middle";
    names.forEach((n, i) => {
      const y0 = f.py + i * rowH + (rowH - bh * series.length) / 2;
      f.ctx.fillStyle = "#333";
      f.ctx.fillText(n, f.px - 6, f.py + (i + 0.5) * rowH);
      series.forEach((s, k) => {
        const v = s.v[i];
        if (!(v > 0)) return;
        f.ctx.fillStyle = s.color;
        f.ctx.fillRect(f.px, y0 + k * bh, f.X(v) - f.px, bh - 1);
      });
    });
    if (budget) P.dashed(f.ctx, f.X(budget), f.py, f.X(budget), f.py + f.ph, "#d62728");
    if (series.length > 1 || budget) P.legend({ ctx: f.ctx, px: f.px + f.pw + 120 - 10, pw: 0, py: f.py }, series.concat(budget ? [{ label: "budget", color: "#d62728" }] : []));
    P.attachHit(cv, (x, y) => {
      const i = Math.floor((y - f.py) / rowH);
      if (i < 0 || i >= names.length) return null;
      return names[i] + "\n" + series.map((s) => `${s.label}: ${s.v[i] > 0 ? vfmt(s.v[i]) : "-"}`).join("\n");
    });
  }
  function drawStageBars(cv, st, budget) {
    const get = (k) => new Float64Array(st.map((s) => (typeof s[k] === "number" ? s[k] : NaN)));
    drawHBars(cv, st.map((s) => s.name || "?"), [
      { v: get("planned_peak_bytes"), color: "#9ecae1", label: "planned peak" },
      { v: get("tracked_peak_bytes"), color: "#3182bd", label: "tracked peak" },
      { v: get("rss_peak_bytes"), color: "#fd8d3c", label: "RSS peak" },
    ], P.fmtBytes, "memory per stage", budget);
  }

  /* ---- traces tab ----
     D.traces: n stretches of n_t samples, int8 x scale[i] µV, channel-major; spikes (stretch, sample offset, unit).
     Shown: nvis channels in depth order (y, then x) centred on the selected unit's peak channel; a unit's spike is
     drawn over [t - 1 ms, t + 1 ms) on its "loud" channels: those of its template whose peak-to-peak is at least
     a quarter of the largest. Gain: the channel spacing per 8 x the visible traces' median |x| / 0.6745 (times the
     user's factor). Selecting a unit shows the stretch with most of its spikes. */
  const TR = D.traces;
  const trv = { stretch: 0, gain: 1, hits: [], unit: -1 };
  const trData = TR ? typed(TR.data) : null, trScale = TR ? typed(TR.scale) : null;
  const trSp = TR ? { s: typed(TR.spike_stretch), t: typed(TR.spike_t), u: typed(TR.spike_unit) } : null;
  const depthOrder = Array.from({ length: D.channels.n }, (_, c) => c)
    .sort((a, b) => D.channels.y[a] - D.channels.y[b] || D.channels.x[a] - D.channels.x[b]);
  const loudCache = new Map();
  function loudChannels(u) {
    if (loudCache.has(u)) return loudCache.get(u);
    const nc = D.templates.n_chan, nt = D.templates.nt, ptp = [], out = new Set();
    if (tpl.wave) {
      for (let k = 0; k < nc; k++) {
        let lo = Infinity, hi = -Infinity;
        for (let s = 0; s < nt; s++) { const v = tpl.wave[(u * nc + k) * nt + s]; lo = Math.min(lo, v); hi = Math.max(hi, v); }
        ptp.push(hi - lo);
      }
      const mx = Math.max.apply(null, ptp);
      for (let k = 0; k < nc; k++) if (tpl.chans[u * nc + k] >= 0 && ptp[k] >= 0.25 * mx && mx > 0) out.add(tpl.chans[u * nc + k]);
    }
    if (!out.size && tpl.peak[u] >= 0) out.add(tpl.peak[u]);
    loudCache.set(u, out);
    return out;
  }
  function renderTraces() {
    const cv = $("c-traces");
    if (!TR) { P.message(cv, "no traces in this page (see the notes)"); $("trace-stretches").textContent = ""; return; }
    $("trace-stretches").innerHTML = "stretch " + TR.start_s.map((s, i) =>
      `<button class="small${i === trv.stretch ? " on" : ""}" data-stretch="${i}">${P.fmt(s, 2)} s</button>`).join(" ");
    document.querySelectorAll("#trace-stretches button").forEach((b) => b.addEventListener("click", () => { trv.stretch = Number(b.dataset.stretch); renderTraces(); }));
    const u = state.selected;
    if (trv.unit !== u) { /* a newly selected unit: the stretch with most of its spikes */
      trv.unit = u;
      const cnt = new Array(TR.n).fill(0);
      for (let q = 0; q < trSp.s.length; q++) if (trSp.u[q] === u) cnt[trSp.s[q]]++;
      const best = cnt.indexOf(Math.max.apply(null, cnt));
      if (cnt[best] > cnt[trv.stretch]) { trv.stretch = best; return renderTraces(); }
    }
    const C = D.channels.n, L = TR.n_t, i = trv.stretch, sc = trScale[i], base = i * C * L;
    const want = Number($("trace-nch").value) || C, nvis = Math.min(C, want);
    const pk = u >= 0 && tpl.peak[u] >= 0 ? depthOrder.indexOf(tpl.peak[u]) : Math.floor(C / 2);
    const r0 = Math.max(0, Math.min(C - nvis, pk - Math.floor(nvis / 2))), rows = depthOrder.slice(r0, r0 + nvis);
    const sample = [];
    for (const c of rows) for (let k = 0; k < L; k += 7) sample.push(Math.abs(trData[base + c * L + k]));
    sample.sort((a, b) => a - b);
    const noise = Math.max(1, sample[Math.floor(sample.length / 2)] / 0.6745) * sc;
    const t0 = TR.start_s[i];
    const f = P.frame(cv, { xr: [t0, t0 + TR.ms / 1000], yr: [-0.5, nvis - 0.5], xlabel: "time (s)", yticks: false, grid: false, left: 44 });
    const ctx = f.ctx, row = f.ph / nvis, k_uv = (row / (8 * noise)) * trv.gain, sPerSample = 1 / D.fs_hz;
    ctx.fillStyle = "#555";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    const step = Math.max(1, Math.ceil(12 / row));
    rows.forEach((c, r) => { if (r % step === 0) ctx.fillText(String(c), f.px - 4, f.Y(r)); });
    P.clip(f);
    const line = (c, r, a, b, color, width) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.beginPath();
      const y0 = f.Y(r);
      for (let k = a; k < b; k++) {
        const x = f.X(t0 + k * sPerSample), y = y0 - trData[base + c * L + k] * sc * k_uv;
        if (k === a) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      }
      ctx.stroke();
    };
    rows.forEach((c, r) => line(c, r, 0, L, "#9aa0a6", 1));
    const rowOf = new Map(rows.map((c, r) => [c, r])), half = Math.round(D.fs_hz / 1000);
    const others = $("trace-others").checked;
    trv.hits = [];
    let n_sel = 0, n_all = 0;
    for (const pass of [0, 1]) { /* the selected unit last, on top */
      for (let q = 0; q < trSp.s.length; q++) {
        if (trSp.s[q] !== i) continue;
        const v = trSp.u[q], sel = v === u;
        if ((pass === 1) !== sel || (!sel && !others)) continue;
        if (pass === 0) n_all++; else n_sel++;
        const a = Math.max(0, trSp.t[q] - half), b = Math.min(L, trSp.t[q] + half);
        const color = sel ? P.PALETTE[1] : P.PALETTE[2 + (ids[v] % (P.PALETTE.length - 2))];
        for (const c of loudChannels(v)) {
          const r = rowOf.get(c);
          if (r === undefined) continue;
          line(c, r, a, b, color, sel ? 2 : 1.2);
          trv.hits.push({ x: f.X(t0 + trSp.t[q] * sPerSample), y: f.Y(r), v, t: t0 + trSp.t[q] * sPerSample });
        }
      }
    }
    ctx.restore();
    cv._bsFrame = f;
    P.attachHit(cv, (x, y) => {
      const h = nearestSpike(x, y);
      return h ? `unit ${ids[h.v]}, ${h.t.toFixed(4)} s (click to select)` : null;
    });
    $("trace-note").textContent = `· channels ${rows.length ? rows[0] : ""}–${rows.length ? rows[rows.length - 1] : ""} by depth, ` +
      `${n_sel} spike${n_sel === 1 ? "" : "s"} of unit ${u >= 0 ? ids[u] : "–"}, ${n_all} of other units; ` +
      `int8 step ${P.fmt(sc)} µV, noise ≈ ${P.fmt(noise)} µV`;
    $("trace-source").textContent = `${TR.n} stretches of ${TR.ms} ms spread over the recording (boundsort report --traces N --trace-ms MS).`;
  }
  function nearestSpike(x, y) {
    let best = null, bd = 64;
    for (const h of trv.hits) {
      const d2 = (h.x - x) * (h.x - x) + (h.y - y) * (h.y - y) / 4;
      if (d2 < bd) { bd = d2; best = h; }
    }
    return best;
  }
  $("c-traces").addEventListener("click", (ev) => {
    const r = ev.target.getBoundingClientRect(), h = nearestSpike(ev.clientX - r.left, ev.clientY - r.top);
    if (h) { select(h.v); renderTraces(); }
  });
  $("trace-nch").addEventListener("change", () => renderTraces());
  $("trace-others").addEventListener("change", () => renderTraces());
  $("trace-gain-up").addEventListener("click", () => { trv.gain *= 1.5; renderTraces(); });
  $("trace-gain-down").addEventListener("click", () => { trv.gain /= 1.5; renderTraces(); });
  document.addEventListener("keydown", (ev) => {
    if (activeTab !== "traces" || !TR || ev.target.matches("input, select, textarea") || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "ArrowRight") trv.stretch = (trv.stretch + 1) % TR.n;
    else if (ev.key === "ArrowLeft") trv.stretch = (trv.stretch + TR.n - 1) % TR.n;
    else if (ev.key === "+" || ev.key === "=") trv.gain *= 1.5;
    else if (ev.key === "-") trv.gain /= 1.5;
    else return;
    ev.preventDefault();
    renderTraces();
  });

  /* ---- curation tab ---- */
  function renderCuration() {
    const counts = {};
    LABELS.forEach((l) => { counts[l] = 0; });
    state.labels.forEach((l) => { counts[l]++; });
    const changed = [];
    state.labels.forEach((l, u) => { if (l !== initial[u]) changed.push(u); });
    const n_act = changed.length + state.groups.length + state.splits.length;
    $("cur-count").textContent = n_act ? `(${n_act})` : "";
    if (activeTab !== "curation") return;
    $("cur-summary").innerHTML = LABELS.map((l) => `<span class="chip" style="background:${LABEL_COLOR[l]}">${l}</span> ${counts[l]}`).join(" &nbsp; ");
    $("cur-groups").innerHTML = state.groups.length
      ? "<ul>" + state.groups.map((g, i) => `<li>group ${i + 1} → new id ${maxId + 1 + i}: ${g.map((u) => `<a href="#" data-u="${u}">${ids[u]}</a>`).join(" + ")} <button class="small" data-unmerge="${i}">unmerge</button></li>`).join("") + "</ul>"
      : "<p class=\"na\">No merge groups. Tick units in the table and press “Merge ticked”, or use “merge” above a cross-correlogram.</p>";
    const sid = splitIds();
    $("cur-splits").innerHTML = state.splits.length
      ? "<ul>" + state.splits.map((x) => { const k = splitIndices(x).length, n = all.off[x.u + 1] - all.off[x.u];
        return `<li><a href="#" data-u="${x.u}">${ids[x.u]}</a> → ${sid.get(x.u)[0]} (${k} spikes in the box) + ${sid.get(x.u)[1]} (${n - k}) <button class="small" data-unsplit="${x.u}">unsplit</button></li>`; }).join("") + "</ul>"
      : `<p class="na">${all ? "No splits. Drag a box on a unit's amplitude plot and press “split”." : "The page does not hold every spike (see the notes): no splits."}</p>`;
    const fx = (v, d) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
    $("cur-proposals").innerHTML = PROPOSALS.length
      ? "<table class=\"props\"><tr><th>units</th><th>evidence</th><th title=\"template similarity (l1)\">similarity</th><th title=\"presence overlap over time\">overlap</th><th title=\"refractory coincidences: observed / expected\">refractory</th><th title=\"|amplitude| smaller / larger\">amplitude</th><th>status</th><th></th></tr>" +
        PROPOSALS.map((p, i) => {
          const st = proposalStatus(p);
          const act = st === "open" ? `<button class="small" data-accept="${i}">accept</button> <button class="small plain" data-reject="${i}">reject</button>`
                                    : `<button class="small plain" data-reopen="${i}">reopen</button>`;
          return `<tr class="prop-${st}" data-prop="${i}"><td><a href="#" data-u="${p.a}">${ids[p.a]}</a> + <a href="#" data-u="${p.b}">${ids[p.b]}</a></td><td>${esc(p.evidence || "")}</td>` +
            `<td>${fx(p.template_similarity, 3)}</td><td>${fx(p.presence_overlap, 2)}</td><td>${fx(p.refractory_ratio, 2)} (${fx(p.expected_refractory, 1)} exp.)</td><td>${fx(p.amplitude_ratio, 2)}</td><td>${st}</td><td>${act}</td></tr>`;
        }).join("") + "</table>"
      : "<p class=\"na\">No merge proposals (merge_proposals.tsv, written by qc, is absent or empty).</p>";
    $("cur-changes").innerHTML = changed.length
      ? "<ul>" + changed.map((u) => `<li><a href="#" data-u="${u}">${ids[u]}</a>: ${initial[u]} → <b>${state.labels[u]}</b></li>`).join("") + "</ul>"
      : "<p class=\"na\">No label changed from the folder's cluster_group.tsv.</p>";
    const text = prettyJSON(curationJSON());
    $("cur-preview").textContent = text.length > 100000 ? text.slice(0, 100000) + "\n..." : text;
    document.querySelectorAll("#tab-curation a[data-u]").forEach((a) => a.addEventListener("click", (ev) => { ev.preventDefault(); showTab("units"); select(Number(a.dataset.u)); }));
    document.querySelectorAll("#tab-curation button[data-unmerge]").forEach((b) => b.addEventListener("click", () => unmerge(Number(b.dataset.unmerge))));
    document.querySelectorAll("#tab-curation button[data-unsplit]").forEach((b) => b.addEventListener("click", () => unsplit(Number(b.dataset.unsplit))));
    document.querySelectorAll("#tab-curation button[data-accept]").forEach((b) => b.addEventListener("click", () => acceptProposal(Number(b.dataset.accept))));
    document.querySelectorAll("#tab-curation button[data-reject]").forEach((b) => b.addEventListener("click", () => rejectProposal(Number(b.dataset.reject))));
    document.querySelectorAll("#tab-curation button[data-reopen]").forEach((b) => b.addEventListener("click", () => reopenProposal(Number(b.dataset.reopen))));
  }
  $("reset-curation").addEventListener("click", () => {
    if (!window.confirm("Forget every label change and merge group made on this page? (Undo brings them back.)")) return;
    remember();
    state.labels = initial.slice();
    state.groups = [];
    state.rejected = [];
    state.splits = [];
    state.pending = null;
    state.checked.clear();
    refresh();
  });

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => showTab(activeTab), 150);
  });

  renderRows();
  renderCuration();
  renderHistory();
  showTab(location.hash.slice(1) || "units");
  window.bsReport = { data: D, state, trv, renderTraces, curationJSON, clusterGroupTSV, select, setLabel, mergeUnits, splitUnit, unsplit, showTab, reveal, undo, redo,
                      unitAmplitudes: (u) => (all ? unitAll(u).amp : unitSpikes(u).amp),
                      splitIndices: (u) => (splitOf(u) >= 0 ? splitIndices(state.splits[splitOf(u)]) : null),
                      proposalStatus: (i) => proposalStatus(PROPOSALS[i]),
                      order: () => order.map((u) => ids[u]) };
  window.bsTiming = { script_ms: performance.now() - t_start };
  window.bsReady = true;
})();
