// The console's script: countdowns and polling on the leases page, the
// event stream on the events page. Pages are rendered on the server; this
// only keeps two of them live. No framework, nothing fetched from
// elsewhere.
"use strict";

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

// Leases: read /api/leases every second; between reads, count each
// lease's time left down from what the last read said.
function leasesPage() {
  const body = document.querySelector("#leases tbody");
  const errBox = document.getElementById("lease-error");
  const count = document.getElementById("lease-count");
  let deadlines = new Map(); // lease id -> performance.now() deadline

  function render(reply, readAt) {
    const rows = [];
    const next = new Map();
    for (const l of reply.leases || []) {
      next.set(l.id, readAt + l.remaining_ms);
      const tr = document.createElement("tr");
      tr.dataset.lease = l.id;
      cell(tr, String(l.id));
      cell(tr, l.ttl + " s");
      cell(tr, "", "countdown").dataset.lease = l.id;
      cell(tr, "revision " + l.granted_revision);
      cell(tr, l.anonymous ? "(anonymous)" : (l.metadata ? JSON.stringify(l.metadata) : ""));
      const keys = l.keys || [];
      let shown = keys.join(", ");
      if (l.key_count > keys.length) shown += (shown ? ", … " : "") + l.key_count + " key(s)";
      cell(tr, shown);
      rows.push(tr);
    }
    deadlines = next;
    body.replaceChildren(...rows);
    count.textContent = (reply.leases || []).length + " lease(s)" + (reply.more ? ", more than shown" : "");
    tick();
  }

  function tick() {
    const now = performance.now();
    for (const td of body.querySelectorAll("td.countdown, td.low")) {
      const left = Math.max(0, deadlines.get(Number(td.dataset.lease)) - now);
      td.textContent = (left / 1000).toFixed(1) + " s";
      td.className = left < 3000 ? "countdown low" : "countdown";
    }
  }

  async function poll() {
    const sent = performance.now();
    try {
      const resp = await fetch("/api/leases", { cache: "no-store" });
      const reply = await resp.json();
      if (reply.error) throw new Error(reply.error);
      errBox.hidden = true;
      // The time left was read somewhere between sending and now: take
      // the send, so the countdown never runs behind the cluster's.
      render(reply, sent);
    } catch (e) {
      errBox.textContent = "Could not read the leases: " + e.message;
      errBox.hidden = false;
    }
    setTimeout(poll, 1000);
  }
  setInterval(tick, 100);
  poll();
}

// Events: one row per event of the watched prefix, newest on top.
function eventsPage() {
  const table = document.getElementById("events");
  const body = table.querySelector("tbody");
  const state = document.getElementById("stream-state");
  const prefix = table.dataset.prefix || "";
  const src = new EventSource("/api/events?prefix=" + encodeURIComponent(prefix));
  src.onopen = () => { state.textContent = "Watching " + (prefix ? "keys under " + prefix : "every key") + "; new events appear at the top."; };
  src.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    const tr = document.createElement("tr");
    tr.className = "fresh";
    tr.dataset.key = ev.key;
    cell(tr, String(ev.revision));
    cell(tr, ev.type);
    cell(tr, ev.key);
    cell(tr, ev.value === undefined ? "" : JSON.stringify(ev.value));
    cell(tr, ev.lease ? String(ev.lease) : "");
    cell(tr, ev.cause || "");
    body.prepend(tr);
    while (body.rows.length > 500) body.deleteRow(-1);
  };
  src.addEventListener("end", (m) => { state.textContent = "The stream ended: " + m.data; src.close(); });
  // The browser reconnects by itself, and resumes after the last event it
  // got; an error answer instead of a stream closes the source for good.
  src.onerror = () => {
    state.textContent = src.readyState === EventSource.CLOSED
      ? "The stream stopped; reload the page to watch again."
      : "Reconnecting…";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "leases") leasesPage();
  if (page === "events") eventsPage();
});
