// The cone explorer: search any variable, then see its upstream cone as a graph (an Altair chart whose
// data this script fills in) and as a tree, with units, the value in a chosen run, the defining relations
// in MathML and their references. The page state lives in the URL fragment (#name), so every view has a
// link and the browser's back button works.
(function () {
  "use strict";
  var G = window.GPUSTACK, V = G.catalog.variables, R = G.catalog.relations, REFS = G.catalog.refs;
  var names = Object.keys(V).sort();
  var search = document.getElementById("search"), results = document.getElementById("results");
  var runSel = document.getElementById("run"), depthSel = document.getElementById("depth");
  var detail = document.getElementById("detail"), cone = document.getElementById("cone");
  var view = null, current = null;

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) { e.append(c); });
    return e;
  }
  function link(name, text) { return el("a", { href: "#" + name }, [text || name]); }
  function run() { return runSel.value ? G.runs[runSel.value] : null; }
  function valueText(name) {
    var r = run(), s = r && r.values[name];
    if (V[name] && V[name].const !== undefined) return String(V[name].const) + " " + V[name].u;
    if (!s) return r ? "not in this run's estimate" : "";
    return s.v + (s.u && s.u !== "1" ? " " + s.u : "");
  }
  // Inputs of a variable: in a run, those of the relation it chose there; otherwise of every defining relation.
  function inputs(name) {
    var r = run(), s = r && r.values[name];
    var rels = s && s.rel && R[s.rel] ? [s.rel] : (V[name] ? V[name].defs : []);
    var seen = {};
    rels.forEach(function (rel) { R[rel].in.forEach(function (i) { seen[i] = true; }); });
    return Object.keys(seen).sort();
  }
  function allInputs(name) {
    var seen = {};
    (V[name] ? V[name].defs : []).forEach(function (rel) { R[rel].in.forEach(function (i) { seen[i] = true; }); });
    return Object.keys(seen).sort();
  }

  // ---- search ------------------------------------------------------------------------------------
  function matches(q) {
    q = q.trim().toLowerCase();
    if (!q) return [];
    var words = q.split(/\s+/);
    var hit = names.filter(function (n) {
      var text = (n + " " + (V[n].d || "")).toLowerCase();
      return words.every(function (w) { return text.indexOf(w) >= 0; });
    });
    // Names that contain the query come before matches in descriptions only.
    hit.sort(function (a, b) { return (a.indexOf(q) < 0) - (b.indexOf(q) < 0) || (a < b ? -1 : a > b ? 1 : 0); });
    return hit.slice(0, 30);
  }
  function showResults() {
    var found = matches(search.value);
    results.replaceChildren();
    found.forEach(function (n) {
      var a = el("a", { href: "#" + n, role: "option", id: "opt-" + n }, [n, " ", el("small", {}, [V[n].u + " · " + (V[n].d || "")])]);
      results.append(el("li", {}, [a]));
    });
    search.setAttribute("aria-expanded", found.length ? "true" : "false");
  }
  search.addEventListener("input", showResults);
  search.addEventListener("keydown", function (ev) {
    var first = results.querySelector("a");
    if (ev.key === "Enter" && first) { ev.preventDefault(); location.hash = first.getAttribute("href"); }
    if (ev.key === "ArrowDown" && first) { ev.preventDefault(); first.focus(); }
  });
  results.addEventListener("keydown", function (ev) {
    var li = ev.target.closest("li");
    if (!li) return;
    if (ev.key === "ArrowDown" && li.nextElementSibling) { ev.preventDefault(); li.nextElementSibling.querySelector("a").focus(); }
    if (ev.key === "ArrowUp") { ev.preventDefault(); (li.previousElementSibling ? li.previousElementSibling.querySelector("a") : search).focus(); }
    if (ev.key === "Escape") { search.focus(); }
  });

  // ---- detail ------------------------------------------------------------------------------------
  function refList(keys) {
    return el("ul", { class: "refs" }, keys.map(function (k) {
      var r = REFS[k] || { c: k };
      var parts = [el("b", {}, [k]), ": " + r.c + (r.y ? " (" + r.y + ")" : "")];
      if (r.url) parts.push(" ", el("a", { href: r.url }, ["link"]));
      if (r.doi) parts.push(" doi:" + r.doi);
      if (r.loc) parts.push(el("br"), el("small", {}, [r.loc]));
      return el("li", {}, parts);
    }));
  }
  function relationBlock(name, chosen) {
    var r = R[name], box = el("section", { class: "relation", id: "rel-" + name });
    box.append(el("h4", {}, [name, el("span", { class: "tag" }, [r.k + (r.v ? " " + r.v : "")]),
                              chosen ? el("span", { class: "tag" }, ["chosen in this run"]) : ""]));
    if (r.d) box.append(el("p", {}, [r.d]));
    var math = el("div", { class: "math" });
    if (r.math) math.innerHTML = r.math; else math.append(el("code", {}, [r.tex || ""]));
    box.append(math);
    if (r.lo) box.append(el("p", { class: "note" }, ["Leaves out: " + r.lo]));
    box.append(el("p", {}, ["Inputs: "].concat(r.in.map(function (i, k) { return [k ? ", " : "", link(i)]; }).flat())));
    box.append(el("p", {}, [el("small", {}, [r.f])]));
    box.append(refList(r.refs));
    return box;
  }
  function showDetail(name) {
    var v = V[name], r = run(), step = r && r.values[name];
    var head = el("h2", {}, [name]);
    if (v.root) head.append(el("span", { class: "tag root" }, ["root: " + (v.fam || "?") + " / " + (v.cat || "?")]));
    if (v.const !== undefined) head.append(el("span", { class: "tag const" }, ["constant"]));
    var facts = el("dl", {}, [el("dt", {}, ["units"]), el("dd", { id: "units" }, [v.u]),
                             el("dt", {}, ["system"]), el("dd", {}, [v.s]),
                             el("dt", {}, ["description"]), el("dd", {}, [v.d || ""]),
                             el("dt", {}, ["value in run"]), el("dd", { id: "value" }, [valueText(name) || "(choose a run)"])]);
    if (step && r) facts.append(el("dt", {}, ["trace"]), el("dd", {}, [el("a", { href: r.href + "#step-" + name }, ["this step in " + r.path]),
                                                               step.note ? " (" + step.note + ")" : ""]));
    facts.append(el("dt", {}, ["declared at"]), el("dd", {}, [v.f]));
    detail.replaceChildren(head, facts);
    if (v.defs.length) {
      detail.append(el("h3", {}, ["Defined by"]));
      v.defs.forEach(function (d) { detail.append(relationBlock(d, step && step.rel === d)); });
    } else if (v.const === undefined) {
      detail.append(el("p", {}, ["No relation defines it: a root input (modelling debt), set by presets or the run."]));
    }
    detail.append(el("h3", {}, ["References"]), refList(v.refs));
  }

  // ---- tree --------------------------------------------------------------------------------------
  function treeNode(name, path) {
    var kids = inputs(name);
    var label = [link(name), " ", el("span", { class: "units" }, [valueText(name) || V[name].u])];
    var r = run(), s = r && r.values[name];
    if (s && s.rel) label.push(" ", el("span", { class: "rel" }, ["← " + s.rel]));
    if (!kids.length) return el("li", {}, label);
    if (path.indexOf(name) >= 0) return el("li", {}, label.concat([" (cycle)"]));
    var det = el("details", {}, [el("summary", {}, label)]);
    det.addEventListener("toggle", function () {
      if (det.open && det.children.length === 1) {
        det.append(el("ul", {}, kids.map(function (k) { return treeNode(k, path.concat([name])); })));
      }
    });
    return el("li", {}, [det]);
  }
  function showTree(name) {
    var root = treeNode(name, []);
    var tree = document.getElementById("tree");
    tree.replaceChildren(el("ul", { role: "tree", "aria-label": "Upstream cone of " + name }, [root]));
    var det = root.querySelector("details");
    if (det) det.open = true;
  }

  // ---- graph -------------------------------------------------------------------------------------
  function layout(name, maxDepth) {
    var depth = {}, order = [name], queue = [name];
    depth[name] = 0;
    while (queue.length) {
      var n = queue.shift();
      if (maxDepth && depth[n] >= maxDepth) continue;
      allInputs(n).forEach(function (i) {
        if (depth[i] === undefined) { depth[i] = depth[n] + 1; order.push(i); queue.push(i); }
      });
    }
    var layers = {};
    order.forEach(function (n) { (layers[depth[n]] = layers[depth[n]] || []).push(n); });
    var pos = {}, tallest = 0;
    Object.keys(layers).forEach(function (d) {
      var col = layers[d].sort(function (a, b) { return V[a].s < V[b].s ? -1 : V[a].s > V[b].s ? 1 : a < b ? -1 : 1; });
      tallest = Math.max(tallest, col.length);
      col.forEach(function (n, i) { pos[n] = { x: -Number(d), y: (col.length - 1) / 2 - i }; });
    });
    var nodes = order.map(function (n) {
      var v = V[n];
      var kind = n === name ? "target" : v.const !== undefined ? "constant" : v.root ? "root" : "defined";
      return { name: n, short: n.split(".").slice(1).join(".") || n, system: v.s, units: v.u, kind: kind,
               value: valueText(n), depth: depth[n], x: pos[n].x, y: pos[n].y };
    });
    var edges = [];
    order.forEach(function (n) {
      if (maxDepth && depth[n] >= maxDepth) return;
      allInputs(n).forEach(function (i) {
        if (pos[i]) edges.push({ x: pos[i].x, y: pos[i].y, x2: pos[n].x, y2: pos[n].y });
      });
    });
    return { nodes: nodes, edges: edges, tallest: tallest, size: order.length - 1 };
  }
  function showGraph(name) {
    var maxDepth = Number(depthSel.value), g = layout(name, maxDepth);
    var caption = document.getElementById("cone-caption");
    caption.textContent = name + ": " + g.size + " upstream variable(s) within " + (maxDepth ? maxDepth + " relation(s)" : "the whole cone") +
      ". Click a node to open it; the tree below is the keyboard route through the same cone.";
    var fig = document.getElementById("cone-graph");
    fig.setAttribute("aria-label", "Upstream cone graph of " + name + " with " + g.size + " variables");
    var draw = function () {
      view.height(Math.max(300, 16 * g.tallest));
      return view.data("nodes", g.nodes).data("edges", g.edges).runAsync()
        .then(function () { fig.setAttribute("data-rendered", name); });
    };
    if (view) return draw();
    var spec = JSON.parse(document.getElementById("cone-spec").textContent);
    // The first cone goes in with the specification (its named data sets), so nothing is drawn empty.
    spec.datasets = { nodes: g.nodes, edges: g.edges };
    return vegaEmbed(fig.querySelector(".chart"), spec, { renderer: "svg", actions: false }).then(function (res) {
      view = res.view;
      view.addEventListener("click", function (ev, item) {
        if (item && item.datum && item.datum.name) location.hash = "#" + item.datum.name;
      });
      return draw();
    }).catch(function (err) { console.error("cone graph: " + err); });
  }

  // ---- state -------------------------------------------------------------------------------------
  function select() {
    var name = decodeURIComponent(location.hash.slice(1));
    if (!V[name]) return;
    current = name;
    document.title = name + " · cone explorer";
    showDetail(name);
    cone.hidden = false;
    showTree(name);
    showGraph(name);
  }
  window.addEventListener("hashchange", select);
  runSel.addEventListener("change", function () { if (current) select(); });
  depthSel.addEventListener("change", function () { if (current) showGraph(current); });
  var keys = Object.keys(G.runs);
  if (keys.length) runSel.value = keys[0];
  select();
})();
