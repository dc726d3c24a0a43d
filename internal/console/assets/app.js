// capstan console. Every page lists and then watches what it shows
// through /api/kubernetes (the user's own token on the server side), so
// it changes as the cluster does, without a reload.

const session = { user: "", csrf: "", prometheus: false };

// The session's secret: the login's answer hands it over, and every
// request carries it, beside the cookie. It lives in this origin's
// sessionStorage (per scheme, host and port), so no page served from
// another port of this host can read it, though its browser sends it
// the console's cookie.
const secretKey = "capstan-console-session-secret";
const secret = {
  get: () => sessionStorage.getItem(secretKey) || "",
  set: (v) => (v ? sessionStorage.setItem(secretKey, v) : sessionStorage.removeItem(secretKey)),
};

// ---- HTTP ---------------------------------------------------------------

class HTTPError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// call asks the console's server; a signal (a Page's) cancels it.
async function call(method, path, body, signal) {
  const headers = { Accept: "application/json", "X-Capstan-Session": secret.get() };
  if (method !== "GET") headers["X-CSRF-Token"] = session.csrf;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = typeof body === "string" ? "application/merge-patch+json" : "application/json";
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  const resp = await fetch(path, { method, headers, body: payload, credentials: "same-origin", signal });
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) {
    if (resp.status === 401 && path !== "/api/login") showLogin("Your session has ended: log in again.");
    const msg = (data && data.message) || text.trim() || resp.statusText;
    throw new HTTPError(resp.status, msg);
  }
  return data;
}

const kube = (path) => "/api/kubernetes" + path;

// riskLink links a conditional update's risk to its URL, which the update
// service chose: an http or https one only (a javascript: or data: URL is
// shown as text, never followed).
export function riskLink(u) {
  try {
    const p = new URL(u);
    if (p.protocol === "https:" || p.protocol === "http:") return h("a", { href: p.href, rel: "noreferrer" }, u);
  } catch {
    // not a URL: shown as text
  }
  return h("span", {}, u || "");
}

// ---- DOM ----------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) listen(el, k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// An element's handlers live in el._on and are reached through one
// dispatcher, so that morph can hand a redrawn element's handlers (and
// the data they close over) to the element already on the page.
function dispatch(ev) {
  const f = this._on && this._on[ev.type];
  if (f) return f.call(this, ev);
}

function listen(el, type, fn) {
  (el._on || (el._on = {}))[type] = fn;
  el.addEventListener(type, dispatch);
}

// morph makes the element on the page look like a freshly drawn one
// while keeping the elements themselves: a button a person is about to
// press, the focus, a ticked box and a scroll position outlive a watch
// event. Rows with a data-key are matched by key, the rest by position.
function morph(from, to) {
  if (from.nodeType !== to.nodeType || from.nodeName !== to.nodeName) {
    from.replaceWith(to);
    return;
  }
  if (from.nodeType !== Node.ELEMENT_NODE) {
    if (from.nodeValue !== to.nodeValue) from.nodeValue = to.nodeValue;
    return;
  }
  for (const a of [...from.attributes]) if (!to.hasAttribute(a.name)) from.removeAttribute(a.name);
  for (const a of [...to.attributes]) if (from.getAttribute(a.name) !== a.value) from.setAttribute(a.name, a.value);
  for (const type of Object.keys(to._on || {})) from.addEventListener(type, dispatch);
  from._on = to._on;
  morphChildren(from, [...to.childNodes]);
}

function morphChildren(parent, want) {
  const keyOf = (n) => (n.nodeType === Node.ELEMENT_NODE && n.dataset ? n.dataset.key : undefined);
  const keyed = new Map();
  for (const c of parent.children) if (keyOf(c) !== undefined) keyed.set(keyOf(c), c);
  // Everything before position i is final; a keyed element not yet
  // claimed sits at i or after.
  want.forEach((w, i) => {
    const cur = parent.childNodes[i] || null;
    const key = keyOf(w);
    if (key !== undefined) {
      const match = keyed.get(key);
      if (!match) {
        parent.insertBefore(w, cur);
        return;
      }
      keyed.delete(key); // a repeated key is matched once
      if (match !== cur) parent.insertBefore(match, cur);
      morph(match, w);
      return;
    }
    if (cur && keyOf(cur) === undefined) morph(cur, w);
    else parent.insertBefore(w, cur);
  });
  while (parent.childNodes.length > want.length) parent.lastChild.remove();
}

// nodes flattens what a view returns into nodes, leaving out the empty.
function nodes(content) {
  return [].concat(content).flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
}

function table(caption, columns, rows, empty) {
  if (!rows.length) return h("p", { class: "muted" }, empty || "None.");
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.title || c)))),
    h("tbody", {}, rows.map((r) => h("tr", { "data-key": typeof r[0] === "string" ? r[0] : null }, r.map((cell, i) =>
      i === 0 ? h("th", { scope: "row" }, cell) : h("td", { class: columns[i].num ? "num" : null }, cell))))));
}

// clipped is a cell's content in a box of the row's height; what it
// cuts off is in its title, unless the cell holds controls.
function clipped(cell) {
  const c = h("div", { class: "clip" }, cell);
  if (!c.querySelector("button")) c.title = c.textContent.trim();
  return c;
}

// windowed draws a table of many rows but only those in view: a scroll
// box whose rows all have one height (their cells clip), with a spacer
// row above and below standing for the rest. aria-rowcount and
// aria-rowindex tell assistive technology where the drawn rows sit.
// Scrolling redraws the page (p.redraw), once a frame.
function windowed(p, id, caption, columns, items, row, empty) {
  if (!items.length) return h("p", { class: "muted", "data-key": id }, empty || "None.");
  const box = document.getElementById(id);
  const rowH = p.rowHeight || 64;
  const viewH = box ? box.clientHeight : Math.round(window.innerHeight * 0.7);
  const top = box ? box.scrollTop : 0;
  const overscan = 10;
  const first = Math.max(0, Math.min(items.length, Math.floor(top / rowH) - overscan));
  const last = Math.max(first, Math.min(items.length, Math.ceil((top + viewH) / rowH) + overscan));
  const spacer = (k, n) => h("tr", { class: "spacer", "aria-hidden": "true", "data-key": k, "data-h": n * rowH }, h("td", { colspan: columns.length }));
  return h("div", { id, "data-key": id, class: "window", tabindex: 0, role: "region", "aria-label": caption, onscroll: () => p.redraw() },
    h("table", { "aria-rowcount": items.length + 1 },
      h("caption", {}, caption),
      h("thead", {}, h("tr", { "aria-rowindex": 1 }, columns.map((c) => h("th", { scope: "col", class: c.class || null }, c.title || c)))),
      h("tbody", {},
        spacer("\u0000above", first),
        items.slice(first, last).map((it, i) => h("tr", { "data-key": key(it), "aria-rowindex": first + i + 2 }, row(it).map((cell, j) =>
          h(j === 0 ? "th" : "td", j === 0 ? { scope: "row" } : {}, clipped(cell))))),
        spacer("\u0000below", items.length - last))));
}

function notice(kind, text) {
  return h("div", { class: "alert " + kind, role: kind === "error" ? "alert" : "status" }, text);
}

function age(ts) {
  if (!ts) return "";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(ts)) / 1000));
  if (s < 120) return s + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  if (s < 172800) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

const cond = (obj, type) => ((obj.status && obj.status.conditions) || []).find((c) => c.type === type);
const key = (o) => (o.metadata.namespace ? o.metadata.namespace + "/" : "") + o.metadata.name;
const byName = (a, b) => key(a).localeCompare(key(b));

function statusCell(c, goodWhen) {
  if (!c) return h("span", { class: "muted" }, "Unknown");
  const good = c.status === goodWhen;
  return h("span", { class: good ? "ok" : "bad", title: c.message || "" }, c.status + (c.reason ? " (" + c.reason + ")" : ""));
}

// ---- watches ------------------------------------------------------------

// Watch lists a collection a page at a time, then watches it from the
// list's resourceVersion; a watch that ends is resumed, one that expired
// (410) relists. Failures back off, from 1 s to 30 s with jitter, and
// so does a watch that ends at once. onChange gets the objects in name
// order, at most every 100 ms; trim makes each object what the page
// needs of it, so that a page over 5,000 nodes holds 5,000 small ones.
class Watch {
  constructor(path, { onChange, onError, onState, trim, signal }) {
    this.path = path;
    this.items = new Map();
    this.order = null;
    this.onChange = onChange;
    this.onError = onError;
    this.onState = onState;
    this.trim = trim || dropManagedFields;
    this.signal = signal;
    this.stopped = false;
    this.socket = null;
    this.timer = null;
    this.synced = false;
    this.failures = 0;
    this.run();
  }

  stop() {
    this.stopped = true;
    if (this.socket) {
      this.socket.onclose = null;
      this.socket.close();
    }
    clearTimeout(this.timer);
  }

