/* ctxobs dashboard: renders the plotly figures built on the server. No data is turned into HTML here. */
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function plot(el, fig) {
    var layout = fig.layout || {};
    layout.autosize = true;
    return window.Plotly.newPlot(el, fig.data || [], layout, CONFIG);
  }

  function chartData(el) {
    return fetch(el.getAttribute("data-chart-src"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("chart data: HTTP " + r.status); }
        return r.json();
      });
  }

  // Chart data is requested as soon as this script runs. The timeline lists this script before
  // plotly.js (both deferred), so the request overlaps plotly.js's download and start-up, the
  // longest part of a first view, instead of waiting for them.
  var requested = [];
  document.querySelectorAll("[data-chart-src]").forEach(function (el) {
    var data = chartData(el);
    data.catch(function () {});  // handled when drawn; not an unhandled rejection meanwhile
    requested.push({ el: el, data: data });
  });

  function timeline(el, data) {
    var prefix = el.getAttribute("data-turn-url");
    data
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
    requested.forEach(function (r) { timeline(r.el, r.data); });
    document.querySelectorAll("[data-figure]").forEach(embedded);
  }

  // Run as a deferred script before plotly.js, the document is parsed but plotly.js has not run
  // yet: DOMContentLoaded comes after every deferred script.
  if (document.readyState === "complete" || (document.readyState === "interactive" && window.Plotly)) {
    init();
  } else {
    document.addEventListener("DOMContentLoaded", init);
  }
})();
