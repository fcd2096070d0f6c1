// Tabs and the input picker; the view named in the URL's #fragment is shown.
"use strict";
(function (DV) {
  const { h } = DV;
  const main = document.getElementById("view"), tabs = document.getElementById("tabs"), pick = document.getElementById("input-pick");
  let current = null, token = 0;

  function input() { return DV.state.inputs[DV.state.input]; }
  function visible() { return DV.views.filter((v) => v.when(input(), DV.state.inputs)); }

  async function show(id) {
    const list = visible();
    const v = list.find((x) => x.id === id) || list[0];
    current = v.id;
    for (const b of tabs.children) b.classList.toggle("on", b.dataset.id === v.id);
    const mine = ++token;
    main.replaceChildren(h("p", { class: "muted", text: "Loading…" }));
    const root = h("div", { id: "view-" + v.id });
    try {
      await v.render(root, input(), DV.state.input);
      if (mine !== token) return;
      main.replaceChildren(root);
    } catch (e) {
      if (mine !== token) return;
      main.replaceChildren(h("p", { class: "error", text: "Cannot show this view: " + e.message }));
      throw e;
    }
    document.body.dataset.view = v.id;
    document.body.dataset.ready = String(mine);
  }

  function drawTabs() {
    tabs.replaceChildren(...visible().map((v) => h("button", { "data-id": v.id, onclick: () => { location.hash = v.id; } }, v.label)));
  }

  async function start() {
    DV.state.inputs = (await DV.get("inputs")).inputs;
    pick.replaceChildren(...DV.state.inputs.map((x) => h("option", { value: String(x.id) }, x.label + (x.kind === "sweep" ? " (sweep)" : ""))));
    pick.hidden = DV.state.inputs.length < 2;
    pick.addEventListener("change", () => { DV.state.input = +pick.value; drawTabs(); show(current); });
    drawTabs();
    window.addEventListener("hashchange", () => show(location.hash.slice(1)));
    await show(location.hash.slice(1));
  }
  start();
})(window.DV);