  // list is the objects in name order; the order is worked out again
  // only when an object came or went.
  list() {
    if (!this.order) this.order = [...this.items.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return this.order.map((k) => this.items.get(k));
  }

  put(o) {
    const k = key(o);
    if (!this.items.has(k)) this.order = null;
    this.items.set(k, this.trim(o));
  }

  changed() {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.stopped) this.onChange(this.list(), this.synced, this.synced ? this.items.size : this.total);
    }, 100);
  }

  url(extra) {
    const sep = this.path.includes("?") ? "&" : "?";
    return kube(this.path) + (extra ? sep + extra : "");
  }

  // relist reads the collection 100 objects, then 500 at a time. The
  // first list shows each page as it comes (the first rows after one
  // small read); a relist replaces what is shown only once complete.
  async relist() {
    const first = !this.synced;
    const items = first ? this.items : new Map();
    if (first) items.clear();
    let cont = "", rv = "";
    do {
      const limit = cont ? 500 : 100;
      const list = await call("GET", this.url(`limit=${limit}` + (cont ? "&continue=" + encodeURIComponent(cont) : "")), undefined, this.signal);
      for (const o of list.items || []) items.set(key(o), this.trim(o));
      // The first page says how many objects there are in all.
      if (first && !cont && list.metadata.remainingItemCount !== undefined) this.total = items.size + list.metadata.remainingItemCount;
      cont = list.metadata.continue || "";
      rv = list.metadata.resourceVersion;
      if (first && cont) {
        this.order = null;
        this.changed();
      }
    } while (cont && !this.stopped);
    this.items = items;
    this.order = null;
    this.synced = true;
    this.changed();
    return rv;
  }

  backoff() {
    const ms = Math.min(30000, 1000 * 2 ** Math.min(this.failures, 5));
    this.failures++;
    return new Promise((r) => setTimeout(r, ms / 2 + Math.random() * (ms / 2)));
  }

  async run() {
    let rv = "";
    while (!this.stopped) {
      try {
        if (!rv) rv = await this.relist();
        this.state(true);
        const began = Date.now();
        rv = await this.watch(rv);
        // A watch that ends at once (a proxy that closes it, say) is not
        // resumed at once: that would be a busy loop.
        if (Date.now() - began < 5000) await this.backoff();
        else this.failures = 0;
      } catch (e) {
        if (this.stopped || e.name === "AbortError") return;
        if (e.status === 403 || e.status === 404 || e.status === 401) {
          this.onError(e);
          return;
        }
        this.state(false, e.message);
        rv = "";
        await this.backoff();
      }
    }
  }

  // state tells the page whether what it shows is live or as read last.
  state(live, why) {
    if (live) this.lastLive = Date.now();
    if (this.onState && this.live !== live) {
      this.live = live;
      this.onState(live, why || "", this.lastLive);
    }
  }

  // watch follows the collection over a WebSocket, as OpenShift's console
  // does: a browser holds at most six HTTP/1.1 connections to a host, and a
  // page's watches would take them all. Each message is one watch event.
  watch(rv) {
    return new Promise((resolve, reject) => {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      // A WebSocket carries no headers of its own: the secret goes as its
      // subprotocol.
      const ws = new WebSocket(scheme + location.host + this.url("watch=1&allowWatchBookmarks=true&resourceVersion=" + encodeURIComponent(rv)),
        ["capstan.session." + secret.get()]);
      this.socket = ws;
      let opened = false;
      ws.onopen = () => { opened = true; };
      ws.onmessage = (m) => {
        const ev = JSON.parse(m.data);
        if (ev.type === "ERROR") {
          ws.onclose = null;
          ws.close();
          if (ev.object && ev.object.code === 410) resolve("");
          else reject(new HTTPError((ev.object && ev.object.code) || 500, (ev.object && ev.object.message) || "watch error"));
          return;
        }
        rv = ev.object.metadata.resourceVersion || rv;
        if (ev.type === "BOOKMARK") return;
        if (ev.type === "DELETED") {
          this.items.delete(key(ev.object));
          this.order = null;
        } else this.put(ev.object);
        this.changed();
      };
      // A socket that never opened was refused: the list says why.
      ws.onclose = () => (opened ? resolve(rv) : reject(new HTTPError(0, "the watch was refused")));
    });
  }
}

// dropManagedFields keeps an object but its managedFields, which no page
// shows and which can be most of its size.
function dropManagedFields(o) {
  if (o.metadata) delete o.metadata.managedFields;
  return o;
}

// A page owns its watches and timers; leaving it stops them.
class Page {
  constructor(title) {
    this.watches = [];
    this.timers = [];
    this.data = {};
    this.errors = {};
    this.absent = {};
    this.partial = {};
    this.totals = {};
    this.stale = {};
    this.access = new Map();
    // Leaving the page cancels what it still asks.
    this.aborter = new AbortController();
    this.main = document.getElementById("main");
    this.title = title;
    document.title = title + " · capstan console";
  }

  // watch keeps this.data[name] the objects at path (trimmed by trim,
  // if given) and redraws the page as they change. A collection whose
  // API is not installed (404) is absent, not an error.
  watch(name, path, trim) {
    this.data[name] = null;
    this.watches.push(new Watch(path, {
      trim,
      signal: this.aborter.signal,
      onChange: (items, complete, total) => {
        this.data[name] = items;
        this.partial[name] = !complete;
        this.totals[name] = total;
        delete this.errors[name];
        this.render();
      },
      onError: (e) => {
        if (e.status === 404) this.absent[name] = true;
        else this.errors[name] = e.message;
        this.data[name] = [];
        this.render();
      },
      onState: (live, why, since) => {
        if (live) delete this.stale[name];
        else this.stale[name] = { why, since };
        this.render();
      },
    }));
  }

  // can is whether the user may verb resource (in group, with
  // subresource, in namespace: "" for all), as one
  // SelfSubjectAccessReview per question and page answers: true, false,
  // or undefined until it answers. A review that fails counts as
  // allowed: the API server still refuses what it refuses, and says why.
  can(verb, group, resource, subresource = "", namespace = "") {
    const k = [verb, group, resource, subresource, namespace].join(" ");
    if (!this.access.has(k)) {
      this.access.set(k, undefined);
      this.call("POST", kube("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"), {
        apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectAccessReview",
        spec: { resourceAttributes: { verb, group, resource, subresource, namespace } },
      }).then((r) => this.access.set(k, !!(r && r.status && r.status.allowed)), () => this.access.set(k, true))
        .then(() => this.render());
    }
    return this.access.get(k);
  }

  // refused names what of needs ([verb, group, resource, subresource,
  // namespace] each) RBAC refuses, or "" when it refuses nothing.
  refused(...needs) {
    return needs.filter((n) => this.can(...n) === false)
      .map(([verb, group, resource, sub]) => `${verb} ${resource}${sub ? "/" + sub : ""}${group ? "." + group : ""}`).join(", ");
  }

  // call asks the server on this page's behalf: leaving it cancels.
  call(method, path, body) {
    return call(method, path, body, this.aborter.signal);
  }

  every(ms, fn) {
    fn();
    this.timers.push(setInterval(fn, ms));
  }

  // poll calls fn (which returns a promise) now, and again ms after each
  // answer: a slow answer is not asked for again before it came.
  poll(ms, fn) {
    const next = () => {
      if (this.stopped) return;
      Promise.resolve(fn()).finally(() => {
        if (!this.stopped) this.timers.push(setTimeout(next, ms));
      });
    };
    next();
  }

  stop() {
    this.stopped = true;
    this.aborter.abort();
    this.watches.forEach((w) => w.stop());
    this.timers.forEach((t) => { clearInterval(t); clearTimeout(t); });
  }

  ready(...names) {
    return names.every((n) => this.data[n] !== null && this.data[n] !== undefined);
  }

  // render redraws the live part of the page; what a person is typing
  // into (the forms) is kept outside it.
  render() {
    const live = this.live || (this.live = h("div", { "aria-live": "off" }));
    morphChildren(live, nodes(this.view()));
    if (!this.mounted) {
      this.mounted = true;
      this.main.replaceChildren(h("h1", {}, this.title), this.status || "", ...(this.forms ? [this.forms()] : []), live);
    }
    // Heights are set here: the page's style policy allows no inline
    // style attribute, only styles set by script.
    for (const el of live.querySelectorAll("[data-h]")) el.style.height = el.dataset.h + "px";
    const row = live.querySelector(".window tbody tr[aria-rowindex]");
    if (row && row.offsetHeight && row.offsetHeight !== this.rowHeight) {
      this.rowHeight = row.offsetHeight;
      this.redraw();
    }
  }

