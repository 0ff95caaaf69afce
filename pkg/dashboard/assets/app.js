// proxy-operator's dashboard: reads /ui/api/stream with fetch() (so that the
// bearer token goes in a header, which EventSource cannot send) and renders
// each View it receives. Every value is put in the page as text, never as
// HTML. No framework, no dependency: docs/dashboard.md.
"use strict";

const tokenKey = "proxy-operator-token"; // sessionStorage: this tab only
const $ = (id) => document.getElementById(id);
let latest = null; // the last Message from the server
let retryDelay = 500;

function token() { return sessionStorage.getItem(tokenKey) || ""; }

function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = "status " + (cls || "");
}

// connect reads the stream until it ends, then reconnects with backoff.
async function connect() {
  const headers = { "Accept": "text/event-stream" };
  if (token()) headers["Authorization"] = "Bearer " + token();
  let resp;
  try {
    resp = await fetch("/ui/api/stream", { headers, cache: "no-store" });
  } catch (e) {
    return reconnect("offline");
  }
  if (resp.status === 401) {
    showLogin(token() ? "The token was not accepted." : "");
    return;
  }
  if (resp.status === 403 || resp.status === 429) {
    // No namespace to show this identity, or too many of its tabs open:
    // say why, and look again later (a role may be granted meanwhile).
    const why = await resp.json().then((b) => b.error, () => "");
    return reconnect((resp.status === 403 ? "nothing to show: " : "") + (why || "error " + resp.status));
  }
  if (!resp.ok || !resp.body) {
    return reconnect("error " + resp.status);
  }
  $("login").hidden = true;
  $("logout").hidden = !token();
  setStatus("live", "live");
  retryDelay = 500;
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        handleEvent(buffered.slice(0, end));
        buffered = buffered.slice(end + 2);
      }
    }
  } catch (e) {
    // the stream broke: reconnect below
  }
  reconnect("reconnecting");
}

function reconnect(why) {
  setStatus(why, "down");
  setTimeout(connect, retryDelay);
  retryDelay = Math.min(retryDelay * 2, 10000);
}

// handleEvent takes one text/event-stream event: "event: view" and its data.
function handleEvent(block) {
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (!data) return; // a keep-alive comment
  latest = JSON.parse(data);
  remember(latest.view);
  render();
}

// history keeps each pool's leased count over the last 10 minutes, since
// this page opened: a point per change (the server pushes only changes).
const historySpan = 10 * 60 * 1000;
const history = new Map(); // "ns/name" -> [{t, v}]

function remember(view) {
  const now = Date.now();
  for (const p of view.pools) {
    const key = p.namespace + "/" + p.name;
    const points = history.get(key) || [];
    if (!points.length || points[points.length - 1].v !== p.leased) points.push({ t: now, v: p.leased });
    while (points.length > 1 && points[1].t < now - historySpan) points.shift();
    history.set(key, points);
  }
}

// sparkline draws a pool's leased count since the page opened (up to 10
// minutes) as an inline SVG step line, scaled to the pool's desired size;
// the title says what it is.
function sparkline(p) {
  const ns = "http://www.w3.org/2000/svg";
  const w = 100, h = 18, now = Date.now();
  const points = history.get(p.namespace + "/" + p.name) || [];
  // The width spans what the page has seen: at least 10 s, at most 10 min.
  const span = Math.min(historySpan, Math.max(10000, points.length ? now - points[0].t : 0));
  const from = now - span;
  const top = Math.max(1, p.desired, ...points.map((q) => q.v));
  const x = (t) => ((Math.max(t, from) - from) / span) * w;
  const y = (v) => h - 1 - (v / top) * (h - 2);
  let d = "";
  for (const [i, q] of points.entries()) {
    const px = x(q.t).toFixed(1), py = y(q.v).toFixed(1);
    d += i === 0 ? `M${px} ${py}` : `H${px}V${py}`; // a step: level, then up or down
  }
  if (d) d += `H${w}`; // the last value holds until now
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("class", "spark");
  const title = document.createElementNS(ns, "title");
  title.textContent = "leases held since this page opened (up to 10 minutes); peak " + Math.max(0, ...points.map((q) => q.v));
  const path = document.createElementNS(ns, "path");
  if (d) path.setAttribute("d", d);
  svg.append(title, path);
  return svg;
}

