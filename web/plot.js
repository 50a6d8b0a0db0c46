/*
 * plot.js - the report's charts: a small canvas plotting layer (no library,
 * no network).
 *
 * A chart is drawn into a <canvas> sized to its CSS box times the device
 * pixel ratio. frame() draws the axes: "nice" ticks (1, 2, 5 x 10^k steps),
 * grid lines, axis labels and a title, and returns a frame object with the
 * data -> pixel maps X(v) and Y(v). The chart kinds (bars, scatter, lines,
 * stacked areas, heatmap) draw inside that frame and register a hit-test
 * function, so moving the mouse over a chart shows a tooltip with the values
 * under the pointer. Heatmaps are drawn through an ImageData of one pixel per
 * cell, scaled without smoothing, so a 600 x 300 map costs one drawImage.
 */
"use strict";
const BSPlot = (function () {
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22"];
  /* viridis, 9 control points, linear in between */
  const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141], [39, 173, 129],
                   [92, 200, 99], [170, 220, 50], [253, 231, 37]];

  function viridis(t) {
    t = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(t)), f = t - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
  }

  function niceStep(span, n) {
    const raw = span / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * p;
  }

  function ticks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const step = niceStep(hi - lo, n), out = [];
    for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(k * step);
    out.step = step;
    return out;
  }

  /* A tick label with as many decimals as the tick step needs. */
  function tickFmt(v, step) {
    if (Math.abs(v) >= 1e6 || (v !== 0 && Math.abs(v) < 1e-4)) return v.toExponential(1);
    return v.toFixed(Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9))));
  }

  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "";
    if (typeof v !== "number") return String(v);
    if (digits !== undefined && digits !== null) {
      const s = v.toFixed(digits);
      return /^-0(\.0*)?$/.test(s) ? s.slice(1) : s; /* no "-0.0" */
    }
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e6 || a < 1e-3) return v.toExponential(2);
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1) return v.toFixed(2);
    return String(Number(v.toPrecision(3)));
  }

  /* Ticks for a byte axis: nice steps in the binary unit of the largest value, labelled in that unit. */
  const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  function byteTicks(lo, hi, n) {
    const k = Math.max(0, Math.min(4, Math.floor(Math.log(Math.max(Math.abs(hi), Math.abs(lo), 1)) / Math.log(1024)))), sc = Math.pow(1024, k);
    const t = ticks(lo / sc, hi / sc, n), out = t.map((v) => v * sc);
    out.label = (v) => tickFmt(v / sc, t.step || 1) + " " + BYTE_UNITS[k];
    return out;
  }

  function fmtBytes(b) {
    if (b === null || b === undefined || Number.isNaN(b)) return "";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(b >= 100 ? 0 : b >= 10 ? 1 : 2) : b.toFixed(0)) + " " + u[i];
  }

  /* ---- tooltip ---- */
  let tip = null;
  function showTip(text, ev) {
    if (!tip) {
      tip = document.createElement("div");
      tip.className = "bs-tip";
      document.body.appendChild(tip);
    }
    if (!text) { tip.style.display = "none"; return; }
    tip.textContent = text;
    tip.style.display = "block";
    const w = tip.offsetWidth, h = tip.offsetHeight;
    let x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > window.innerWidth - 4) x = ev.clientX - w - 10;
    if (y + h > window.innerHeight - 4) y = ev.clientY - h - 10;
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  function attachHit(canvas, hit) {
    canvas._bsHit = hit;
    if (canvas._bsHooked) return;
    canvas._bsHooked = true;
    canvas.addEventListener("mousemove", (ev) => {
      const r = canvas.getBoundingClientRect();
      const text = canvas._bsHit ? canvas._bsHit(ev.clientX - r.left, ev.clientY - r.top) : null;
      showTip(text, ev);
    });
    canvas.addEventListener("mouseleave", () => showTip(null));
  }

  /* ---- canvas and frame ---- */
  function prepare(canvas) {
    const dpr = window.devicePixelRatio || 1, r = canvas.getBoundingClientRect();
    const w = Math.max(50, Math.round(r.width)), h = Math.max(50, Math.round(r.height));
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";
    return { ctx, w, h };
  }

  function message(canvas, text) {
    const { ctx, w, h } = prepare(canvas);
    ctx.fillStyle = "#888";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText(text, w / 2, h / 2);
    attachHit(canvas, null);
  }

  /* o: {xr: [lo, hi], yr: [lo, hi], xlabel, ylabel, title, xbytes / ybytes (byte axes), grid (default true),
     yticks (default true), left, right (margins, px)} */
  function frame(canvas, o) {
    const { ctx, w, h } = prepare(canvas);
    const m = { l: o.left || 52, r: o.right || 10, t: o.title ? 20 : 8, b: o.xlabel ? 34 : 22 };
    const px = m.l, py = m.t, pw = Math.max(10, w - m.l - m.r), ph = Math.max(10, h - m.t - m.b);
    let [x0, x1] = o.xr, [y0, y1] = o.yr;
    if (!(x1 > x0)) { x0 -= 1; x1 += 1; }
    if (!(y1 > y0)) { y0 -= 1; y1 += 1; }
    const X = (v) => px + (v - x0) / (x1 - x0) * pw;
    const Y = (v) => py + ph - (v - y0) / (y1 - y0) * ph;
    const Xinv = (p) => x0 + (p - px) / pw * (x1 - x0);
    const Yinv = (p) => y0 + (py + ph - p) / ph * (y1 - y0);
    ctx.strokeStyle = "#e4e4e4";
    ctx.fillStyle = "#555";
    ctx.lineWidth = 1;
    const xt = (o.xbytes ? byteTicks : ticks)(x0, x1, Math.max(2, Math.floor(pw / 80)));
    const yt = (o.ybytes ? byteTicks : ticks)(y0, y1, Math.max(2, Math.floor(ph / 35)));
    const xf = xt.label || ((v) => tickFmt(v, xt.step || 1)), yf = yt.label || ((v) => tickFmt(v, yt.step || 1));
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const v of xt) {
      const x = Math.round(X(v)) + 0.5;
      if (o.grid !== false) { ctx.beginPath(); ctx.moveTo(x, py); ctx.lineTo(x, py + ph); ctx.stroke(); }
      ctx.fillText(xf(v), x, py + ph + 4);
    }
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of o.yticks === false ? [] : yt) {
      const y = Math.round(Y(v)) + 0.5;
      if (o.grid !== false) { ctx.beginPath(); ctx.moveTo(px, y); ctx.lineTo(px + pw, y); ctx.stroke(); }
      ctx.fillText(yf(v), px - 4, y);
    }
    ctx.strokeStyle = "#999";
    ctx.strokeRect(px + 0.5, py + 0.5, pw, ph);
    ctx.fillStyle = "#333";
    if (o.xlabel) {
      ctx.textAlign = "center";
      ctx.textBaseline = "bottom";
      ctx.fillText(o.xlabel, px + pw / 2, h - 2);
    }
    if (o.ylabel) {
      ctx.save();
      ctx.translate(11, py + ph / 2);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(o.ylabel, 0, 0);
      ctx.restore();
    }
    if (o.title) {
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.font = "bold 11px system-ui, sans-serif";
      ctx.fillText(o.title, px, 4);
      ctx.font = "11px system-ui, sans-serif";
    }
    return { ctx, w, h, px, py, pw, ph, X, Y, Xinv, Yinv, x0, x1, y0, y1 };
  }

  function clip(f) {
    f.ctx.save();
    f.ctx.beginPath();
    f.ctx.rect(f.px, f.py, f.pw, f.ph);
    f.ctx.clip();
  }

  /* Histogram bars. o: {edges0, binw, counts, color, shade: [[lo, hi, color]], xlabel, ylabel, title, unit} */
  function bars(canvas, o) {
    const n = o.counts.length;
    let mx = 0;
    for (let i = 0; i < n; i++) mx = Math.max(mx, o.counts[i]);
    const xr = [o.edges0, o.edges0 + n * o.binw];
    const f = frame(canvas, { xr, yr: [0, mx > 0 ? mx * 1.08 : 1], xlabel: o.xlabel, ylabel: o.ylabel, title: o.title, left: o.left });
    clip(f);
    for (const s of o.shade || []) {
      f.ctx.fillStyle = s[2];
      f.ctx.fillRect(f.X(s[0]), f.py, f.X(s[1]) - f.X(s[0]), f.ph);
    }
    f.ctx.fillStyle = o.color || PALETTE[0];
    for (let i = 0; i < n; i++) {
      if (!o.counts[i]) continue;
      const xa = f.X(o.edges0 + i * o.binw), xb = f.X(o.edges0 + (i + 1) * o.binw), y = f.Y(o.counts[i]);
      f.ctx.fillRect(xa, y, Math.max(1, xb - xa - (xb - xa > 3 ? 0.5 : 0)), f.py + f.ph - y);
    }
    f.ctx.restore();
    attachHit(canvas, (x, y) => {
      if (x < f.px || x > f.px + f.pw || y < f.py || y > f.py + f.ph) return null;
      const v = f.Xinv(x), i = Math.floor((v - o.edges0) / o.binw);
      if (i < 0 || i >= n) return null;
      const a = o.edges0 + i * o.binw;
      return `[${fmt(a)}, ${fmt(a + o.binw)}) ${o.unit || ""}: ${o.counts[i]}`;
    });
    return f;
  }

  /* Scatter. o: {series: [{x, y, color, size, alpha, label, n}], xr, yr, xlabel, ylabel, title,
     background(f) drawn first, tip(si, i) -> text} */
  function scatter(canvas, o) {
    const xr = o.xr, yr = o.yr;
    const f = frame(canvas, { xr, yr, xlabel: o.xlabel, ylabel: o.ylabel, title: o.title, left: o.left });
    clip(f);
    if (o.background) o.background(f);
    for (const s of o.series) {
      const n = s.n !== undefined ? s.n : s.x.length, r = s.size || 2;
      f.ctx.fillStyle = s.color;
      f.ctx.globalAlpha = s.alpha || 0.7;
      for (let i = 0; i < n; i++) {
        const xv = s.x[i], yv = s.y[i];
        if (!Number.isFinite(xv) || !Number.isFinite(yv)) continue;
        f.ctx.fillRect(f.X(xv) - r / 2, f.Y(yv) - r / 2, r, r);
      }
    }
    f.ctx.globalAlpha = 1;
    f.ctx.restore();
    if (o.legend) legend(f, o.series.filter((s) => s.label));
    attachHit(canvas, (x, y) => {
      let best = null, bd = 36;
      o.series.forEach((s, si) => {
        const n = s.n !== undefined ? s.n : s.x.length;
        for (let i = 0; i < n; i++) {
          const dx = f.X(s.x[i]) - x, dy = f.Y(s.y[i]) - y, d2 = dx * dx + dy * dy;
          if (d2 < bd) { bd = d2; best = [si, i]; }
        }
      });
      if (!best) return null;
      const s = o.series[best[0]];
      return o.tip ? o.tip(best[0], best[1]) : `${s.label || ""} ${fmt(s.x[best[1]])}, ${fmt(s.y[best[1]])}`;
    });
    return f;
  }

  function legend(f, items) {
    const ctx = f.ctx;
    let y = f.py + 6;
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    let wmax = 0;
    for (const it of items) wmax = Math.max(wmax, ctx.measureText(it.label).width);
    const x = f.px + f.pw - wmax - 26;
    ctx.fillStyle = "rgba(255,255,255,0.85)";
    ctx.fillRect(x - 4, y - 4, wmax + 28, items.length * 14 + 4);
    for (const it of items) {
      ctx.fillStyle = it.color;
      ctx.fillRect(x, y + 1, 14, 8);
      ctx.fillStyle = "#333";
      ctx.fillText(it.label, x + 18, y + 5);
      y += 14;
    }
  }

  /* A dashed line from (x0, y0) to (x1, y1), pixels. */
  function dashed(ctx, x0, y0, x1, y1, color) {
    ctx.strokeStyle = color;
    ctx.setLineDash([5, 4]);
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.lineTo(x1, y1);
    ctx.stroke();
    ctx.setLineDash([]);
  }

  /* Horizontal reference lines across a frame: [[value, color, label]]. */
  function hlines(f, list) {
    for (const h of list || []) {
      dashed(f.ctx, f.px, f.Y(h[0]), f.px + f.pw, f.Y(h[0]), h[1]);
      f.ctx.fillStyle = h[1];
      f.ctx.textAlign = "left";
      f.ctx.textBaseline = "bottom";
      if (h[2]) f.ctx.fillText(h[2], f.px + 4, f.Y(h[0]) - 2);
    }
  }

  /* Lines. o: {series: [{x, y, color, label, width, dash}], xr, yr, xlabel, ylabel, title, hlines: [[v, color, label]], legend} */
  function lines(canvas, o) {
    let xr = o.xr, yr = o.yr;
    if (!xr || !yr) { /* the data's range for the axes not given */
      let a = Infinity, b = -Infinity, c = Infinity, d = -Infinity;
      for (const s of o.series) for (let i = 0; i < s.x.length; i++) {
        if (!Number.isFinite(s.y[i])) continue;
        a = Math.min(a, s.x[i]); b = Math.max(b, s.x[i]); c = Math.min(c, s.y[i]); d = Math.max(d, s.y[i]);
      }
      for (const h of o.hlines || []) { c = Math.min(c, h[0]); d = Math.max(d, h[0]); }
      if (!Number.isFinite(a)) { a = 0; b = 1; c = 0; d = 1; }
      const pad = (d - c) * 0.06 || 1;
      xr = xr || [a, b];
      yr = yr || [c - pad, d + pad];
    }
    const f = frame(canvas, { xr, yr, xlabel: o.xlabel, ylabel: o.ylabel, title: o.title, ybytes: o.yfmt === fmtBytes, left: o.left });
    clip(f);
    hlines(f, o.hlines);
    for (const s of o.series) {
      f.ctx.strokeStyle = s.color;
      f.ctx.lineWidth = s.width || 1.5;
      f.ctx.setLineDash(s.dash || []);
      f.ctx.beginPath();
      let pen = false;
      for (let i = 0; i < s.x.length; i++) {
        if (!Number.isFinite(s.y[i])) { pen = false; continue; }
        const x = f.X(s.x[i]), y = f.Y(s.y[i]);
        if (pen) f.ctx.lineTo(x, y); else f.ctx.moveTo(x, y);
        pen = true;
      }
      f.ctx.stroke();
    }
    f.ctx.setLineDash([]);
    f.ctx.lineWidth = 1;
    f.ctx.restore();
    if (o.legend) legend(f, o.series.filter((s) => s.label).concat((o.hlines || []).filter((h) => h[2]).map((h) => ({ label: h[2], color: h[1] }))));
    attachHit(canvas, (x, y) => {
      if (x < f.px || x > f.px + f.pw) return null;
      const v = f.Xinv(x);
      const parts = [];
      for (const s of o.series) {
        let bi = -1, bd = Infinity;
        for (let i = 0; i < s.x.length; i++) { const d = Math.abs(s.x[i] - v); if (d < bd) { bd = d; bi = i; } }
        if (bi >= 0) parts.push(`${s.label || ""}: ${(o.yfmt || fmt)(s.y[bi])}`);
      }
      return `${o.xlabel || "x"} ${fmt(v)}\n` + parts.slice(0, 12).join("\n");
    });
    return f;
  }

  /* Stacked step areas. o: {x (bin starts), x1 (end), series: [{label, y, color}], ylabel, xlabel, title, hlines, yfmt} */
  function stacked(canvas, o) {
    const n = o.x.length, top = new Float64Array(n);
    for (const s of o.series) for (let i = 0; i < n; i++) top[i] += s.y[i];
    let mx = 0;
    for (let i = 0; i < n; i++) mx = Math.max(mx, top[i]);
    for (const h of o.hlines || []) mx = Math.max(mx, h[0]);
    const f = frame(canvas, { xr: [o.x[0], o.x1], yr: [0, mx * 1.05 || 1], xlabel: o.xlabel, ylabel: o.ylabel, title: o.title, ybytes: o.yfmt === fmtBytes, left: o.left || 64, right: o.right });
    clip(f);
    const base = new Float64Array(n);
    const xe = (i) => (i + 1 < n ? o.x[i + 1] : o.x1);
    o.series.forEach((s, si) => {
      f.ctx.fillStyle = s.color || PALETTE[si % PALETTE.length];
      f.ctx.beginPath();
      f.ctx.moveTo(f.X(o.x[0]), f.Y(base[0]));
      for (let i = 0; i < n; i++) {
        f.ctx.lineTo(f.X(o.x[i]), f.Y(base[i] + s.y[i]));
        f.ctx.lineTo(f.X(xe(i)), f.Y(base[i] + s.y[i]));
      }
      for (let i = n - 1; i >= 0; i--) {
        f.ctx.lineTo(f.X(xe(i)), f.Y(base[i]));
        f.ctx.lineTo(f.X(o.x[i]), f.Y(base[i]));
      }
      f.ctx.closePath();
      f.ctx.fill();
      for (let i = 0; i < n; i++) base[i] += s.y[i];
    });
    hlines(f, o.hlines);
    f.ctx.restore();
    attachHit(canvas, (x, y) => {
      if (x < f.px || x > f.px + f.pw) return null;
      const v = f.Xinv(x);
      let i = 0;
      while (i + 1 < n && o.x[i + 1] <= v) i++;
      const yf = o.yfmt || fmt, lines = [`t ${fmt(o.x[i])}..${fmt(xe(i))} s, total ${yf(top[i])}`];
      o.series.forEach((s) => { if (s.y[i] > 0) lines.push(`${s.label}: ${yf(s.y[i])}`); });
      return lines.join("\n");
    });
    return f;
  }

  /* Heatmap: o: {nx, ny, rgba (Uint8ClampedArray nx*ny*4, row 0 = lowest y), xr, yr, xlabel, ylabel, title,
     overlay(f), tip(ix, iy) -> text, right} */
  function heatmap(canvas, o) {
    const f = frame(canvas, { xr: o.xr, yr: o.yr, xlabel: o.xlabel, ylabel: o.ylabel, title: o.title, grid: false, right: o.right, left: o.left });
    const img = document.createElement("canvas");
    img.width = o.nx;
    img.height = o.ny;
    const ictx = img.getContext("2d"), id = ictx.createImageData(o.nx, o.ny);
    for (let iy = 0; iy < o.ny; iy++) { /* flip: canvas rows go down */
      const src = iy * o.nx * 4, dst = (o.ny - 1 - iy) * o.nx * 4;
      id.data.set(o.rgba.subarray(src, src + o.nx * 4), dst);
    }
    ictx.putImageData(id, 0, 0);
    f.ctx.fillStyle = "#fff";
    f.ctx.fillRect(f.px, f.py, f.pw, f.ph);
    f.ctx.imageSmoothingEnabled = false;
    f.ctx.drawImage(img, f.X(o.xr[0]), f.Y(o.yr[1]), f.X(o.xr[1]) - f.X(o.xr[0]), f.Y(o.yr[0]) - f.Y(o.yr[1]));
    clip(f);
    if (o.overlay) o.overlay(f);
    f.ctx.restore();
    f.ctx.strokeStyle = "#999";
    f.ctx.strokeRect(f.px + 0.5, f.py + 0.5, f.pw, f.ph);
    attachHit(canvas, (x, y) => {
      if (x < f.px || x > f.px + f.pw || y < f.py || y > f.py + f.ph) return null;
      const ix = Math.floor((f.Xinv(x) - o.xr[0]) / (o.xr[1] - o.xr[0]) * o.nx);
      const iy = Math.floor((f.Yinv(y) - o.yr[0]) / (o.yr[1] - o.yr[0]) * o.ny);
      if (ix < 0 || iy < 0 || ix >= o.nx || iy >= o.ny) return null;
      return o.tip ? o.tip(ix, iy) : null;
    });
    return f;
  }

  /* A vertical colour bar at the right of a frame. */
  function colorbar(f, lo, hi, label, cmap) {
    const ctx = f.ctx, x = f.px + f.pw + 12, w = 10;
    for (let i = 0; i < f.ph; i++) {
      const c = cmap(1 - i / f.ph);
      ctx.fillStyle = `rgb(${c[0] | 0},${c[1] | 0},${c[2] | 0})`;
      ctx.fillRect(x, f.py + i, w, 1.5);
    }
    ctx.strokeStyle = "#999";
    ctx.strokeRect(x + 0.5, f.py + 0.5, w, f.ph);
    ctx.fillStyle = "#555";
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    const ct = ticks(lo, hi, 5);
    for (const v of ct) ctx.fillText(tickFmt(v, ct.step || 1), x + w + 4, f.py + f.ph - (v - lo) / (hi - lo) * f.ph);
    if (label) {
      ctx.save();
      ctx.translate(x + w + 44, f.py + f.ph / 2);
      ctx.rotate(Math.PI / 2);
      ctx.textAlign = "center";
      ctx.fillText(label, 0, 0);
      ctx.restore();
    }
  }

  /* Box selection on a chart: a drag inside the plotting area draws a rectangle (a div over the canvas) and,
     on release, calls onBox({x0, x1, y0, y1}) in data units, the frame being canvas._bsFrame (set by the
     caller after each draw); a click without a drag calls onBox(null). Hooked once per canvas. */
  function boxSelect(canvas, onBox) {
    canvas._bsOnBox = onBox;
    if (canvas._bsBoxHooked) return;
    canvas._bsBoxHooked = true;
    const host = canvas.parentNode;
    if (getComputedStyle(host).position === "static") host.style.position = "relative";
    const div = document.createElement("div");
    div.className = "bs-box";
    div.style.cssText = "position:absolute;display:none;border:1px dashed #d62728;background:rgba(214,39,40,0.08);pointer-events:none";
    host.appendChild(div);
    let start = null;
    const local = (ev) => { const r = canvas.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
    const place = (a, b) => {
      div.style.left = canvas.offsetLeft + Math.min(a[0], b[0]) + "px";
      div.style.top = canvas.offsetTop + Math.min(a[1], b[1]) + "px";
      div.style.width = Math.abs(b[0] - a[0]) + "px";
      div.style.height = Math.abs(b[1] - a[1]) + "px";
    };
    canvas.addEventListener("mousedown", (ev) => {
      const f = canvas._bsFrame, p = local(ev);
      if (!f || p[0] < f.px || p[0] > f.px + f.pw || p[1] < f.py || p[1] > f.py + f.ph) return;
      start = p;
      place(p, p);
      div.style.display = "block";
      ev.preventDefault();
    });
    window.addEventListener("mousemove", (ev) => { if (start) place(start, local(ev)); });
    window.addEventListener("mouseup", (ev) => {
      if (!start) return;
      const f = canvas._bsFrame, a = start, b = local(ev);
      start = null;
      div.style.display = "none";
      if (Math.abs(b[0] - a[0]) < 3 && Math.abs(b[1] - a[1]) < 3) { canvas._bsOnBox(null); return; }
      const xs = [f.Xinv(a[0]), f.Xinv(b[0])], ys = [f.Yinv(a[1]), f.Yinv(b[1])];
      canvas._bsOnBox({ x0: Math.min(xs[0], xs[1]), x1: Math.max(xs[0], xs[1]), y0: Math.min(ys[0], ys[1]), y1: Math.max(ys[0], ys[1]) });
    });
  }

  return { PALETTE, viridis, ticks, fmt, fmtBytes, prepare, frame, clip, message, bars, scatter, lines, stacked, boxSelect,
           heatmap, colorbar, legend, attachHit, dashed };
})();