  // redraw renders at the next frame, once however often it is asked.
  redraw() {
    if (this.frame || this.stopped) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      if (!this.stopped) this.render();
    });
  }

  // errorsView says what could not be read, and what is shown as read
  // last while its watch reconnects.
  errorsView() {
    const stale = Object.entries(this.stale);
    return [
      ...Object.entries(this.errors).map(([what, msg]) => notice("error", "Cannot read " + what + ": " + msg)),
      stale.length ? notice("warning", "Reconnecting to the API (" + stale.map(([what, s]) => `${what}: ${s.why}`).join("; ") + "): what is shown was read " +
        (stale[0][1].since ? "at " + new Date(Math.min(...stale.map(([, s]) => s.since || Date.now()))).toLocaleTimeString() : "before") + ".") : null,
    ];
  }

  // count is how many of name there are: "…" while unknown; while its
  // first list is still coming in, the total its first page gave (or
  // the count so far, followed by "…").
  count(name) {
    if (!this.ready(name)) return "…";
    if (!this.partial[name]) return String(this.data[name].length);
    return this.totals[name] !== undefined ? String(this.totals[name]) : this.data[name].length + "…";
  }

  // installed is false once name's API answered that it does not exist.
  installed(name) {
    return !this.absent[name];
  }
}

// A form's outcome, shown beside it.
function outcome(el, promise, ok) {
  el.replaceChildren(notice("info", "Working…"));
  return promise.then((res) => {
    const parts = [notice("info", (res && res.message) || ok || "Done.")];
    for (const w of (res && res.warnings) || []) parts.push(notice("warning", w));
    el.replaceChildren(...parts);
  }, (e) => el.replaceChildren(notice("error", e.message)));
}

// confirmAction asks before what cannot be taken back, in a modal
// dialog that names what will happen: it resolves true when the person
// confirms, false when they cancel or press Escape.
function confirmAction(title, body, confirmLabel) {
  return new Promise((resolve) => {
    const d = h("dialog", { class: "confirm", "aria-labelledby": "confirm-title" },
      h("h2", { id: "confirm-title" }, title),
      ...body,
      h("form", { method: "dialog", class: "inline" },
        h("button", { type: "submit", value: "cancel", class: "secondary", "data-cancel": "" }, "Cancel"),
        h("button", { type: "submit", value: "confirm", "data-confirm": "" }, confirmLabel)));
    d.addEventListener("close", () => {
      d.remove();
      resolve(d.returnValue === "confirm");
    });
    document.body.append(d);
    d.showModal();
  });
}

// ---- pages --------------------------------------------------------------

const pages = {};

pages.overview = () => {
  const p = new Page("Overview");
  p.watch("clusterversions", "/apis/config.openshift.io/v1/clusterversions");
  p.watch("operators", "/apis/config.openshift.io/v1/clusteroperators");
  // Nodes and Machines are counted: each is kept as its name and the
  // one field counted.
  p.watch("nodes", "/api/v1/nodes", (n) => ({ metadata: { name: n.metadata.name }, status: { conditions: [cond(n, "Ready")].filter(Boolean) } }));
  p.watch("machines", "/apis/machine.openshift.io/v1beta1/machines",
    (m) => ({ metadata: { name: m.metadata.name, namespace: m.metadata.namespace }, status: { phase: (m.status || {}).phase } }));
  p.watch("pools", "/apis/machineconfiguration.openshift.io/v1/machineconfigpools");
  p.alerts = null;
  p.charts = {};
  const charts = [
    ["Pending pods", 'sum(kube_pod_status_phase{phase="Pending"})'],
    ["Nodes", "count(kube_node_info)"],
    ["Pods scheduled per second", 'sum(rate(scheduler_schedule_attempts_total{result="scheduled"}[5m]))'],
  ];
  if (session.prometheus) {
    p.every(15000, async () => {
      try {
        const res = await p.call("GET", "/api/prometheus/api/v1/alerts");
        p.alerts = res.data.alerts.filter((a) => a.state === "firing");
        delete p.errors.alerts;
      } catch (e) {
        p.alerts = [];
        p.errors.alerts = e.message;
      }
      const end = Date.now() / 1000;
      for (const [title, q] of charts) {
        try {
          const qs = new URLSearchParams({ query: q, start: end - 3600, end, step: 15 });
          const res = await p.call("GET", "/api/prometheus/api/v1/query_range?" + qs);
          const series = ((res.data || {}).result || [])[0];
          p.charts[title] = ((series && series.values) || []).map(([t, v]) => [Number(t), Number(v)]);
          delete p.errors["the chart " + title];
        } catch (e) {
          p.errors["the chart " + title] = e.message;
        }
      }
      p.render();
    });
  }
  p.view = () => {
    const cv = (p.data.clusterversions || [])[0];
    const ops = p.data.operators || [];
    const nodes = p.data.nodes || [];
    const machines = p.data.machines || [];
    const pools = p.data.pools || [];
    const notReady = nodes.filter((n) => (cond(n, "Ready") || {}).status !== "True").length;
    const degraded = ops.filter((o) => (cond(o, "Degraded") || {}).status === "True");
    const unavailable = ops.filter((o) => (cond(o, "Available") || {}).status !== "True");
    const updating = pools.filter((pl) => (cond(pl, "Updating") || {}).status === "True").length;
    const running = machines.filter((m) => (m.status || {}).phase === "Running").length;
    const prog = cv && cond(cv, "Progressing");
    return [
      ...p.errorsView(),
      h("div", { class: "cards" },
        h("section", { class: "card", "aria-labelledby": "ov-version" },
          h("h2", { id: "ov-version" }, "Cluster version"),
          h("p", { class: "big" }, cv ? cv.status?.desired?.version || "unknown" : p.ready("clusterversions") ? "none" : "…"),
          cv ? h("p", {}, "Channel: ", cv.spec.channel || "none") : p.ready("clusterversions") ? h("p", { class: "muted" }, "No Cluster Version Operator") : null,
          prog ? h("p", { class: prog.status === "True" ? "warn" : "muted" }, prog.message) : null),
        h("section", { class: "card", "aria-labelledby": "ov-nodes" },
          h("h2", { id: "ov-nodes" }, "Nodes"),
          h("p", { class: "big" }, p.count("nodes")),
          !p.ready("nodes") || p.partial.nodes ? h("p", { class: "muted" }, `Reading their readiness (${nodes.length} so far)…`)
            : h("p", { class: notReady ? "bad" : "ok" }, notReady ? notReady + " not ready" : "All ready")),
        h("section", { class: "card", "aria-labelledby": "ov-machines" },
          h("h2", { id: "ov-machines" }, "Machines"),
          p.installed("machines") ? [h("p", { class: "big" }, p.count("machines")),
            h("p", {}, running + " running" + (!p.ready("machines") || p.partial.machines ? " (reading…)" : ""))]
            : h("p", { class: "muted" }, "The Machine API is not installed.")),
        h("section", { class: "card", "aria-labelledby": "ov-pools" },
          h("h2", { id: "ov-pools" }, "Machine config pools"),
          p.installed("pools") ? [h("p", { class: "big" }, p.count("pools")),
            h("p", { class: updating ? "warn" : "ok" }, updating ? updating + " updating" : "All up to date")]
            : h("p", { class: "muted" }, "The Machine Config Operator is not installed.")),
        h("section", { class: "card", "aria-labelledby": "ov-ops" },
          h("h2", { id: "ov-ops" }, "Cluster operators"),
          h("p", { class: "big" }, ops.length),
          h("p", { class: degraded.length || unavailable.length ? "bad" : "ok" },
            degraded.length || unavailable.length
              ? [degraded.length + " degraded", ", ", unavailable.length + " unavailable"]
              : "All available"))),
      h("h2", {}, "Firing alerts"),
      !session.prometheus ? h("p", { class: "muted" }, "This console has no Prometheus to ask.")
        : p.alerts === null ? h("p", {}, "Loading…")
          : table("Firing alerts", ["Alert", "Severity", "Summary", "Since"], p.alerts.map((a) => [
            a.labels.alertname, a.labels.severity || "",
            (a.annotations && (a.annotations.summary || a.annotations.description || a.annotations.message)) || "",
            age(a.activeAt)]), "No alert is firing."),
      session.prometheus ? [h("h2", {}, "The last hour"), h("div", { class: "cards" }, charts.map(([title]) =>
        h("section", { class: "card" }, h("h3", {}, title), chart(title, p.charts[title] || []))))] : null,
      h("h2", {}, "Cluster operators"),
      table("Cluster operators", ["Name", "Version", "Available", "Progressing", "Degraded"], ops.map((o) => [
        o.metadata.name,
        (((o.status || {}).versions || []).find((v) => v.name === "operator") || {}).version || "",
        statusCell(cond(o, "Available"), "True"),
        statusCell(cond(o, "Progressing"), "False"),
        statusCell(cond(o, "Degraded"), "False"),
      ])),
    ];
  };
  return p;
};

