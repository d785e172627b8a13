// The hosted web inbox: a thin page around <herald-inbox>, the component
// a team embeds in its own app. This script is the page's "host app": it
// takes the user's token (from the #token= fragment or the sign-in form,
// kept in session storage) and hands it to the component as its token
// provider. A token the API refuses signs the user out with the reason.
// The page sets text with textContent only.
"use strict";

(() => {
  const TOKEN_KEY = "herald.token";
  const LANG_KEY = "herald.locale";
  const THEME_KEY = "herald.theme";
  const $ = (id) => document.getElementById(id);
  let current = ""; // the signed-in user's token

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

  function showError(msg) {
    $("error").textContent = msg || "";
    $("error").hidden = !msg;
  }

  function signIn(token) {
    token = token.trim();
    if (!token) return;
    if (!forThisDeployment(token)) {
      signOut("This token is for another deployment (its audience is not " + JSON.stringify(AUDIENCE) + "); it was not used.");
      return;
    }
    current = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("who").textContent = String(claims(token).sub || "");
    $("signin").hidden = true;
    $("signout").hidden = false;
    showError("");
    const inbox = $("inbox");
    inbox.hidden = false;
    // The page holds one pasted token: the provider hands it out until
    // the API refuses it (an app embedding the component fetches a fresh
    // one from its backend here instead).
    inbox.tokenProvider = async () => current;
  }

  function signOut(msg) {
    current = "";
    sessionStorage.removeItem(TOKEN_KEY);
    const inbox = $("inbox");
    inbox.hidden = true;
    inbox.tokenProvider = null;
    inbox.remove(); // stops its live session
    $("signin").after(inbox);
    $("who").textContent = "";
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
      try {
        return decodeURIComponent(m[1]);
      } catch {
        return "";
      }
    }
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function applyLook() {
    const inbox = $("inbox");
    const lang = $("lang").value;
    if (lang) inbox.setAttribute("locale", lang);
    else inbox.removeAttribute("locale");
    inbox.setAttribute("theme", $("theme").value);
    document.documentElement.classList.toggle("dark", $("theme").value === "dark");
    localStorage.setItem(LANG_KEY, lang);
    localStorage.setItem(THEME_KEY, $("theme").value);
  }

  function start() {
    $("lang").value = localStorage.getItem(LANG_KEY) || "";
    $("theme").value = localStorage.getItem(THEME_KEY) === "dark" ? "dark" : "light";
    $("lang").addEventListener("change", applyLook);
    $("theme").addEventListener("change", applyLook);
    applyLook();
    $("signin").addEventListener("submit", (ev) => {
      ev.preventDefault();
      signIn($("token").value);
      $("token").value = "";
    });
    $("signout").addEventListener("click", () => signOut(""));
    $("inbox").addEventListener("herald-auth-error", (ev) => {
      signOut("Your token was refused (" + ev.detail.message + "). Sign in again.");
    });
    $("inbox").addEventListener("herald-unread", (ev) => {
      const n = ev.detail.unread;
      document.title = (n > 0 ? "(" + (n > 99 ? "99+" : n) + ") " : "") + "Herald inbox";
    });
    const tok = takeToken();
    // signIn refuses (and does not store) a token for another deployment.
    if (tok) signIn(tok);
    else signOut("");
  }

  start();
})();
