// Timeline of one step on a canvas: GPU streams and host threads, coloured by phase or layer; wheel zooms,
// drag pans, double-click resets; hovering a kernel draws the link to its launching runtime call.
"use strict";
(function (DV) {
  const { h, us } = DV;
  const PHC = { forward: "#4e79a7", backward: "#f28e2b", optimizer: "#59a14f", other: "#bab0ac", "": "#9aa4b2" };
  function hashColor(s) { let x = 0; for (let i = 0; i < s.length; i++) x = (x * 31 + s.charCodeAt(i)) | 0; return DV.COLORS[Math.abs(x) % DV.COLORS.length]; }

  DV.view("timeline", "Timeline", async (root, inp, i, step) => {
    const t = await DV.get(i + "/timeline", step === undefined || step === null ? {} : { step: String(step) });
    if (!t.steps.length) { root.append(DV.panel("Timeline", h("p", { class: "muted", text: "This profile has no steps." }))); return; }
    const stepPick = h("select", { id: "timeline-step" }, t.steps.map((s) => h("option", { value: String(s), selected: s === t.step ? "selected" : null }, "step " + s)));
    const colour = h("select", { id: "timeline-colour" }, h("option", { value: "phase" }, "colour by phase"), h("option", { value: "layer" }, "colour by layer"));
    const url = DV.apiUrl(i + "/perfetto");
    const exportBtn = url ? h("a", { href: url, download: "dnnprof-trace.json.gz", id: "perfetto-export", class: "button" }, "Export for Perfetto (ui.perfetto.dev)")
      : h("span", { class: "muted", text: "Perfetto export: dnnprof analyze --perfetto FILE" });
    const canvas = h("canvas", { class: "timeline", id: "timeline-canvas" }), tip = h("div", { class: "tip" });
    root.append(DV.panel("Timeline", h("div", { class: "toolbar" }, stepPick, colour, exportBtn,
      h("span", { class: "muted", text: "wheel: zoom · drag: pan · double-click: reset" })), canvas, tip));
    stepPick.addEventListener("change", async () => { const fresh = h("div"); await DV.views.find((v) => v.id === "timeline").render(fresh, inp, i, +stepPick.value); root.replaceChildren(...fresh.childNodes); });

    // lanes: GPU streams first, then per host thread its op depths and runtime calls
    const lanes = [], laneOf = new Map();
    function lane(key, label) { if (!laneOf.has(key)) { laneOf.set(key, lanes.length); lanes.push(label); } return laneOf.get(key); }
    const ev = [];
    for (const e of t.gpu.slice().sort((a, b) => a.stream - b.stream)) ev.push({ ...e, lane: lane("s" + e.stream, "GPU stream " + e.stream) });
    for (const e of t.host.slice().sort((a, b) => a.tid - b.tid || a.depth - b.depth))
      ev.push({ ...e, lane: e.kind === "runtime" ? lane("r" + e.tid, "thread " + e.tid + " CUDA API") : lane("o" + e.tid + ":" + e.depth, "thread " + e.tid + " ops d" + e.depth) });
    const byCorr = new Map(ev.filter((e) => e.kind === "runtime").map((e) => [e.correlation, e]));
    const LH = 18, LW = 170, H = lanes.length * LH + 24;
    let lo = t.start_ns, hi = t.end_ns, hover = null;
    const dpr = window.devicePixelRatio || 1;
    function draw() {
      const W = canvas.clientWidth || 900;
      canvas.width = W * dpr; canvas.height = H * dpr; canvas.style.height = H + "px";
      const c = canvas.getContext("2d"); c.setTransform(dpr, 0, 0, dpr, 0, 0); c.clearRect(0, 0, W, H);
      const sx = (W - LW) / Math.max(1, hi - lo);
      c.font = "11px system-ui"; c.fillStyle = "#667085";
      lanes.forEach((l, j) => { c.fillText(l, 4, 16 + j * LH + 12); c.fillStyle = j % 2 ? "#fafbfc" : "#fff"; c.fillRect(LW, 16 + j * LH, W - LW, LH); c.fillStyle = "#667085"; });
      c.fillText(us((hi - lo) / 1e3) + " shown", LW + 4, 11);
      for (const e of ev) {
        const x0 = LW + (e.start_ns - lo) * sx, x1 = LW + (e.start_ns + e.dur_ns - lo) * sx;
        if (x1 < LW || x0 > W) continue;
        c.fillStyle = e.kind === "kernel" ? (colour.value === "layer" ? hashColor(e.layer || "") : PHC[e.phase] || PHC[""]) : e.kind === "memcpy" ? "#edc948" : e.kind === "runtime" ? "#76b7b2" : "#b07aa1";
        c.fillRect(Math.max(LW, x0), 17 + e.lane * LH, Math.max(1, Math.min(W, x1) - Math.max(LW, x0)), LH - 2);
      }
      if (hover && hover.kind === "kernel" && byCorr.has(hover.correlation)) {
        const r = byCorr.get(hover.correlation);
        c.strokeStyle = "#e15759"; c.lineWidth = 1.5; c.beginPath();
        c.moveTo(LW + (r.start_ns - lo) * sx, 16 + r.lane * LH + LH / 2); c.lineTo(LW + (hover.start_ns - lo) * sx, 16 + hover.lane * LH + LH / 2); c.stroke();
      }
    }
    function at(x, y) {
      const W = canvas.clientWidth, sx = (W - LW) / Math.max(1, hi - lo), j = Math.floor((y - 16) / LH), tns = lo + (x - LW) / sx;
      let best = null;
      for (const e of ev) if (e.lane === j && e.start_ns <= tns + 2 / sx && e.start_ns + e.dur_ns >= tns - 2 / sx && (!best || e.dur_ns < best.dur_ns)) best = e;
      return best;
    }
    let drag = null;
    canvas.addEventListener("wheel", (e) => { e.preventDefault(); const W = canvas.clientWidth, f = e.deltaY > 0 ? 1.25 : 0.8;
      const tns = lo + (e.offsetX - LW) / ((W - LW) / (hi - lo)); lo = tns - (tns - lo) * f; hi = tns + (hi - tns) * f; draw(); }, { passive: false });
    canvas.addEventListener("mousedown", (e) => { drag = { x: e.offsetX, lo, hi }; });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("dblclick", () => { lo = t.start_ns; hi = t.end_ns; draw(); });
    canvas.addEventListener("mousemove", (e) => {
      if (drag) { const d = (e.offsetX - drag.x) * (drag.hi - drag.lo) / (canvas.clientWidth - LW); lo = drag.lo - d; hi = drag.hi - d; draw(); return; }
      hover = at(e.offsetX, e.offsetY); draw();
      if (!hover) { tip.style.display = "none"; return; }
      tip.textContent = hover.name + " — " + us(hover.dur_ns / 1e3) + (hover.layer ? " — " + hover.layer : "") + (hover.phase ? " (" + hover.phase + ")" : "");
      tip.style.display = "block"; tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
    });
    canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; hover = null; draw(); });
    colour.addEventListener("change", draw);
    requestAnimationFrame(draw);
  }, DV.isProfile);
})(window.DV);