// chart draws a series as an SVG line over the last hour.
function chart(title, points) {
  const w = 320, ht = 120, pad = 28;
  if (!points.length) return h("p", { class: "muted" }, "No data yet.");
  const xs = points.map((q) => q[0]), ys = points.map((q) => q[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const yMax = Math.max(1, ...ys);
  const px = (x) => pad + ((x - x0) / (x1 - x0)) * (w - pad - 6);
  const py = (y) => ht - pad + 8 - (y / yMax) * (ht - pad);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const last = ys[ys.length - 1];
  svg.setAttribute("viewBox", `0 0 ${w} ${ht}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${title}: ${Number(last.toFixed(3))} now, at most ${Number(yMax.toFixed(3))} in the last hour`);
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  el("line", { class: "axis", x1: pad, y1: ht - pad + 8, x2: w - 6, y2: ht - pad + 8 });
  el("line", { class: "axis", x1: pad, y1: 8, x2: pad, y2: ht - pad + 8 });
  el("text", { x: 2, y: 14 }, Number(yMax.toFixed(2)));
  el("text", { x: 2, y: ht - pad + 8 }, "0");
  el("text", { x: pad, y: ht - 4 }, "-1h");
  el("text", { x: w - 30, y: ht - 4 }, "now");
  if (points.length === 1) el("circle", { class: "dot", cx: px(points[0][0]), cy: py(points[0][1]), r: 3 });
  else el("polyline", { class: "line", points: points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" ") });
  return svg;
}

pages.pending = () => {
  const p = new Page("Pending pods");
  p.watch("pods", "/api/v1/pods?fieldSelector=" + encodeURIComponent("spec.nodeName=,status.phase=Pending"));
  p.watch("scaleUpEvents", "/api/v1/events?fieldSelector=" + encodeURIComponent("involvedObject.kind=Pod,source=cluster-autoscaler"));
  // Every pending pod is explained at once, on one read of the cluster
  // that the server shares among the user's tabs for 10 s; the next
  // question goes 10 s after the last answer came.
  p.explained = new Map();
  p.explainTotal = 0;
  p.explainError = "";
  p.poll(10000, () => p.call("GET", "/api/capstan/pending/explain").then((r) => {
    p.explained = new Map(r.pods.map((e) => [e.namespace + "/" + e.name, e]));
    p.explainTotal = r.total;
    p.explainError = "";
  }, (e) => {
    p.explainError = e.message;
  }).then(() => p.render()));
  p.view = () => {
    if (!p.ready("pods")) return [...p.errorsView(), h("p", {}, "Loading…")];
    const pods = p.data.pods;
    const events = p.data.scaleUpEvents || [];
    return [
      ...p.errorsView(),
      p.explainError ? notice("error", "Cannot explain: " + p.explainError) : null,
      pods.length ? h("p", {}, pods.length + " pod(s) wait for a node.") : h("p", { class: "ok" }, "No pod is pending."),
      p.explainTotal > p.explained.size ? h("p", { class: "muted" }, `The oldest ${p.explained.size} of ${p.explainTotal} are explained.`) : null,
      pods.map((pod) => {
        const k = key(pod);
        const e = p.explained.get(k);
        const sched = cond(pod, "PodScheduled");
        const evs = events.filter((ev) => ev.involvedObject.namespace === pod.metadata.namespace && ev.involvedObject.name === pod.metadata.name)
          .sort((a, b) => Date.parse(b.lastTimestamp || b.eventTime || 0) - Date.parse(a.lastTimestamp || a.eventTime || 0));
        const id = "pod-" + k.replace(/[^a-z0-9-]/g, "-");
        return h("section", { class: "card", "aria-labelledby": id, "data-pod": k },
          h("h2", { id }, k),
          h("p", {}, "Scheduler: ", pod.spec.schedulerName || "default-scheduler", " · waiting ", age(pod.metadata.creationTimestamp)),
          sched?.message ? h("p", { class: "bad" }, sched.reason + ": " + sched.message) : null,
          e ? explanation(e) : h("p", {}, "Asking the scheduler…"),
          evs.length ? h("p", {}, "Autoscaler event: ", h("strong", {}, evs[0].reason), " ", evs[0].message) : null);
      }),
    ];
  };
  return p;
};

// explanation shows a pod's verdict: the nodes rejected, grouped by why
// (a count and the first names), and the best of the nodes it fits.
function explanation(e) {
  const rejected = e.rejected ?? [];
  const fits = e.nodes ?? [];
  const prios = fits.length ? e.priorities ?? [] : [];
  const names = (r) => r.nodes.join(", ") + (r.count > r.nodes.length ? ` and ${r.count - r.nodes.length} more` : "");
  return [
    e.summary ? h("p", {}, h("strong", {}, "Why: "), e.summary) : null,
    e.preemption ? h("p", {}, h("strong", {}, "Preemption: "), e.preemption) : null,
    e.gates?.length ? h("p", {}, "Scheduling gates: " + e.gates.join(", ")) : null,
    rejected.length ? h("div", { class: "scroll", tabindex: 0, role: "region", "aria-label": "Nodes rejected, by reason" },
      table("Nodes rejected, by reason", ["Reason", { title: "Nodes", num: true }, "Which"],
        rejected.map((r) => [h("span", { class: "bad" }, r.reason), String(r.count), names(r)]))) : null,
    fits.length ? h("div", { class: "scroll", tabindex: 0, role: "region", "aria-label": "Nodes it fits" },
      table(`Nodes it fits (${fits.length < e.fitting ? `the best ${fits.length} of ` : ""}${e.fitting})`,
        ["Node", "Verdict", ...prios.map((pr) => ({ title: `${pr.name} (×${pr.weight})`, num: true })), { title: "Total", num: true }],
        fits.map((n) => [n.name, h("span", { class: "ok" }, n.selected ? "fits, selected" : "fits"),
          ...prios.map((_, i) => String(n.scores?.[i] ?? "-")), String(n.total)]))) : null,
    h("p", { class: "muted" }, "Predicates: " + (e.predicates ?? []).join(", ")),
    e.autoscaler ? h("div", {}, h("p", {}, h("strong", {}, "Autoscaler: "), e.autoscaler.message),
      h("ul", {}, Object.entries(e.autoscaler.groups ?? {}).sort().map(([g, why]) => h("li", {}, g + ": " + why))))
      : e.autoscalerError ? h("p", { class: "muted" }, "Autoscaler: " + e.autoscalerError) : null,
  ];
}

// selects is a label selector's verdict on labels, as the API server
// gives it: every matchLabels pair and every matchExpression (In, NotIn,
// Exists, DoesNotExist) must hold; an empty selector selects every
// object and none (null) selects none.
function selects(sel, labels) {
  if (!sel) return false;
  const l = labels || {};
  const has = (k) => Object.prototype.hasOwnProperty.call(l, k);
  for (const [k, v] of Object.entries(sel.matchLabels || {})) if (l[k] !== v) return false;
  for (const e of sel.matchExpressions || []) {
    const vals = e.values || [];
    const ok = e.operator === "In" ? has(e.key) && vals.includes(l[e.key])
      : e.operator === "NotIn" ? !has(e.key) || !vals.includes(l[e.key])
        : e.operator === "Exists" ? has(e.key)
          : e.operator === "DoesNotExist" ? !has(e.key)
            : false;
    if (!ok) return false;
  }
  return true;
}

const roles = (n) => Object.keys(n.metadata.labels || {}).filter((l) => l.startsWith("node-role.kubernetes.io/"))
  .map((l) => l.slice("node-role.kubernetes.io/".length)).sort().join(",");
const MC = "machineconfiguration.openshift.io/";
// poolOf names the pool a rendered config is of (rendered-POOL-HASH).
const poolOf = (rendered) => rendered.replace(/^rendered-/, "").replace(/-[0-9a-f]{32}$/, "");

pages.nodes = () => {
  const p = new Page("Nodes");
  // Kept without what no column shows: the images a kubelet lists are
  // most of a node's size.
  p.watch("nodes", "/api/v1/nodes", (n) => {
    dropManagedFields(n);
    if (n.status) delete n.status.images;
    return n;
  });
  p.filter = "";
  p.sort = "name";
  p.scale = null;
  p.poll(10000, () => p.call("GET", "/api/capstan/nodes/explain").then((s) => {
    p.scale = s;
    delete p.errors["the autoscaler's view"];
  }, (e) => {
    p.errors["the autoscaler's view"] = e.message;
  }).then(() => p.render()));
  p.result = h("div", { id: "result", "aria-live": "polite" });
  const toTop = () => {
    const box = document.getElementById("nodes-window");
    if (box) box.scrollTop = 0;
    p.redraw();
  };
  const filter = h("input", { id: "node-filter", type: "search", autocomplete: "off", placeholder: "name, role or label=value",
    oninput: () => { p.filter = filter.value.trim(); toTop(); } });
  const sort = h("select", { id: "node-sort", onchange: () => { p.sort = sort.value; toTop(); } },
    h("option", { value: "name" }, "Name"), h("option", { value: "status" }, "Status, not ready first"), h("option", { value: "roles" }, "Roles"));
  p.forms = () => h("div", {},
    h("form", { class: "inline", role: "search", onsubmit: (ev) => ev.preventDefault() },
      h("label", { for: "node-filter" }, "Filter", filter),
      h("label", { for: "node-sort" }, "Sort by", sort)),
    p.result);
  // shown is the nodes the filter lets through, in the order chosen.
  const shown = () => {
    const words = p.filter.toLowerCase().split(/\s+/).filter(Boolean);
    let list = !words.length ? p.data.nodes : p.data.nodes.filter((n) => {
      const labels = Object.entries(n.metadata.labels || {}).map(([k, v]) => (k + "=" + v).toLowerCase());
      const name = n.metadata.name.toLowerCase();
      return words.every((w) => name.includes(w) || labels.some((l) => l.includes(w)));
    });
    const ready = (n) => ((cond(n, "Ready") || {}).status === "True" ? 1 : 0);
    if (p.sort === "status") list = [...list].sort((a, b) => ready(a) - ready(b));
    else if (p.sort === "roles") list = [...list].sort((a, b) => roles(a).localeCompare(roles(b)));
    return list;
  };
  // Cordoning patches the node; a drain also evicts its pods, in any
  // namespace. A button RBAC would refuse is disabled, and the page
  // says why above the table.
  const needs = { Cordon: [["patch", "", "nodes"]], Uncordon: [["patch", "", "nodes"]], Drain: [["patch", "", "nodes"], ["create", "", "pods", "eviction"]] };
  const act = (label, node, fn) => {
    const no = p.refused(...needs[label]);
    return h("button", { type: "button", class: "secondary", "aria-label": label + " " + node, "data-action": label.toLowerCase(),
      disabled: !!no, title: no ? "You may not " + no : null, onclick: fn }, label);
  };
  const cordon = (n, on) => outcome(p.result, call("PATCH", kube("/api/v1/nodes/" + n), JSON.stringify({ spec: { unschedulable: on ? true : null } })),
    `node/${n} ${on ? "cordoned" : "uncordoned"}`);
  // drain shows what a drain would evict and what would hold it up, and
  // starts it once confirmed; the drain runs on the server, whatever
  // becomes of this tab, and the page follows it.
  const drain = async (n) => {
    const path = `/api/capstan/nodes/${encodeURIComponent(n)}/drain`;
    let plan;
    try {
      plan = await p.call("GET", path);
    } catch (e) {
      p.result.replaceChildren(notice("error", e.message));
      return;
    }
    const ok = await confirmAction(`Drain node ${n}?`, [
      h("p", {}, `node/${n} is cordoned, then its pods are evicted (DaemonSet pods stay).`),
      plan.pods.length ? table(`Pods evicted (${plan.pods.length})`, ["Pod"], plan.pods.map((x) => [x])) : h("p", {}, "No pod to evict."),
      plan.emptyDir.length ? notice("warning", "The emptyDir data of these pods is deleted with them: " + plan.emptyDir.join(", ")) : null,
      plan.blocking.length ? notice("warning", "These PodDisruptionBudgets allow no disruption now, so the drain waits on them: " + plan.blocking.join("; ")) : null,
      ...plan.errors.map((e) => notice("error", e)),
    ], "Drain " + n);
    if (!ok) return;
    await outcome(p.result, call("POST", path));
    const follow = async () => {
      let st;
      try {
        st = await p.call("GET", path + "/status");
      } catch (e) {
        p.result.replaceChildren(notice("error", e.message));
        return;
      }
      p.result.replaceChildren(notice(st.state === "Failed" ? "error" : "info", st.state === "Running" ? `Draining node/${n}…` : st.message),
        st.log ? h("pre", { tabindex: 0, "aria-label": "The drain's log" }, st.log) : "");
      if (st.state === "Running" && !p.stopped) p.timers.push(setTimeout(follow, 2000));
    };
    follow();
  };
  p.view = () => {
    if (!p.ready("nodes")) return [...p.errorsView(), h("p", {}, "Loading…")];
    const list = shown();
    const caption = p.partial.nodes ? `Nodes: ${p.data.nodes.length} of ${p.count("nodes")} read…`
      : `Nodes: ${list.length !== p.data.nodes.length ? `${list.length} of ` : ""}${p.data.nodes.length}`;
    const noCordon = p.refused(...needs.Cordon), noDrain = p.refused(...needs.Drain);
    return [...p.errorsView(),
      noCordon || noDrain ? h("p", { class: "muted", id: "nodes-rbac" }, `Your rights do not allow ${noCordon ? "cordoning or draining nodes" : "draining nodes"}: you may not ${noDrain}.`) : null,
      windowed(p, "nodes-window", caption, ["Name", "Status", "Roles", "Conditions", { title: "Taints", class: "wide" }, { title: "Pool and config", class: "wide" }, "Autoscaler", { title: "Actions", class: "actions" }], list, (n) => {
      const ready = cond(n, "Ready");
      const bad = ((n.status || {}).conditions || []).filter((c) => c.type !== "Ready" && c.status === "True");
      const a = n.metadata.annotations || {};
      const v = p.scale && p.scale.nodes[n.metadata.name];
      const name = n.metadata.name;
      return [
        name,
        h("span", { class: ready && ready.status === "True" ? "ok" : "bad" }, ready && ready.status === "True" ? "Ready" : "NotReady",
          n.spec.unschedulable ? ", SchedulingDisabled" : ""),
        roles(n),
        bad.length ? bad.map((c) => h("span", { class: "tag warn", title: c.message || "" }, c.type)) : h("span", { class: "muted" }, "none"),
        (n.spec.taints || []).map((t) => h("span", { class: "tag" }, `${t.key}${t.value ? "=" + t.value : ""}:${t.effect}`)),
        a[MC + "currentConfig"] ? [h("span", { class: "tag" }, "pool " + poolOf(a[MC + "currentConfig"])), h("br"), a[MC + "currentConfig"], a[MC + "desiredConfig"] !== a[MC + "currentConfig"] ? " → " + a[MC + "desiredConfig"] : "",
          h("br"), h("span", { class: "muted" }, a[MC + "state"] || "")] : h("span", { class: "muted" }, "none"),
        !p.scale ? "…" : !p.scale.configured ? h("span", { class: "muted" }, "not configured")
          : !p.scale.scaleDownEnabled ? h("span", { class: "muted" }, "scale-down disabled")
            : !v ? h("span", { class: "muted" }, "not in a node group")
              : [v.unneeded ? h("strong", {}, "Unneeded since " + v.since) : null, v.unneeded ? h("br") : null,
                `utilization ${v.utilization.toFixed(2)}: ${v.reason}`],
        [n.spec.unschedulable ? act("Uncordon", name, () => cordon(name, false)) : act("Cordon", name, () => cordon(name, true)), " ",
          act("Drain", name, () => drain(name))],
      ];
    }, p.filter ? "No node matches the filter." : "No node.")];
  };
  return p;
};

const MAPI = "/apis/machine.openshift.io/v1beta1";

pages.machines = () => {
  const p = new Page("Machines");
  p.watch("machines", MAPI + "/machines");
  p.watch("machinesets", MAPI + "/machinesets");
  p.watch("machineautoscalers", "/apis/autoscaling.openshift.io/v1beta1/machineautoscalers");
  p.watch("clusterautoscalers", "/apis/autoscaling.openshift.io/v1/clusterautoscalers");
  const result = h("div", { id: "result", "aria-live": "polite" });
  const select = h("select", { id: "scale-set", name: "machineset", required: true });
  const replicas = h("input", { id: "scale-replicas", name: "replicas", inputmode: "numeric", size: 5, autocomplete: "off" });
  const scaleButton = h("button", { type: "submit" }, "Scale");
  const scaleRights = h("span", { class: "muted", id: "scale-rbac" });
  p.forms = () => h("section", { class: "card", "aria-labelledby": "scale-title" },
    h("h2", { id: "scale-title" }, "Scale a MachineSet"),
    h("form", {
      class: "inline", onsubmit: (ev) => {
        ev.preventDefault();
        const [ns, name] = select.value.split("/");
        outcome(result, call("POST", `/api/capstan/machinesets/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/scale`, { replicas: replicas.value }));
      },
    },
    h("label", { for: "scale-set" }, "MachineSet", select),
    h("label", { for: "scale-replicas" }, "Replicas", replicas),
    scaleButton, scaleRights),
    result);
  const sets = () => {
    const want = (p.data.machinesets || []).map(key);
    const have = [...select.options].map((o) => o.value);
    if (want.join() !== have.join()) {
      const keep = select.value;
      select.replaceChildren(...want.map((k) => h("option", { value: k }, k)));
      if (want.includes(keep)) select.value = keep;
    }
  };
  const hooks = (m) => {
    const lh = (m.spec || {}).lifecycleHooks || {};
    return [...(lh.preDrain || []).map((x) => ["preDrain", x]), ...(lh.preTerminate || []).map((x) => ["preTerminate", x])]
      .map(([k, x]) => h("span", { class: "tag" }, `${k}: ${x.name} (owner ${x.owner})`));
  };
  p.view = () => {
    sets();
    // Scaling patches the MachineSet's scale subresource, in its namespace.
    const ns = select.value.split("/")[0];
    const no = ns ? p.refused(["patch", "machine.openshift.io", "machinesets", "scale", ns]) : "";
    scaleButton.disabled = !!no;
    scaleRights.textContent = no ? "You may not " + no + " in " + ns + "." : "";
    const ms = p.data.machines || [];
    return [
      ...p.errorsView(),
      h("h2", {}, "MachineSets"),
      !p.ready("machinesets") ? h("p", {}, "Loading…") : table("MachineSets", ["Name", { title: "Desired", num: true }, { title: "Current", num: true },
        { title: "Ready", num: true }, { title: "Available", num: true }], p.data.machinesets.map((s) => [
        key(s), String(s.spec.replicas ?? 0), String((s.status || {}).replicas ?? 0), String((s.status || {}).readyReplicas ?? 0),
        String((s.status || {}).availableReplicas ?? 0)])),
      h("h2", {}, "Machines"),
      !p.ready("machines") ? h("p", {}, "Loading…") : table("Machines", ["Name", "Phase", "Node", "Drainable", "Drained", "Terminable", "Deletion hooks", "Age"],
        ms.map((m) => [
          key(m),
          h("span", { class: (m.status || {}).phase === "Running" ? "ok" : (m.status || {}).phase === "Failed" ? "bad" : "warn" },
            (m.status || {}).phase || "Provisioning", m.metadata.deletionTimestamp ? " (deleting)" : ""),
          ((m.status || {}).nodeRef || {}).name || "",
          statusCell(cond(m, "Drainable"), "True"),
          statusCell(cond(m, "Drained"), "True"),
          statusCell(cond(m, "Terminable"), "True"),
          hooks(m),
          age(m.metadata.creationTimestamp),
        ])),
      h("h2", {}, "MachineAutoscalers"),
      !p.ready("machineautoscalers") ? h("p", {}, "Loading…") : table("MachineAutoscalers", ["Name", "Target", { title: "Min", num: true }, { title: "Max", num: true }],
        p.data.machineautoscalers.map((a) => [key(a), `${a.spec.scaleTargetRef.kind}/${a.spec.scaleTargetRef.name}`,
          String(a.spec.minReplicas), String(a.spec.maxReplicas)]), "No MachineAutoscaler."),
      h("h2", {}, "ClusterAutoscaler"),
      !p.ready("clusterautoscalers") ? h("p", {}, "Loading…") : table("ClusterAutoscalers", ["Name", "Max nodes", "Scale-down", "Pod priority cutoff"],
        p.data.clusterautoscalers.map((c) => [c.metadata.name, String(((c.spec || {}).resourceLimits || {}).maxNodesTotal ?? "none"),
          ((c.spec || {}).scaleDown || {}).enabled ? `enabled (unneeded ${c.spec.scaleDown.unneededTime || "10m"})` : "disabled",
          String((c.spec || {}).podPriorityThreshold ?? -10)]), "No ClusterAutoscaler: the autoscaler does nothing."),
    ];
  };
  return p;
};

pages.pools = () => {
  const p = new Page("Machine config pools");
  p.watch("pools", "/apis/machineconfiguration.openshift.io/v1/machineconfigpools");
  // A node is kept as its labels (for the pools' selectors) and its
  // Machine Config Daemon's annotations.
  p.watch("nodes", "/api/v1/nodes", (n) => ({ metadata: { name: n.metadata.name, labels: n.metadata.labels || {},
    annotations: Object.fromEntries(Object.entries(n.metadata.annotations || {}).filter(([k]) => k.startsWith(MC))) } }));
  p.view = () => {
    if (!p.ready("pools", "nodes")) return [...p.errorsView(), h("p", {}, "Loading…")];
    if (!p.data.pools.length) return [...p.errorsView(), h("p", { class: "muted" }, "No MachineConfigPool: the Machine Config Operator manages no node.")];
    return [...p.errorsView(), p.data.pools.map((pool) => {
      const nodes = p.data.nodes.filter((n) => selects((pool.spec || {}).nodeSelector, n.metadata.labels));
      const st = pool.status || {};
      const target = ((st.configuration || {}).name) || ((pool.spec || {}).configuration || {}).name || "";
      const updated = st.updatedMachineCount || 0, total = st.machineCount || nodes.length;
      const id = "pool-" + pool.metadata.name;
      return h("section", { class: "card", "aria-labelledby": id },
        h("h2", { id }, pool.metadata.name),
        h("p", {}, `Config ${target} · maxUnavailable ${pool.spec.maxUnavailable ?? 1}` + (pool.spec.paused ? " · paused" : "")),
        h("p", {}, `${updated} of ${total} updated, ${st.readyMachineCount || 0} ready, ${st.unavailableMachineCount || 0} unavailable, ${st.degradedMachineCount || 0} degraded`),
        h("div", { class: "progress", role: "progressbar", "aria-label": pool.metadata.name + " rollout", "aria-valuemin": 0,
          "aria-valuemax": total, "aria-valuenow": updated }, h("span", { style: null, "data-pct": total ? Math.round((100 * updated) / total) : 0 })),
        h("p", {}, "Updated: ", statusCell(cond(pool, "Updated"), "True"), " · Updating: ", statusCell(cond(pool, "Updating"), "False"),
          " · Degraded: ", statusCell(cond(pool, "Degraded"), "False")),
        windowed(p, id + "-nodes", pool.metadata.name + " nodes", ["Node", "Current config", "Desired config", "State", "Reason"], nodes, (n) => {
          const a = n.metadata.annotations || {};
          return [n.metadata.name, a[MC + "currentConfig"] || "", a[MC + "desiredConfig"] || "",
            h("span", { class: a[MC + "state"] === "Done" ? "ok" : a[MC + "state"] === "Degraded" ? "bad" : "warn" }, a[MC + "state"] || ""),
            a[MC + "reason"] || ""];
        }, "Its selector selects no node."));
    })];
  };
  const base = p.render.bind(p);
  // The bars' widths are set from data-pct: the page's style policy
  // allows no inline style attribute.
  p.render = () => {
    base();
    for (const bar of document.querySelectorAll(".progress > span[data-pct]")) bar.style.width = bar.dataset.pct + "%";
  };
  return p;
};

// The report of `capstan simulate run -o json`, opened on the simulation
// page: read in the browser, sent nowhere, kept while the console is open.
let simulationReport = null;

// checkReport says what is wrong with what was opened as a report, ""
// when it is one.
function checkReport(r) {
  if (!r || typeof r !== "object" || Array.isArray(r)) return "it is not a JSON object";
  const missing = ["speed", "changes", "removed", "placed", "pending", "nodesAdded", "nodesRemoved", "nodesNotReady", "autoscaler", "blockedDrains"]
    .filter((k) => !(k in r));
  if (missing.length) return "it has no " + missing.join(", ") + ": it is not the JSON report of capstan simulate run";
  return "";
}

pages.simulate = () => {
  const p = new Page("What-if simulation");
  const result = h("div", { id: "report-result", "aria-live": "polite" });
  const file = h("input", { type: "file", id: "report-file", accept: "application/json,.json" });
  listen(file, "change", async () => {
    const f = file.files[0];
    if (!f) return;
    let r;
    try {
      r = JSON.parse(await f.text());
    } catch (e) {
      result.replaceChildren(notice("error", `${f.name} is not JSON: ${e.message}`));
      return;
    }
    const bad = checkReport(r);
    if (bad) {
      result.replaceChildren(notice("error", `${f.name}: ${bad}.`));
      return;
    }
    simulationReport = { name: f.name, report: r };
    result.replaceChildren(notice("info", `Showing ${f.name}.`));
    p.render();
  });
  p.forms = () => h("section", { class: "card", "aria-labelledby": "open-title" },
    h("h2", { id: "open-title" }, "Open a report"),
    h("p", {}, "Run ", h("code", {}, "capstan simulate run --snapshot FILE --change KIND=ARG ... -o json > report.json"),
      " and open the report here. It is read by your browser and sent nowhere."),
    h("label", { for: "report-file" }, "Report"), file, result);
  const span = (d) => d || "0s";
  p.view = () => {
    if (!simulationReport) return h("p", { class: "muted" }, "No report open.");
    const r = simulationReport.report;
    const end = r.settled ? "settled" : "ended at --for";
    const nodeRows = [];
    for (const [what, list] of [["NotReady", r.nodesNotReady], ["removed", r.nodesRemoved], ["added", r.nodesAdded]]) {
      for (const n of list || []) nodeRows.push([n.node, n.zone || "", span(n.at), what + (n.machineSet ? " (MachineSet " + n.machineSet + ")" : "")]);
    }
    const byWorkload = new Map();
    const line = (w, pod) => {
      const k = w || "pod " + pod;
      if (!byWorkload.has(k)) byWorkload.set(k, { removed: 0, placed: 0, on: new Map(), reasons: new Map() });
      return byWorkload.get(k);
    };
    for (const x of r.removed || []) {
      const l = line(x.workload, x.pod);
      l.removed++;
      l.reasons.set(x.reason, (l.reasons.get(x.reason) || 0) + 1);
    }
    for (const x of r.placed || []) {
      const l = line(x.workload, x.pod);
      l.placed++;
      l.on.set(x.node, (l.on.get(x.node) || 0) + 1);
    }
    const counted = (m) => [...m].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, n]) => (n > 1 ? `${k} x${n}` : k)).join(", ");
    const workloads = [...byWorkload].sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([w, l]) => [w, String(l.removed), counted(l.reasons), String(l.placed), counted(l.on)]);
    const num = (title) => ({ title, num: true });
    return [
      h("section", { class: "card", "aria-labelledby": "summary-title" },
        h("h2", { id: "summary-title" }, "Summary"),
        r.verdict && r.verdict.line ? h("p", { class: r.verdict.outcome === "OK" ? "" : "bad", id: "verdict" }, h("strong", {}, r.verdict.line)) : [],
        h("p", {}, `${simulationReport.name}: ${r.nodes} nodes and ${r.pods} pods of the snapshot ${r.snapshot || ""} taken ${r.takenAt}, at ${r.speed}x: ` +
          `${end} after ${span(r.duration)} (restored in ${span(r.restoreTime)}, run in ${span(r.runTime)} of real time).`),
        (r.summary || []).length ? h("div", { id: "summary" }, r.summary.map((l) => h("p", { class: l.includes("diverges") ? "warn" : "" }, l))) : [],
        table("Changes", ["Change", "At", "Result"], r.changes.map((c) => [c.change, span(c.at),
          c.error ? h("span", { class: "bad" }, c.error) : "applied"]))),
      h("section", { class: "card", "aria-labelledby": "nodes-title" },
        h("h2", { id: "nodes-title" }, "Nodes"),
        table("Nodes lost, removed and added", ["Node", "Zone", "At", "What"], nodeRows, "No node was lost, removed or added.")),
      h("section", { class: "card", "aria-labelledby": "pods-title" },
        h("h2", { id: "pods-title" }, "Pods"),
        table("Pods removed and placed, by workload", ["Workload", num("Removed"), "Removed by", num("Placed"), "Placed on"], workloads,
          "No pod was removed or placed."),
        table("Pods left pending", ["Pod", "Workload", "Scheduler", "Autoscaler"],
          (r.pending || []).map((x) => [x.pod, x.workload || "", x.scheduler || "", x.autoscaler || ""]), "No pod was left pending.")),
      h("section", { class: "card", "aria-labelledby": "autoscaler-title" },
        h("h2", { id: "autoscaler-title" }, "Autoscaler"),
        table("The autoscaler's events", ["Reason", "At", "Object", num("Count"), "Message"],
          (r.autoscaler || []).map((e) => [e.reason, span(e.at), e.object, String(e.count), e.message]), "The autoscaler did nothing.")),
      h("section", { class: "card", "aria-labelledby": "drains-title" },
        h("h2", { id: "drains-title" }, "Blocked drains"),
        table("Drains not finished", ["Node", "By", "Pods left", "Why"],
          (r.blockedDrains || []).map((d) => [d.node, d.by, (d.pods || []).join(", "), d.message]), "No drain was left blocked.")),
      r.update ? updateSection(r.update, span) : [],
      (r.rollouts || []).map((ro) => {
        const id = "rollout-" + ro.pool;
        return h("section", { class: "card", "aria-labelledby": id },
          h("h2", { id }, "Pool " + ro.pool),
          h("p", {}, `Rolled out ${ro.config} from ${span(ro.started)}, maxUnavailable ${ro.maxUnavailable}: ` +
            (ro.finished ? `every node updated at ${ro.finished}` : `${ro.updated} of ${ro.nodes} nodes updated at the end`) +
            (ro.longest ? `; longest ${ro.longest}` : "") + "."),
          table(ro.pool + " nodes in rollout order", ["Node", "Zone", "Targeted", "Updated", "State"], (ro.order || []).map((u) => [u.node, u.zone || "",
            span(u.targeted), u.updated || "-", h("span", { class: u.state === "Done" ? "ok" : u.state === "Degraded" ? "bad" : "warn" },
              u.state + (u.reason ? ": " + u.reason : ""))])));
      }),
    ];
  };
  return p;
};

