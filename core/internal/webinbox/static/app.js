// The web inbox: reads and manages the signed-in user's notifications
// through /v1/inbox and refreshes on the live gateway's frames. Every
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

  // call runs an API request with the user's token; it throws an Error
  // with the problem document's detail and the HTTP status.
  async function call(method, path, body) {
    const headers = { Authorization: "Bearer " + state.token };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(new URL(path, document.baseURI), {
      method, headers, cache: "no-store", credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const err = new Error((data && (data.detail || data.title)) || res.status + " " + res.statusText);
      err.status = res.status;
      err.data = data;
      throw err;
    }
    return data;
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
