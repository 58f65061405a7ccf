// Draws every chart of a page with vega-embed (bundled, no network) and drives the explanation depth
// switch. Chart specifications come from Altair; nothing here knows what a chart shows.
(function () {
  "use strict";
  document.querySelectorAll("figure[data-chart]").forEach(function (fig) {
    var spec = JSON.parse(fig.querySelector('script[type="application/json"]').textContent);
    vegaEmbed(fig.querySelector(".chart"), spec, { renderer: "svg", actions: false })
      .then(function () { fig.setAttribute("data-rendered", "true"); })
      .catch(function (err) { console.error("chart " + fig.id + ": " + err); });
  });
  var depth = document.querySelector("[data-depth-switch]");
  if (depth) {
    var apply = function (value) {
      document.body.classList.remove("depth-plain", "depth-researcher", "depth-full");
      document.body.classList.add("depth-" + value);
    };
    depth.addEventListener("change", function (ev) { apply(ev.target.value); });
    apply(depth.querySelector("input:checked").value);
  }
})();
