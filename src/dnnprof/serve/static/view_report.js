// Report: the printable report of a self-contained file, in a sandboxed frame (no scripts can run there).
"use strict";
(function (DV) {
  const el = document.getElementById("dnnprof-report");
  DV.view("report", "Printable report", async (root) => {
    const frame = DV.h("iframe", { class: "report", sandbox: "", title: "printable report" });
    frame.srcdoc = JSON.parse(el.textContent);
    root.append(frame);
  }, () => !!el);
})(window.DV);