// updateSection is a simulated update's course: its run levels, the
// operator waited on longest, and the risks of the graph.
const updateSection = (u, span) => {
  const course = u.took ? `accepted at ${u.accepted}, completed after ${u.took}` :
    u.accepted ? `accepted at ${u.accepted}, ${u.state} at the end` : u.state;
  return h("section", { class: "card", "aria-labelledby": "update-title" },
    h("h2", { id: "update-title" }, `${u.conditional ? "Conditional update" : "Update"} from ${u.from} to ${u.to}`),
    h("p", {}, `Channel ${u.channel}: ${course}. ${u.progress}.`),
    u.longestOperator ? h("p", {}, `Waited longest on ClusterOperator ${u.longestOperator}: ${u.longestOperatorWait}.`) : [],
    table("Run levels in the order applied", ["Run level", "Started", "Finished", "Waited longest on"],
      (u.runLevels || []).map((l) => [l.runLevel, span(l.started), span(l.finished), l.operator ? `${l.operator} (${l.waited})` : "-"]),
      "The CVO applied no run level."),
    u.recommended ? h("p", {}, `The cluster evaluated the update as Recommended=${u.recommended}`) : [],
    (u.risks || []).length ? table("Risks of the update", ["Risk", "Message", "Rules", "Link"],
      u.risks.map((r) => [r.name, r.message, (r.rules || []).join("; "), riskLink(r.url)])) : [],
    u.notUpgradeable ? h("p", { class: "warn" }, `Upgradeable=False in the snapshot, which holds a minor update: ${u.notUpgradeable}`) : [],
    (u.notSimulated || []).length ? h("p", { class: "muted" }, `ClusterOperators of the snapshot the simulated release does not carry: ${u.notSimulated.join(", ")}`) : []);
};

