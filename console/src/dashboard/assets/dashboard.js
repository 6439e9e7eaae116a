// rollout-controller dashboard: reads /api/events (server-sent events, one
// `fleet` event per change) and draws the list and the chosen rollout.
// Every text from the hub is put in the page as text (textContent, text
// nodes, attributes set through the DOM), never parsed as markup; the
// Content-Security-Policy's Trusted Types would refuse that anyway.
"use strict";

(function () {
  const STATUS_ORDER = ["toApply", "progressing", "validating", "succeeded", "failed", "timeOut", "skip"];
  const STATUS_NAME = {
    toApply: "ToApply", progressing: "Progressing", validating: "Validating", succeeded: "Succeeded",
    failed: "Failed", timeOut: "TimeOut", skip: "Skip",
  };
  let source = null;
  let chosen = null;

  // An element: `props` sets properties (className, title, href, …), and
  // `data`/`attrs` set data-* and other attributes; children are nodes or
  // strings, which become text nodes.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    const { data, attrs, ...rest } = props || {};
    Object.assign(node, rest);
    for (const [k, v] of Object.entries(data || {})) node.dataset[k] = v;
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function keyOfHash() {
    const parts = location.hash.replace(/^#\/?/, "").split("/");
    if (parts.length !== 2 || !parts[0] || !parts[1]) return null;
    try {
      return [decodeURIComponent(parts[0]), decodeURIComponent(parts[1])];
    } catch (_) {
      return null;
    }
  }

  function hashOf(namespace, name) {
    return "#/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
  }

  function connect() {
    if (source) source.close();
    chosen = keyOfHash();
    const path = chosen
      ? "/api/events/" + encodeURIComponent(chosen[0]) + "/" + encodeURIComponent(chosen[1])
      : "/api/events";
    source = new EventSource(path);
    source.addEventListener("fleet", (event) => draw(JSON.parse(event.data)));
    source.onopen = () => connection("live", "live");
    source.onerror = () => connection("lost", "connection lost; retrying…");
  }

  function connection(state, text) {
    const node = document.getElementById("connection");
    node.dataset.state = state;
    node.textContent = text;
  }

  function draw(frame) {
    const trouble = document.getElementById("trouble");
    trouble.hidden = !frame.trouble;
    trouble.textContent = frame.trouble || "";
    if (!chosen && frame.rollouts.length > 0) {
      const first = frame.rollouts[0];
      history.replaceState(null, "", hashOf(first.namespace, first.name));
      connect();
      return;
    }
    drawList(frame.rollouts);
    const main = document.getElementById("rollout");
    if (frame.view) {
      main.replaceChildren(...rolloutView(frame.view));
    } else if (chosen) {
      main.replaceChildren(el("p", { className: "quiet" },
        "No ManifestWorkReplicaSet " + chosen[0] + "/" + chosen[1] + " on this hub."));
    } else {
      main.replaceChildren(el("p", { className: "quiet" }, "Nothing to show."));
    }
  }

  function drawList(rows) {
    document.getElementById("no-rollouts").hidden = rows.length > 0;
    const items = rows.map((row) => {
      const current = chosen && chosen[0] === row.namespace && chosen[1] === row.name;
      const link = el("a", {
        href: hashOf(row.namespace, row.name), title: row.message,
        attrs: { "aria-current": current ? "true" : "false" },
        data: { rollout: row.namespace + "/" + row.name },
      }, el("span", { className: "ns" }, row.namespace + "/"), row.name, " ",
      el("span", { className: "phase phase-" + row.phase }, row.phase),
      el("div", { className: "quiet" }, countsText(row.counts) || "no clusters"));
      return el("li", {}, link);
    });
    document.getElementById("rollout-list").replaceChildren(...items);
  }

  function countsText(counts) {
    return STATUS_ORDER.filter((s) => counts[s] > 0)
      .map((s) => counts[s] + " " + STATUS_NAME[s]).join(" · ");
  }

  function fact(term, value) {
    return value ? [el("dt", {}, term), el("dd", {}, value)] : [];
  }

  function rolloutView(view) {
    const revisions = [
      view.updateRevision && "update " + view.updateRevision,
      view.currentRevision && "current " + view.currentRevision,
    ].filter(Boolean).join(" · ");
    const nodes = [
      el("h2", {}, view.namespace + "/" + view.name + " ",
        el("span", { className: "phase phase-" + view.phase, id: "phase" }, view.phase)),
      el("dl", { className: "facts" },
        ...fact("Message", view.message),
        ...fact("Revisions", revisions),
        ...fact("Rolling out", view.desiredRevision),
        ...fact("Aborted", view.abortedTime)),
      el("h3", {}, "Waiting for"),
      el("ul", { className: "waiting", id: "waiting" }, ...view.waiting.map((line) => el("li", {}, line))),
    ];
    for (const placement of view.placements) nodes.push(placementView(placement));
    nodes.push(...messagesView(view), ...conditionsView(view), ...eventsView(view));
    return nodes;
  }

  function placementView(placement) {
    const facts = el("dl", { className: "facts" },
      ...fact("Strategy", placement.strategy),
      ...fact("Plugin", placement.plugin),
      ...fact("Clusters", countsText(placement.counts)),
      ...fact("Failures", placement.maxFailureBreach ? "more than maxFailures allows" : ""),
      ...fact("Problem", placement.problem));
    const groups = placement.groups.map((group) => el("div", { className: "group" },
      el("div", { className: "group-label" }, "group " + group.index + (group.name ? " " + group.name : "")),
      el("div", { className: "grid" }, ...group.clusters.map(clusterTile))));
    return el("section", { className: "placement", data: { placement: placement.name } },
      el("h3", {}, "Placement " + placement.name), facts, ...groups);
  }

  function revisionText(cluster) {
    if (cluster.revisionRole === "none") return "no work";
    return (cluster.revision || "?") + " (" + cluster.revisionRole + ")";
  }

  function clusterTile(cluster) {
    const title = [cluster.name + ": " + cluster.status, "revision " + revisionText(cluster),
      "work " + cluster.work, cluster.since && "since " + cluster.since, cluster.message]
      .filter(Boolean).join("\n");
    return el("div", {
      className: "tile status-" + cluster.status + " rev-" + cluster.revisionRole, title,
      data: { cluster: cluster.name, status: cluster.status, revision: cluster.revision || "" },
    }, el("span", { className: "name" }, cluster.name),
    el("span", { className: "detail" }, cluster.status + " · " + revisionText(cluster)));
  }

  function table(id, heads, rows) {
    return el("table", { id },
      el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows));
  }

  function messagesView(view) {
    const rows = [];
    for (const placement of view.placements) {
      for (const group of placement.groups) {
        for (const cluster of group.clusters) {
          if (!cluster.message) continue;
          rows.push(el("tr", { data: { cluster: cluster.name } },
            el("td", {}, cluster.name), el("td", {}, cluster.status),
            el("td", { className: "message" }, cluster.message), el("td", {}, cluster.since || "")));
        }
      }
    }
    if (rows.length === 0) return [];
    return [el("h3", {}, "Verdicts and messages"), table("messages", ["cluster", "status", "message", "since"], rows)];
  }

  function conditionsView(view) {
    if (view.conditions.length === 0) return [];
    const rows = view.conditions.map((c) => el("tr", {}, el("td", {}, c.type), el("td", {}, c.status),
      el("td", {}, c.reason), el("td", { className: "text" }, c.message)));
    return [el("h3", {}, "Conditions"), table("conditions", ["type", "status", "reason", "message"], rows)];
  }

  function eventsView(view) {
    if (view.events.length === 0) return [];
    const rows = view.events.map((e) => el("tr", {}, el("td", {}, e.lastSeen || ""), el("td", {}, e.type),
      el("td", {}, e.reason), el("td", { className: "text" }, e.note + (e.count > 1 ? " (×" + e.count + ")" : ""))));
    return [el("h3", {}, "Events"), table("events", ["last seen", "type", "reason", "note"], rows)];
  }

  window.addEventListener("hashchange", connect);
  connect();
})();
