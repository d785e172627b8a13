// The web inbox's service worker (scope inbox/): it shows each Web Push
// message Herald's push plugin sends ({"title", "body", "data"}) as a
// notification, as text, and opens the inbox when one is clicked.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (ev) => ev.waitUntil(self.clients.claim()));

self.addEventListener("push", (ev) => {
  let msg = {};
  try {
    msg = ev.data ? ev.data.json() : {};
  } catch {
    msg = { body: ev.data ? ev.data.text() : "" };
  }
  const title = typeof msg.title === "string" && msg.title ? msg.title : "New notification";
  const body = typeof msg.body === "string" ? msg.body : "";
  const data = msg.data && typeof msg.data === "object" ? msg.data : {};
  ev.waitUntil(self.registration.showNotification(title, { body, data, tag: data.herald_notification_id || undefined }));
});

self.addEventListener("notificationclick", (ev) => {
  ev.notification.close();
  const inbox = new URL("../inbox", self.registration.scope).href;
  ev.waitUntil((async () => {
    const open = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    for (const c of open) {
      if (c.url.split("#")[0] === inbox && "focus" in c) return c.focus();
    }
    return self.clients.openWindow(inbox);
  })());
});