pages.updates = () => {
  const p = new Page("Cluster settings");
  p.watch("clusterversions", "/apis/config.openshift.io/v1/clusterversions");
  p.watch("operators", "/apis/config.openshift.io/v1/clusteroperators");
  p.watch("pools", "/apis/machineconfiguration.openshift.io/v1/machineconfigpools");
  p.watch("cvoEvents", "/api/v1/namespaces/openshift-cluster-version/events");
  p.statusText = "";
  const refreshStatus = () => p.call("GET", "/api/capstan/clusterversion/status").then((s) => { p.statusText = s.text; }, (e) => {
    p.statusText = "Cannot read the update's status: " + e.message;
  }).then(() => p.render());
  // The status reads every Machine on the server: asked again 10 s after
  // each answer, not on a timer.
  p.poll(10000, refreshStatus);
  const chResult = h("div", { id: "channel-result", "aria-live": "polite" });
  const upResult = h("div", { id: "result", "aria-live": "polite" });
  const channel = h("input", { id: "channel", name: "channel", list: "channels", autocomplete: "off" });
  const channels = h("datalist", { id: "channels" });
  const chSection = h("section", { class: "card", "aria-labelledby": "ch-title", hidden: true },
      h("h2", { id: "ch-title" }, "Update channel"),
      h("form", {
        class: "inline", onsubmit: (ev) => {
          ev.preventDefault();
          outcome(chResult, call("POST", "/api/capstan/clusterversion/channel", { channel: channel.value }));
        },
      }, h("label", { for: "channel" }, "Channel", channel), channels, h("button", { type: "submit" }, "Save")),
      chResult);
  p.forms = () => h("div", {}, chSection, upResult);
  // update starts an update once the person confirms it, naming the
  // version and the risks they accept.
  const update = async (version, acceptRisks) => {
    const cv = (p.data.clusterversions || [])[0];
    const from = cv?.status?.desired?.version ?? "the current version";
    const ok = await confirmAction(`Update the cluster to ${version}?`, [
      h("p", {}, `The cluster is updated from ${from} to ${version}: every operator, then every node, which reboots.`),
      acceptRisks ? notice("warning", `You accept the risks of ${version} listed on this page.`) : null,
    ], "Update to " + version);
    if (ok) await outcome(upResult, call("POST", "/api/capstan/clusterversion/update", { version, acceptRisks }));
  };
  p.view = () => {
    const cv = (p.data.clusterversions || [])[0];
    chSection.hidden = !cv;
    if (!cv) return [...p.errorsView(), h("p", {}, p.ready("clusterversions") ? "This cluster has no ClusterVersion: no Cluster Version Operator manages it." : "Loading…")];
    // The status is read again as soon as the ClusterVersion changes.
    if (cv.metadata.resourceVersion !== p.statusOf) {
      p.statusOf = cv.metadata.resourceVersion;
      clearTimeout(p.statusTimer);
      p.statusTimer = setTimeout(refreshStatus, 500);
    }
    const st = cv.status || {};
    const desired = st.desired || {};
    if (document.activeElement !== channel && !channel.value) channel.value = cv.spec.channel || "";
    const known = (desired.channels || []).join();
    if (channels.dataset.known !== known) {
      channels.dataset.known = known;
      channels.replaceChildren(...(desired.channels || []).map((c) => h("option", { value: c })));
    }
    const prog = cond(cv, "Progressing");
    // What each run level of the last update waited on: the CVO's
    // ClusterOperatorWait events since that update started.
    const since = Date.parse(((st.history || [])[0] || {}).startedTime || 0);
    const when = (e) => Date.parse(e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp || 0);
    const levels = new Map();
    for (const ev of (p.data.cvoEvents || []).filter((e) => e.reason === "ClusterOperatorWait" && when(e) >= since).sort((a, b) => when(a) - when(b))) {
      const m = /^Run level (\S+): (.*)$/.exec(ev.message);
      if (m) levels.set(m[1], [m[2], ev.lastTimestamp || ev.eventTime]);
    }
    const byLevel = [...levels].sort((a, b) => Number(a[0]) - Number(b[0]) || a[0].localeCompare(b[0]));
    const updating = prog && prog.status === "True";
    const noUpdate = p.refused(["patch", "config.openshift.io", "clusterversions"]);
    return [
      ...p.errorsView(),
      noUpdate ? h("p", { class: "muted", id: "updates-rbac" }, "Your rights do not allow updating the cluster: you may not " + noUpdate + ".") : null,
      h("section", { class: "card", "aria-labelledby": "cv-title" },
        h("h2", { id: "cv-title" }, "Current version"),
        h("p", { class: "big" }, desired.version || "unknown"),
        h("p", {}, "Channel: ", cv.spec.channel || "none", " · Update status: ", prog ? h("span", { class: updating ? "warn" : "ok" }, prog.message) : "unknown"),
        statusLine(cv, "RetrievedUpdates"), statusLine(cv, "Failing"), statusLine(cv, "Invalid")),
      h("h2", {}, "Recommended updates"),
      table("Recommended updates", ["Version", "Image", ""], (st.availableUpdates || []).map((u) => [u.version, h("code", { class: "image" }, u.image),
        h("button", { type: "button", disabled: updating || !!noUpdate, "aria-label": "Update to " + u.version, onclick: () => update(u.version, false) }, "Update")]),
      "No recommended update."),
      h("h2", {}, "Conditional updates"),
      (st.conditionalUpdates || []).length ? (st.conditionalUpdates || []).map((cu) => {
        const rec = (cu.conditions || []).find((c) => c.type === "Recommended");
        const id = "cu-" + cu.release.version.replace(/[^a-z0-9]/gi, "-");
        const accept = h("input", { type: "checkbox", id: id + "-accept" });
        return h("section", { class: "card", "aria-labelledby": id },
          h("h3", { id }, cu.release.version, " ", rec ? h("span", { class: rec.status === "True" ? "ok" : "warn" }, `Recommended=${rec.status} (${rec.reason})`) : ""),
          rec && rec.message ? h("p", {}, rec.message) : null,
          table("Risks of " + cu.release.version, ["Risk", "Message", "Link"], (cu.risks || []).map((r) => [r.name, r.message, riskLink(r.url)])),
          rec && rec.status !== "True" ? h("form", {
            class: "inline", onsubmit: (ev) => {
              ev.preventDefault();
              // The box on the page, which a redraw keeps, not the
              // one this drawing made.
              update(cu.release.version, ev.currentTarget.querySelector("input[type=checkbox]").checked);
            },
          }, h("label", { for: accept.id, class: "check" }, accept, " I accept the risks above"),
          h("button", { type: "submit", disabled: updating || !!noUpdate }, "Update to " + cu.release.version))
            : h("button", { type: "button", disabled: updating || !!noUpdate, onclick: () => update(cu.release.version, false) }, "Update to " + cu.release.version));
      }) : h("p", { class: "muted" }, "No conditional update."),
      h("h2", {}, "Progress by run level"),
      byLevel.length ? table("Run levels waited on in the last update", ["Run level", "Waited on", "Last seen"], byLevel.map(([lvl, [msg, ts]]) => [lvl, msg, age(ts) + " ago"]))
        : h("p", { class: "muted" }, updating ? "No run level waits on an operator." : "No run level waited on an operator in the last update."),
      h("h2", {}, "Node rollout"),
      table("Pools", ["Pool", { title: "Updated", num: true }, { title: "Machines", num: true }, "Updating"], (p.data.pools || []).map((pl) => [
        pl.metadata.name, String((pl.status || {}).updatedMachineCount || 0), String((pl.status || {}).machineCount || 0), statusCell(cond(pl, "Updating"), "False")])),
      h("h2", {}, "Update status"),
      h("pre", { "aria-label": "oc adm upgrade status", tabindex: 0 }, p.statusText || "…"),
      h("h2", {}, "History"),
      table("Update history", ["Version", "State", "Started", "Completed", "Verified"], (st.history || []).map((x) => [x.version, x.state,
        x.startedTime || "", x.completionTime || "", x.verified ? "yes" : "no"])),
    ];
  };
  return p;
};

