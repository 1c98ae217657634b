// AgentGit web UI: the little that needs a script. Everything else is plain HTML.
// Served as a static file (the Content-Security-Policy allows no inline script).
"use strict";

// Line anchors: #L10 and #L10-L20 mark lines; shift-click on a number extends the range.
(function () {
  const table = document.querySelector("table.code");
  if (!table) return;
  function mark() {
    table.querySelectorAll("tr.target").forEach((row) => row.classList.remove("target"));
    const match = /^#L(\d+)(?:-L(\d+))?$/.exec(window.location.hash);
    if (!match) return;
    let first = Number(match[1]);
    let last = Number(match[2] || match[1]);
    if (last < first) [first, last] = [last, first];
    for (let n = first; n <= last && n - first < 100000; n++) {
      const row = document.getElementById("L" + n);
      if (row) row.classList.add("target");
    }
    const start = document.getElementById("L" + first);
    if (start) start.scrollIntoView({ block: "center" });
  }
  table.addEventListener("click", (event) => {
    const link = event.target.closest("td.num a");
    if (!link || !event.shiftKey) return;
    const current = /^#L(\d+)/.exec(window.location.hash);
    if (!current) return;
    event.preventDefault();
    const clicked = Number(link.getAttribute("href").slice(2));
    const [a, b] = [Number(current[1]), clicked].sort((x, y) => x - y);
    window.location.hash = a === b ? "#L" + a : "#L" + a + "-L" + b;
  });
  window.addEventListener("hashchange", mark);
  mark();
})();

// The activity feed: new events arrive over Server-Sent Events (the session's cookie, no token)
// and are added at the top. Text goes in with textContent only: nothing from an event is HTML.
(function () {
  const list = document.getElementById("activity");
  if (!list || !window.EventSource) return;
  const status = document.getElementById("live-status");
  const kinds = list.dataset.kinds.split(",");
  const changesetUrl = list.dataset.changesetUrl;
  const proposalsUrl = list.dataset.proposalUrl;
  const source = new EventSource(list.dataset.feed);

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function add(kind, data, seq) {
    if (list.querySelector('li[data-seq="' + seq + '"]')) return;
    const placeholder = list.querySelector("li.placeholder");
    if (placeholder) placeholder.remove();
    const item = element("li", "fresh");
    item.dataset.seq = seq;
    item.appendChild(element("span", "kind kind-" + kind.replace(/[^a-z]+/g, ""), kind));
    const main = element("div", "log-main");
    if (Number.isInteger(data.proposal)) {
      const link = element("a", "", "proposal #" + data.proposal);
      link.href = proposalsUrl + data.proposal;
      main.appendChild(link);
      main.appendChild(document.createTextNode(" "));
    }
    let detail = "on " + (data.stream || "");
    if (data.outcome) detail += " · " + data.outcome;
    if (Array.isArray(data.conflicts) && data.conflicts.length) {
      detail += " · " + data.conflicts.length + " conflicting path" + (data.conflicts.length > 1 ? "s" : "");
    }
    main.appendChild(element("span", "muted", detail));
    item.appendChild(main);
    if (typeof data.head === "string" && /^[0-9a-f]{40}$/.test(data.head)) {
      const sha = element("a", "sha", data.head.slice(0, 12));
      sha.href = changesetUrl.replace(/0{40}/, data.head);
      item.appendChild(sha);
    }
    item.appendChild(element("span", "muted", "just now"));
    list.insertBefore(item, list.firstChild);
  }

  kinds.forEach((kind) => {
    source.addEventListener(kind, (event) => {
      try {
        add(kind, JSON.parse(event.data), event.lastEventId);
      } catch (error) {
        // A malformed event is skipped; the feed goes on.
      }
    });
  });
  source.addEventListener("open", () => { if (status) status.textContent = "live"; });
  source.addEventListener("error", () => { if (status) status.textContent = "reconnecting…"; });
})();
