// types-check.ts is not shipped (package.json's files leave it out): it
// uses every name herald-inbox.d.ts declares as a host app would, and
// scripts/component-types.sh type-checks it with tsc --strict, so a
// declaration that does not hold together, or that a host cannot use as
// docs/inbox.md shows, fails the build.
import { MESSAGES, VERSION, capCount, safeURL, safeIcon, jwtExp, HeraldInbox, HeraldBell } from "./herald-inbox.js";
import type { TokenProvider, Messages, HeraldNotification } from "./herald-inbox.js";

const provider: TokenProvider = async () => (await fetch("/api/herald-token", { credentials: "include" })).text();
const messages: Messages = { readAll: "Clear", it: { readAll: "Letto" } };

const inbox: HeraldInbox = document.createElement("herald-inbox");
inbox.tokenProvider = provider;
inbox.tokenProvider = () => "a.b.c";
inbox.tokenProvider = null;
inbox.messages = messages;
inbox.locale = "it";
inbox.setAttribute("api", "https://herald.example.com/");
const fromQuery: HeraldInbox | null = document.querySelector("herald-inbox");
const unread: number = inbox.unread + inbox.tokensProvided;
const text: string = inbox.t("unreadLabel", { n: unread });
void inbox.refresh().then(() => fromQuery?.refresh());

const bell: HeraldBell = document.createElement("herald-bell");
bell.setAttribute("for", "inbox");
bell.tokenProvider = provider;
const count: number = bell.count;

inbox.addEventListener("herald-unread", (e) => console.log(e.detail.unread + count));
inbox.addEventListener("herald-toast", (e) => console.log(e.detail.title.toUpperCase()));
inbox.addEventListener("herald-auth-error", (e) => console.log(e.detail.message));
inbox.addEventListener("herald-open", (e) => {
  const n: HeraldNotification | undefined = e.detail.notification;
  const icon = n && n.data && typeof n.data.icon === "string" ? safeIcon(n.data.icon) : "";
  console.log(safeURL(e.detail.url), icon, n?.status === "unread", n?.handled_by?.user_id);
});
bell.addEventListener("herald-bell-click", () => { inbox.hidden = !inbox.hidden; });

const en: string = MESSAGES.en.readAll + MESSAGES.it.readAll + MESSAGES.de.readAll + MESSAGES.fr.readAll + MESSAGES.es.readAll;
const label: string = capCount(120);
const exp: number = jwtExp("a.b.c");
console.log(VERSION, en, label, exp, text);

// What must not compile: a provider that returns no token, a wrong
// status, a count as text.
// @ts-expect-error a number is not a token
inbox.tokenProvider = () => 42;
// @ts-expect-error not a status
const wrong: HeraldNotification["status"] = "deleted";
// @ts-expect-error the count is read-only
bell.count = 3;
console.log(wrong);