function statusLine(cv, type) {
  const c = cond(cv, type);
  if (!c || (type !== "RetrievedUpdates" && c.status !== "True")) return null;
  const bad = type === "RetrievedUpdates" ? c.status !== "True" : true;
  return h("p", { class: bad ? "bad" : "muted" }, `${type}=${c.status}${c.reason ? " (" + c.reason + ")" : ""}${c.message ? ": " + c.message : ""}`);
}

// ---- login and routing --------------------------------------------------

let current = null;

function showLogin(message) {
  if (current) current.stop();
  current = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  document.title = "Log in · capstan console";
  const token = h("textarea", { id: "token", name: "token", required: true, autocomplete: "off", spellcheck: "false" });
  const result = h("div", { id: "result", "aria-live": "polite" }, message ? notice("error", message) : "");
  const main = document.getElementById("main");
  main.replaceChildren(h("div", { class: "login" },
    h("h1", {}, "Log in"),
    h("p", {}, "Paste a bearer token the API server accepts: ", h("code", {}, "oc whoami -t"), " or ", h("code", {}, "kubectl create token NAME"),
      ". Every call the console makes is made with it."),
    h("form", {
      onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          await enter(await call("POST", "/api/login", { token: token.value }));
        } catch (e) {
          result.replaceChildren(notice("error", e.message));
        }
      },
    }, h("label", { for: "token" }, "Token"), token, h("p", {}, h("button", { type: "submit" }, "Log in"))),
    result));
  token.focus();
}

