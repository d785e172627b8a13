// The web inbox: reads and manages the signed-in user's notifications
// through /v1/inbox and refreshes on the live gateway's frames; its
// preferences panel edits the user's switches, quiet hours, time zone and
// language through /v1/me/preferences and turns on Web Push for this
// browser (inbox/sw.js, /v1/me/push-config, /v1/me/devices). Every
// value from the server is rendered with textContent, never as markup.
"use strict";

(() => {
  const TOKEN_KEY = "herald.token";
  const PAGE = 20;
  const ACTIONS = { CONFIRMED: true, REJECTED: true };
  const SEVERITIES = { info: true, warning: true, critical: true };

  const $ = (id) => document.getElementById(id);
  const state = {
    token: "",
    shown: PAGE, // how many items the list shows (grows with "Show more")
    cursor: "",
    busy: false, // a refresh is running
    again: false, // another refresh was asked for meanwhile
    socket: null,
    gen: 0, // bumped on sign-out and reconnects: stale sockets stand down
    retries: 0,
    timer: 0,
  };

  // request runs an API request with the user's token and returns the
  // response's JSON body and headers; it throws an Error with the problem
  // document's detail, its field and the HTTP status.
  async function request(method, path, body, headers) {
    headers = Object.assign({ Authorization: "Bearer " + state.token }, headers || {});
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(new URL(path, document.baseURI), {
      method, headers, cache: "no-store", credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    if (!res.ok) {
      const err = new Error((data && (data.detail || data.title)) || res.status + " " + res.statusText);
      err.status = res.status;
      err.data = data;
      throw err;
    }
    return { data, headers: res.headers };
  }

  // call is request's body alone.
  async function call(method, path, body) {
    return (await request(method, path, body)).data;
  }

  function showError(msg) {
    $("error").textContent = msg || "";
    $("error").hidden = !msg;
  }

  // failed reports err; a refused token signs the user out.
  function failed(err) {
    if (err && err.status === 401) {
      signOut("Your token was refused (" + err.message + "). Sign in again.");
      return;
    }
    showError(err ? err.message : "request failed");
  }

  // claims are the token's claims, unverified (the server verifies the
  // token); {} when it is not a JWT.
  function claims(tok) {
    try {
      const part = tok.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const c = JSON.parse(atob(part));
      return c && typeof c === "object" ? c : {};
    } catch {
      return {};
    }
  }

  // tokenSubject is the token's sub claim, for display only.
  function tokenSubject(tok) {
    return String(claims(tok).sub || "");
  }

  // AUDIENCE is this deployment's token audience (auth.audience).
  const AUDIENCE = (document.querySelector('meta[name="herald-audience"]') || {}).content || "";

  // forThisDeployment reports whether the token's aud holds this
  // deployment's audience: a token for another deployment is neither
  // stored nor sent (a token that is not a JWT at all goes to the server,
  // which says why it is refused).
  function forThisDeployment(tok) {
    const c = claims(tok);
    if (!("aud" in c)) return Object.keys(c).length === 0;
    const aud = Array.isArray(c.aud) ? c.aud : [c.aud];
    return AUDIENCE !== "" && aud.includes(AUDIENCE);
  }

  function setCount(n) {
    $("unread").textContent = String(n);
    $("unread").classList.toggle("zero", n === 0);
    document.title = (n > 0 ? "(" + n + ") " : "") + "Herald inbox";
  }

  function listQuery(limit, cursor) {
    const q = new URLSearchParams({ status: $("status").value, limit: String(limit) });
    if ($("severity").value) q.set("severity", $("severity").value);
    const text = $("q").value.trim();
    if (text) q.set("q", text);
    if (cursor) q.set("cursor", cursor);
    return "v1/inbox?" + q;
  }

  function render(n) {
    const li = $("item").content.firstElementChild.cloneNode(true);
    li.dataset.id = n.notification_id;
    li.classList.add(n.status);
    const sev = li.querySelector(".sev");
    sev.textContent = n.severity;
    if (SEVERITIES[n.severity]) sev.classList.add("sev-" + n.severity);
    li.querySelector(".title").textContent = n.title;
    li.querySelector(".body").textContent = n.body;
    li.querySelector(".type").textContent = n.event_type;
    const when = li.querySelector(".when");
    when.dateTime = n.created_at;
    when.textContent = new Date(n.created_at).toLocaleString();
    if (n.handled_by) {
      const h = li.querySelector(".handled");
      h.textContent = "Handled by " + n.handled_by.user_id + " (" + n.handled_by.type + ")";
      h.hidden = false;
    }
    const show = (op, on) => { li.querySelector('[data-op="' + op + '"]').hidden = !on; };
    show("CONFIRMED", n.actionable);
    show("REJECTED", n.actionable);
    show("read", n.status === "unread");
    show("unread", n.status === "read");
    show("archive", n.status !== "archived");
    show("unarchive", n.status === "archived");
    return li;
  }

  async function loadCount() {
    const token = state.token;
    const c = await call("GET", "v1/inbox/unread-count");
    if (token === state.token) setCount(c.unread); // not signed out meanwhile
  }

  async function loadList() {
    const token = state.token;
    const page = await call("GET", listQuery(Math.min(100, state.shown), ""));
    if (token !== state.token) return;
    $("list").replaceChildren(...page.items.map(render));
    state.cursor = page.next_cursor || "";
    $("more").hidden = !state.cursor;
    $("empty").hidden = page.items.length > 0;
  }

  // refresh reloads the count and the list; calls during a refresh are
  // folded into one more round after it.
  async function refresh() {
    if (!state.token) return;
    if (state.busy) {
      state.again = true;
      return;
    }
    state.busy = true;
    try {
      do {
        state.again = false;
        await Promise.all([loadCount(), loadList()]);
      } while (state.again && state.token);
      showError("");
    } catch (err) {
      failed(err);
    } finally {
      state.busy = false;
    }
  }

  async function more() {
    try {
      const page = await call("GET", listQuery(PAGE, state.cursor));
      $("list").append(...page.items.map(render));
      state.shown = $("list").children.length;
      state.cursor = page.next_cursor || "";
      $("more").hidden = !state.cursor;
    } catch (err) {
      failed(err);
    }
  }

  async function act(id, op, button) {
    button.disabled = true;
    try {
      if (ACTIONS[op]) {
        await call("POST", "v1/inbox/" + encodeURIComponent(id) + "/actions", { type: op });
      } else {
        await call("POST", "v1/inbox/" + encodeURIComponent(id) + "/" + op);
      }
    } catch (err) {
      if (err.status === 409 && err.data && err.data.handled_by) {
        showError("Someone acted first: " + err.data.handled_by.user_id + " (" + err.data.handled_by.type + ").");
      } else {
        failed(err);
      }
    } finally {
      button.disabled = false;
    }
    await refresh();
  }

  // connect trades the token for a one-time ticket and opens the live
  // socket; when it closes it reconnects with backoff and a fresh ticket.
  async function connect() {
    clearTimeout(state.timer);
    const gen = ++state.gen;
    let ticket;
    try {
      ticket = await call("POST", "v1/live/tickets");
    } catch (err) {
      if (gen !== state.gen) return;
      if (err.status === 401) return failed(err);
      return reconnectLater(gen);
    }
    if (gen !== state.gen) return;
    const url = new URL(ticket.url, document.baseURI);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(url);
    state.socket = ws;
    ws.onmessage = (ev) => {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (f.type === "ready") {
        state.retries = 0;
        setLive(true);
        refresh(); // whatever changed while the socket was down
      } else if (f.type === "notification" || f.type === "inbox") {
        if (typeof f.unread === "number") setCount(f.unread);
        refresh();
      }
    };
    ws.onclose = () => {
      if (gen !== state.gen) return;
      state.socket = null;
      setLive(false);
      reconnectLater(gen);
    };
  }

  function reconnectLater(gen) {
    if (gen !== state.gen || !state.token) return;
    const base = Math.min(30000, 500 * 2 ** state.retries);
    state.retries++;
    state.timer = setTimeout(connect, base / 2 + Math.random() * base / 2);
  }

  function setLive(on) {
    $("live").textContent = on ? "live" : "offline";
    $("live").classList.toggle("on", on);
  }


  // The preference centre. The server says which switches the user may
  // change and which are locked, and why (choices); the page edits the
  // user's own switches (the document's channels, keyed by event type and
  // channel) and PUTs the whole document back with If-Match, so a change
  // made elsewhere meanwhile is not overwritten.
  const prefs = { etag: "", switches: new Map(), loaded: false };

  const switchKey = (ev, ch) => ev + "\u0000" + ch;

  function prefsStatus(msg, bad) {
    $("prefs-status").textContent = msg || "";
    $("prefs-status").classList.toggle("bad", !!bad);
  }

  function pushStatus(msg, bad) {
    $("push-status").textContent = msg || "";
    $("push-status").classList.toggle("bad", !!bad);
  }

  const SOURCES = {
    preference: "your choice",
    "channel preference": "as your channel choice",
    default: "default",
    mandatory: "always sent",
  };

  // renderSwitch draws one choice; ev is "" for the channel-wide switch.
  function renderSwitch(ev, c) {
    const li = $("switch").content.firstElementChild.cloneNode(true);
    li.dataset.event = ev;
    li.dataset.channel = c.channel;
    li.classList.toggle("locked", c.locked);
    const box = li.querySelector("input");
    box.checked = c.enabled;
    box.disabled = c.locked;
    li.querySelector(".channel").textContent = c.channel;
    li.querySelector(".source").textContent = "(" + (SOURCES[c.source] || c.source) + ")";
    const why = li.querySelector(".why");
    why.textContent = c.locked ? "Locked: " + (c.why || "") : "";
    why.hidden = !c.locked;
    const note = li.querySelector(".note");
    note.textContent = c.note || "";
    note.hidden = !c.note;
    box.addEventListener("change", () => {
      prefs.switches.set(switchKey(ev, c.channel), { event_type: ev, channel: c.channel, enabled: box.checked });
      li.querySelector(".source").textContent = "(" + SOURCES.preference + ", not saved yet)";
    });
    return li;
  }

  function fillZones(selected) {
    const sel = $("time-zone");
    if (sel.options.length <= 1) {
      let zones = [];
      try {
        zones = Intl.supportedValuesOf("timeZone");
      } catch {
        zones = [];
      }
      for (const z of zones) sel.append(new Option(z, z));
    }
    if (selected && ![...sel.options].some((o) => o.value === selected)) sel.append(new Option(selected, selected));
    sel.value = selected || "";
  }

  function renderPrefs(p, etag) {
    prefs.etag = etag || "";
    prefs.switches = new Map();
    for (const c of p.preferences.channels || []) {
      prefs.switches.set(switchKey(c.event_type || "", c.channel), {
        event_type: c.event_type || "", channel: c.channel, enabled: c.enabled,
      });
    }
    $("prefs-channels").replaceChildren(...p.choices.channels.map((c) => renderSwitch("", c)));
    $("prefs-events").replaceChildren(...p.choices.events.map((e) => {
      const fs = $("event-switches").content.firstElementChild.cloneNode(true);
      fs.dataset.event = e.event_type;
      fs.querySelector("legend").textContent = e.event_type;
      const d = fs.querySelector(".description");
      d.textContent = e.description || "";
      d.hidden = !e.description;
      fs.querySelector(".switches").replaceChildren(...e.channels.map((c) => renderSwitch(e.event_type, c)));
      return fs;
    }));
    const q = p.preferences.quiet_hours;
    $("quiet-on").checked = !!q;
    $("quiet-start").value = q ? q.start : "22:00";
    $("quiet-end").value = q ? q.end : "07:00";
    quietToggled();
    fillZones(p.preferences.time_zone || "");
    $("locale").value = p.preferences.locale || "";
    prefs.loaded = true;
  }

  function quietToggled() {
    const on = $("quiet-on").checked;
    $("quiet-start").disabled = !on;
    $("quiet-end").disabled = !on;
  }

  async function loadPrefs() {
    try {
      const { data, headers } = await request("GET", "v1/me/preferences");
      renderPrefs(data, headers.get("ETag"));
      prefsStatus("");
    } catch (err) {
      if (err.status === 401) return failed(err);
      prefsStatus(err.message, true);
    }
  }

  // prefsDocument is the document PUT /v1/me/preferences takes.
  function prefsDocument() {
    const doc = { channels: [...prefs.switches.values()].map((s) => {
      const c = { channel: s.channel, enabled: s.enabled };
      if (s.event_type) c.event_type = s.event_type;
      return c;
    }) };
    if ($("quiet-on").checked) doc.quiet_hours = { start: $("quiet-start").value, end: $("quiet-end").value };
    if ($("time-zone").value) doc.time_zone = $("time-zone").value;
    const loc = $("locale").value.trim();
    if (loc) doc.locale = loc;
    return doc;
  }

  async function savePrefs(ev) {
    ev.preventDefault();
    if (!prefs.loaded) return;
    $("prefs-save").disabled = true;
    try {
      const headers = prefs.etag ? { "If-Match": prefs.etag } : {};
      const { data, headers: h } = await request("PUT", "v1/me/preferences", prefsDocument(), headers);
      renderPrefs(data, h.get("ETag"));
      prefsStatus("Saved.");
    } catch (err) {
      if (err.status === 401) return failed(err);
      if (err.status === 412) {
        await loadPrefs();
        prefsStatus("Your preferences were changed elsewhere; this shows them now. Make your change again.", true);
      } else {
        const field = err.data && err.data.field ? " (" + err.data.field + ")" : "";
        prefsStatus("Not saved: " + err.message + field, true);
      }
    } finally {
      $("prefs-save").disabled = false;
    }
  }

  function togglePrefs(open) {
    $("prefs").hidden = !open;
    $("prefs-open").setAttribute("aria-expanded", String(open));
    if (open) {
      loadPrefs();
      showPushState();
    }
  }

  // Web Push for this browser: a service worker (inbox/sw.js, scope
  // inbox/), a subscription with the server's VAPID public key, and the
  // subscription registered as the user's device.
  const DEVICE_KEY = "herald.push.device";

  function b64urlBytes(s) {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - s.length % 4) % 4));
    return Uint8Array.from(b, (c) => c.charCodeAt(0));
  }

  function sameBytes(a, b) {
    if (!a || !b) return false;
    a = new Uint8Array(a);
    return a.length === b.length && a.every((x, i) => x === b[i]);
  }

  function pushSupported() {
    return "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
  }

  function showPushState() {
    const dev = localStorage.getItem(DEVICE_KEY);
    $("push-off").hidden = !dev;
    if (!pushSupported()) {
      $("push-on").disabled = true;
      pushStatus("This browser cannot receive push notifications.");
    } else if (dev) {
      pushStatus("This browser is registered for push notifications.");
    }
  }

  // activated resolves once the registration's worker is active.
  function activated(reg) {
    return new Promise((resolve) => {
      const w = reg.installing || reg.waiting || reg.active;
      if (reg.active || !w) return resolve();
      w.addEventListener("statechange", () => {
        if (w.state === "activated") resolve();
      });
    });
  }

  async function pushOn() {
    $("push-on").disabled = true;
    try {
      const cfg = await call("GET", "v1/me/push-config");
      if (!cfg.web_push) return pushStatus("This service does not send browser push notifications.", true);
      const perm = await Notification.requestPermission();
      if (perm !== "granted") return pushStatus("Notifications are blocked for this page (" + perm + ").", true);
      const reg = await navigator.serviceWorker.register("inbox/sw.js", { scope: "inbox/" });
      await activated(reg);
      const key = b64urlBytes(cfg.web_push.vapid_public_key);
      let sub = await reg.pushManager.getSubscription();
      if (sub && !sameBytes(sub.options && sub.options.applicationServerKey, key)) {
        await sub.unsubscribe(); // made with another server key
        sub = null;
      }
      if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
      const j = sub.toJSON();
      const dev = await call("POST", "v1/me/devices", {
        kind: "webpush", endpoint: j.endpoint, p256dh: j.keys.p256dh, auth: j.keys.auth,
      });
      localStorage.setItem(DEVICE_KEY, dev.device_id);
      $("push-off").hidden = false;
      pushStatus("This browser is registered for push notifications.");
    } catch (err) {
      if (err.status === 401) return failed(err);
      pushStatus("Could not turn on push notifications: " + err.message, true);
    } finally {
      $("push-on").disabled = false;
    }
  }

  async function pushOff() {
    const dev = localStorage.getItem(DEVICE_KEY);
    try {
      if (dev) await call("DELETE", "v1/me/devices/" + encodeURIComponent(dev)).catch((err) => {
        if (err.status !== 404) throw err; // already gone
      });
      const reg = await navigator.serviceWorker.getRegistration("inbox/");
      const sub = reg && await reg.pushManager.getSubscription();
      if (sub) await sub.unsubscribe();
      localStorage.removeItem(DEVICE_KEY);
      $("push-off").hidden = true;
      pushStatus("This browser no longer gets push notifications.");
    } catch (err) {
      if (err.status === 401) return failed(err);
      pushStatus("Could not turn off push notifications: " + err.message, true);
    }
  }

  function signIn(token) {
    token = token.trim();
    if (!token) return;
    if (!forThisDeployment(token)) {
      signOut("This token is for another deployment (its audience is not " + JSON.stringify(AUDIENCE) + "); it was not used.");
      return;
    }
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $("who").textContent = tokenSubject(state.token);
    $("signin").hidden = true;
    $("inbox").hidden = false;
    $("signout").hidden = false;
    $("prefs-open").hidden = false;
    showError("");
    refresh();
    connect();
  }

  function signOut(msg) {
    state.token = "";
    state.gen++;
    clearTimeout(state.timer);
    if (state.socket) state.socket.close();
    state.socket = null;
    sessionStorage.removeItem(TOKEN_KEY);
    setLive(false);
    setCount(0);
    $("who").textContent = "";
    $("list").replaceChildren();
    $("inbox").hidden = true;
    $("signout").hidden = true;
    $("prefs-open").hidden = true;
    togglePrefs(false);
    $("prefs-channels").replaceChildren();
    $("prefs-events").replaceChildren();
    prefs.loaded = false;
    $("signin").hidden = false;
    showError(msg || "");
  }

  // takeToken moves a #token=... fragment into session storage and out of
  // the address bar (a fragment never reaches the server or its logs).
  function takeToken() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      history.replaceState(null, "", location.pathname + location.search);
      let tok = "";
      try {
        tok = decodeURIComponent(m[1]);
      } catch {
        tok = "";
      }
      // signIn refuses (and does not store) a token for another deployment.
      return tok;
    }
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function start() {
    $("signin").addEventListener("submit", (ev) => {
      ev.preventDefault();
      signIn($("token").value);
      $("token").value = "";
    });
    $("signout").addEventListener("click", () => signOut(""));
    $("prefs-open").addEventListener("click", () => togglePrefs($("prefs").hidden));
    $("prefs-close").addEventListener("click", () => togglePrefs(false));
    $("prefs-form").addEventListener("submit", savePrefs);
    $("quiet-on").addEventListener("change", quietToggled);
    $("push-on").addEventListener("click", pushOn);
    $("push-off").addEventListener("click", pushOff);
    $("read-all").addEventListener("click", async () => {
      try {
        await call("POST", "v1/inbox/read-all");
      } catch (err) {
        failed(err);
      }
      refresh();
    });
    $("more").addEventListener("click", more);
    const filtered = () => {
      state.shown = PAGE;
      refresh();
    };
    $("status").addEventListener("change", filtered);
    $("severity").addEventListener("change", filtered);
    let typing = 0;
    $("q").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(filtered, 250);
    });
    $("list").addEventListener("click", (ev) => {
      const button = ev.target.closest("button[data-op]");
      const li = button && button.closest("li[data-id]");
      if (li) act(li.dataset.id, button.dataset.op, button);
    });
    const token = takeToken();
    if (token) signIn(token);
    else signOut("");
  }

  start();
})();