// poolHistory is the pool page's samples from /ui/api/history (the server
// samples every pool each interval, whether or not a page is open), asked
// for again once an interval has passed.
let poolHistory = { key: "", fetchedAt: 0, intervalMillis: 30000, samples: [], loading: false };

function wantHistory(ns, name) {
  const key = ns + "/" + name;
  const h = poolHistory;
  if (h.loading || (h.key === key && Date.now() - h.fetchedAt < h.intervalMillis)) return;
  h.loading = true;
  const headers = token() ? { "Authorization": "Bearer " + token() } : {};
  fetch("/ui/api/history/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name), { headers, cache: "no-store" })
    .then((r) => (r.ok ? r.json() : null))
    .then((data) => {
      if (data) poolHistory = { key, fetchedAt: Date.now(), intervalMillis: data.intervalMillis || 30000, samples: data.samples, loading: false };
      else poolHistory.loading = false;
      render();
    })
    .catch(() => { poolHistory.loading = false; });
}

// chartSeries are the pool page's charts from its samples: leases held,
// the success rate of each interval (from the running totals'
// differences; a gap where nothing finished or a total went back), and
// the Ready members' mean probe latency.
function chartSeries(samples) {
  const success = [];
  for (let i = 1; i < samples.length; i++) {
    const ok = samples[i].ok - samples[i - 1].ok, all = samples[i].outcomes - samples[i - 1].outcomes;
    success.push({ t: samples[i].t, v: all > 0 && ok >= 0 && ok <= all ? (100 * ok) / all : null });
  }
  return [
    { title: "Leases held", unit: "", points: samples.map((s) => ({ t: s.t, v: s.leased })) },
    { title: "Success rate per interval", unit: "%", max: 100, points: success },
    { title: "Mean latency, Ready members", unit: " ms", points: samples.map((s) => ({ t: s.t, v: s.latencyMillis || null })) },
  ];
}

// lineChart draws points (null values are gaps) over the samples' span as
// an SVG line with its top value marked; the caption gives the latest.
function lineChart(series, from, to) {
  const ns = "http://www.w3.org/2000/svg";
  const w = 300, h = 80, pad = 14;
  const values = series.points.map((p) => p.v).filter((v) => v !== null);
  const top = series.max || Math.max(1, ...values);
  const x = (t) => pad + ((t - from) / Math.max(1, to - from)) * (w - 2 * pad);
  const y = (v) => h - pad - (v / top) * (h - 2 * pad);
  let d = "", pen = "M";
  for (const p of series.points) {
    if (p.v === null) { pen = "M"; continue; }
    d += pen + x(p.t).toFixed(1) + " " + y(p.v).toFixed(1);
    pen = "L";
  }
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("class", "chart");
  const axis = document.createElementNS(ns, "line");
  for (const [k, v] of [["x1", pad], ["x2", w - pad], ["y1", h - pad], ["y2", h - pad]]) axis.setAttribute(k, v);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", 0);
  label.setAttribute("y", 10);
  label.textContent = "max " + Math.round(top) + series.unit;
  const path = document.createElementNS(ns, "path");
  if (d) path.setAttribute("d", d);
  svg.append(axis, label, path);
  const last = values.length ? Math.round(values[values.length - 1] * 10) / 10 + series.unit : "–";
  const caption = el("figcaption", [series.title + ": ", el("b", last)]);
  const figure = el("figure", [caption, svg], "chart");
  figure.dataset.points = String(values.length);
  return figure;
}

function chartsSection(ns, name) {
  wantHistory(ns, name);
  const samples = poolHistory.key === ns + "/" + name ? poolHistory.samples : [];
  const span = samples.length ? Math.round((samples[samples.length - 1].t - samples[0].t) / 60000) : 0;
  const heading = el("h2", "Over the last " + (span < 1 ? "minute" : span + " min") + " (a sample each " + Math.round(poolHistory.intervalMillis / 1000) + " s)");
  if (!samples.length) return [heading, el("p", "No sample yet.", "empty")];
  const from = samples[0].t, to = samples[samples.length - 1].t;
  const charts = el("div", chartSeries(samples).map((s) => lineChart(s, from, to)), "charts");
  charts.id = "charts";
  return [heading, charts];
}

function showLogin(message) {
  setStatus("signed out", "down");
  $("content").replaceChildren();
  $("login").hidden = false;
  $("logout").hidden = true;
  $("login-error").textContent = message;
}

// el makes an element with text, or children.
function el(tag, content, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (Array.isArray(content)) e.append(...content);
  else if (content !== undefined && content !== null) e.textContent = String(content);
  return e;
}

function age(millis) {
  if (!millis) return "";
  let s = Math.max(0, Math.round((Date.now() - millis) / 1000));
  if (s < 120) return s + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  if (s < 172800) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

// table builds a table of rows; columns are [heading, value(row), class].
function table(columns, rows, id) {
  const t = el("table");
  if (id) t.id = id;
  const head = el("tr", columns.map(([h, , cls]) => el("th", h, cls)));
  t.append(el("thead", [head]));
  const body = el("tbody");
  for (const r of rows) {
    body.append(el("tr", columns.map(([, v, cls]) => {
      const value = v(r);
      return value instanceof Node ? el("td", [value], cls) : el("td", value, typeof cls === "function" ? cls(r) : cls);
    })));
  }
  t.append(body);
  return t;
}

function readyMeter(p) {
  const m = el("meter");
  m.min = 0;
  m.max = Math.max(1, p.desired);
  m.value = p.ready;
  m.title = p.ready + " of " + p.desired + " Ready";
  return m;
}

function poolLink(p) {
  const a = el("a", p.namespace + "/" + p.name);
  a.href = "#pool/" + encodeURIComponent(p.namespace) + "/" + encodeURIComponent(p.name);
  return a;
}

const leaseColumns = [
  ["Namespace", (l) => l.namespace], ["Pool", (l) => l.pool], ["Proxy", (l) => l.proxy],
  ["Holder", (l) => l.holder], ["Domain", (l) => l.domain], ["Age", (l) => age(l.grantedMillis), "num"],
];

function leasesSection(view, leases) {
  if (!view.leasesKnown) return [el("h2", "Leases in use"), el("p", "This replica does not lead: only the leader knows the leases.", "empty")];
  return [el("h2", "Leases in use (" + leases.length + ")"),
    leases.length ? table(leaseColumns, leases, "leases") : el("p", "No lease is held.", "empty")];
}

// eventsSection lists the latest events, newest first (kubectl describe
// lists them oldest first); Warning rows stand out.
function eventsSection(events, limit) {
  const shown = events.slice(0, limit);
  return [el("h2", "Recent events (" + shown.length + (events.length > shown.length ? " of " + events.length : "") + ")"),
    shown.length ? table([
      ["Age", (e) => age(e.lastMillis), "num"], ["Type", (e) => e.type, (e) => (e.type === "Warning" ? "error" : "")],
      ["Object", (e) => e.namespace + "/" + e.kind + "/" + e.name], ["Reason", (e) => e.reason],
      ["Message", (e) => e.message], ["Count", (e) => e.count, "num"],
    ], shown, "events") : el("p", "No recent event.", "empty")];
}

function renderFleet(view) {
  const pools = view.pools;
  const parts = [el("h2", "Pools (" + pools.length + ")")];
  if (!pools.length) {
    parts.push(el("p", latest.allNamespaces ? "No ProxyPool exists." : "No ProxyPool in a namespace you may list.", "empty"));
  } else {
    parts.push(table([
      ["Pool", poolLink], ["Provider", (p) => p.provider],
      ["Desired", (p) => p.desired, "num"], ["Ready", (p) => p.ready, "num"], ["", readyMeter],
      ["Available", (p) => p.available, "num"], ["Leased", (p) => p.leased, "num"], ["Leased, trend", sparkline],
      ["Burned", (p) => p.burned, "num"], ["Recycled (used up)", (p) => p.usedUp, "num"],
      ["Success", (p) => p.successRate || "–", "num"], ["Cost", (p) => p.cost || "–", "num"],
      ["Per 1,000 OK", (p) => p.costPer1000OK || "–", "num"],
    ], pools, "pools"));
  }
  const loose = view.members.filter((m) => !m.pool);
  if (loose.length) parts.push(el("h2", "Proxies of no pool (" + loose.length + ")"), membersTable(loose));
  parts.push(...leasesSection(view, view.leases));
  if (view.policies.length) parts.push(el("h2", "Crawl policies (" + view.policies.length + ")"), policiesTable(view.policies));
  parts.push(...eventsSection(view.events, 20));
  return parts;
}

// policiesTable has a row per rule of each CrawlPolicy ("*" is the default).
function policiesTable(policies) {
  const rules = [];
  for (const p of policies) {
    const note = p.valid === "False" ? "invalid: " + p.validMessage : "";
    if (!p.rules.length) rules.push({ policy: p, host: "", note: note || "no status yet" });
    for (const r of p.rules) rules.push(Object.assign({ policy: p, note }, r));
  }
  return table([
    ["Policy", (r) => r.policy.namespace + "/" + r.policy.name], ["Host", (r) => r.host],
    ["In use", (r) => r.inUse ?? "", "num"], ["Waited", (r) => r.waited ?? "", "num"],
    ["Refused", (r) => r.refused ?? "", "num"], ["Success", (r) => r.successRate || "–", "num"],
    ["Tier", (r) => r.tier || ""],
    ["", (r) => r.note, (r) => (r.policy.valid === "False" ? "error" : "muted")],
  ], rules, "policies");
}

// coolingDown names the domains a member keeps away from after bans, the
// latest-ending first, and counts the rest.
function coolingDown(m) {
  const named = (m.coolingDown || []).join(", ");
  const more = m.coolingDownTotal - (m.coolingDown || []).length;
  return more > 0 ? named + " +" + more : named;
}

function membersTable(members) {
  return table([
    ["Proxy", (m) => m.namespace + "/" + m.name], ["Phase", (m) => m.phase, (m) => "phase-" + m.phase],
    ["Exit IP", (m) => m.exitIP], ["Country", (m) => m.exitCountry], ["Latency", (m) => m.latencyMillis ? m.latencyMillis + " ms" : "", "num"],
    ["Leases", (m) => m.leases, "num"], ["Cooling down for", coolingDown],
    ["Age", (m) => age(m.createdMillis), "num"], ["Leaving", (m) => m.leaving],
  ], members, "members");
}

function renderPool(view, ns, name) {
  const pool = view.pools.find((p) => p.namespace === ns && p.name === name);
  if (!pool) return [el("p", "No ProxyPool " + ns + "/" + name + " that you may list.", "empty")];
  const members = view.members.filter((m) => m.namespace === ns && m.pool === name);
  const parts = [el("h2", "Pool " + ns + "/" + name + ": " + pool.ready + " of " + pool.desired + " Ready")];
  parts.push(table([["Condition", (c) => c.type], ["Status", (c) => c.status, (c) => (c.status === "False" && c.type !== "Progressing" ? "cond-False" : "")],
    ["Reason", (c) => c.reason], ["Message", (c) => c.message]], pool.conditions, "conditions"));
  parts.push(...chartsSection(ns, name));
  parts.push(el("h2", "Members (" + members.length + ")"), membersTable(members));
  parts.push(...leasesSection(view, view.leases.filter((l) => l.namespace === ns && l.pool === name)));
  parts.push(...eventsSection(view.events.filter((e) => e.namespace === ns && e.pool === name), 50));
  return parts;
}

function render() {
  if (!latest) return;
  $("user").textContent = latest.user;
  const route = location.hash.slice(1).split("/").map(decodeURIComponent);
  const parts = route[0] === "pool" && route.length === 3
    ? renderPool(latest.view, route[1], route[2])
    : renderFleet(latest.view);
  $("content").replaceChildren(...parts);
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(tokenKey, $("token").value.trim());
  $("token").value = "";
  connect();
});
$("logout").addEventListener("click", () => {
  sessionStorage.removeItem(tokenKey);
  location.reload();
});
window.addEventListener("hashchange", render);
setInterval(render, 5000); // ages
start();

// start signs in first when the operator wants a token and the tab has none.
async function start() {
  if (!token()) {
    try {
      const resp = await fetch("/ui/api/login", { cache: "no-store" });
      if (resp.ok && (await resp.json()).tokenRequired) return showLogin("");
    } catch (e) {
      return reconnect("offline");
    }
  }
  connect();
}