async function enter(s) {
  if (s.secret) secret.set(s.secret);
  delete s.secret;
  Object.assign(session, s);
  if (!s.prometheus) {
    const full = await call("GET", "/api/session");
    Object.assign(session, full);
  }
  document.getElementById("who").textContent = "Logged in as " + session.user;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  if (!location.hash || location.hash.startsWith("#/login")) location.hash = "#/overview";
  else route();
}

function route() {
  if (!session.user) return;
  // A hash that names no page (#main, an in-page link) keeps the page.
  if (current && location.hash && !location.hash.startsWith("#/")) return;
  const name = (location.hash.replace(/^#\//, "").split("?")[0]) || "overview";
  const make = pages[name] || pages.overview;
  if (current) current.stop();
  current = make();
  current.render();
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === "#/" + name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.getElementById("main").focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
// "Skip to content" moves the focus to the page's content; it leaves the
// hash, and the page, as they are.
document.querySelector("a.skip").addEventListener("click", (ev) => {
  ev.preventDefault();
  document.getElementById("main").focus();
});
document.getElementById("logout").addEventListener("click", async () => {
  await call("POST", "/api/logout").catch(() => {});
  secret.set("");
  session.user = "";
  showLogin();
});

// A login link leads here with its code in the hash (#/login?link=...),
// which never reaches a server: the page spends it, and forgets it.
function linkCode() {
  const m = location.hash.match(/^#\/login\?(?:.*&)?link=([^&]*)/);
  return m ? decodeURIComponent(m[1]) : "";
}

(async () => {
  const code = linkCode();
  if (code) {
    history.replaceState(null, "", "#/overview");
    try {
      await enter(await call("POST", "/api/login", { code }));
    } catch (e) {
      showLogin(e.status === 401 ? "That login link was used already or has expired: ask for a new one, or paste a token." : e.message);
    }
    return;
  }
  if (!secret.get()) {
    showLogin(location.hash.includes("error=link") ? "That login link was used already or has expired: ask for a new one, or paste a token." : "");
    return;
  }
  try {
    await enter(await call("GET", "/api/session"));
  } catch {
    showLogin("");
  }
})();
