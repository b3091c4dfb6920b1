/* ctxobs dashboard: renders the plotly figures built on the server. No data is turned into HTML here. */
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function plot(el, fig) {
    var layout = fig.layout || {};
    layout.autosize = true;
    return window.Plotly.newPlot(el, fig.data || [], layout, CONFIG);
  }

  function timeline(el) {
    var prefix = el.getAttribute("data-turn-url");
    fetch(el.getAttribute("data-chart-src"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("chart data: HTTP " + r.status); }
        return r.json();
      })
      .then(function (fig) {
        el.textContent = "";
        return plot(el, fig).then(function () {
          el.setAttribute("data-rendered", "1");
          el.on("plotly_click", function (ev) {
            if (!ev || !ev.points || !ev.points.length) { return; }
            var turn = Math.round(Number(ev.points[0].x));
            if (isFinite(turn)) { window.location.assign(prefix + turn + "/"); }
          });
        });
      })
      .catch(function (err) {
        el.textContent = "The chart could not be loaded (" + err.message + ").";
        el.classList.add("error");
      });
  }

  function embedded(el) {
    var src = document.getElementById(el.getAttribute("data-figure"));
    if (!src) { return; }
    plot(el, JSON.parse(src.textContent)).then(function () { el.setAttribute("data-rendered", "1"); });
  }

  function init() {
    if (!window.Plotly) { return; }
    document.querySelectorAll("[data-chart-src]").forEach(timeline);
    document.querySelectorAll("[data-figure]").forEach(embedded);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
