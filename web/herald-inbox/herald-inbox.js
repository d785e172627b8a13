// <herald-inbox> and <herald-bell>: Herald's in-app inbox as two custom
// elements (Shadow DOM, no framework, no build step). One ES module: the
// file `herald serve` serves at /inbox/component/v1/herald-inbox.<hash>.js
// is this file, byte for byte.
//
//   <herald-inbox api="https://herald.example.com/" locale="it" theme="dark"></herald-inbox>
//   el.tokenProvider = async () => (await fetch("/my/herald-token")).text();
//
// The component asks the host app for a user token (tokenProvider) before
// the one it holds expires (it reads exp from the JWT) and again when the
// API answers 401; it never asks the end user for one. Every value from
// the server is rendered with textContent, never as markup; a
// notification's click-through URL (data.url) opens only when it is http
// or https, and its picture (data.icon) loads only from an https or a
// relative URL, in a box of fixed size. Styles are a constructed stylesheet (adoptedStyleSheets), so
// a strict Content-Security-Policy without 'unsafe-inline' holds.

const VERSION = "1.0.0";
const PAGE = 20;

// MESSAGES is the message catalogue: every string the component shows.
// A host app overrides any of them with the messages property.
export const MESSAGES = {
  en: {
    inbox: "Inbox", live: "live", offline: "offline", connecting: "connecting",
    unreadLabel: "{n} unread notifications", loading: "Loading…", empty: "No notifications.",
    emptyFiltered: "Nothing matches these filters.", offlineNote: "You are offline; the list may be out of date.",
    statusLabel: "Show", active: "Active", unread: "Unread", read: "Read", archived: "Archived",
    severityLabel: "Severity", anySeverity: "Any severity", info: "Info", warning: "Warning", critical: "Critical",
    search: "Search", searchLabel: "Search title and text", readAll: "Mark all read", more: "Show more",
    confirm: "Confirm", reject: "Reject", markRead: "Mark read", markUnread: "Mark unread",
    archive: "Archive", unarchive: "Unarchive", open: "Open",
    handledBy: "Handled by {user} ({action})", actedFirst: "Someone acted first: {user} ({action}).",
    CONFIRMED: "confirmed", REJECTED: "rejected",
    today: "Today", yesterday: "Yesterday", newArrival: "New: {title}", dismiss: "Dismiss",
    noToken: "No token: the host app gave the inbox none.", refused: "The token was refused ({reason}).",
    failed: "Request failed ({reason}).", unreachable: "Cannot reach the notification service ({reason}).",
    preferences: "Preferences", close: "Close", save: "Save preferences", saved: "Saved.",
    channelsAll: "Channels, for every kind of notification", quietAndLanguage: "Quiet hours and language",
    quietFrom: "Quiet hours from", quietTo: "to", quietStart: "Quiet hours start", timeZone: "Time zone",
    serviceDefault: "The service's default", language: "Language",
    srcPreference: "your choice", srcChannel: "as your channel choice", srcDefault: "default",
    srcMandatory: "always sent", notSaved: "not saved yet", locked: "Locked: {why}",
    changedElsewhere: "Your preferences were changed elsewhere; this shows them now. Make your change again.",
    notSavedError: "Not saved: {reason}",
    pushTitle: "Push notifications in this browser", pushOn: "Notify me in this browser",
    pushOff: "Stop notifying this browser", pushUnsupported: "This browser cannot receive push notifications.",
    pushRegistered: "This browser is registered for push notifications.",
    pushNone: "This service does not send browser push notifications.",
    pushBlocked: "Notifications are blocked for this page ({perm}).",
    pushOnFailed: "Could not turn on push notifications: {reason}",
    pushOffDone: "This browser no longer gets push notifications.",
    pushOffFailed: "Could not turn off push notifications: {reason}",
  },
  it: {
    inbox: "Notifiche", live: "in linea", offline: "non in linea", connecting: "connessione",
    unreadLabel: "{n} notifiche non lette", loading: "Caricamento…", empty: "Nessuna notifica.",
    emptyFiltered: "Nessuna notifica con questi filtri.", offlineNote: "Sei offline; l'elenco potrebbe non essere aggiornato.",
    statusLabel: "Mostra", active: "Attive", unread: "Non lette", read: "Lette", archived: "Archiviate",
    severityLabel: "Gravità", anySeverity: "Qualsiasi gravità", info: "Info", warning: "Avviso", critical: "Critica",
    search: "Cerca", searchLabel: "Cerca nel titolo e nel testo", readAll: "Segna tutte come lette", more: "Mostra altre",
    confirm: "Conferma", reject: "Rifiuta", markRead: "Segna come letta", markUnread: "Segna come non letta",
    archive: "Archivia", unarchive: "Ripristina", open: "Apri",
    handledBy: "Gestita da {user} ({action})", actedFirst: "Qualcuno è stato più veloce: {user} ({action}).",
    CONFIRMED: "confermata", REJECTED: "rifiutata",
    today: "Oggi", yesterday: "Ieri", newArrival: "Nuova: {title}", dismiss: "Chiudi",
    noToken: "Nessun token: l'applicazione non ne ha fornito uno.", refused: "Il token è stato rifiutato ({reason}).",
    failed: "Richiesta non riuscita ({reason}).", unreachable: "Impossibile raggiungere il servizio di notifiche ({reason}).",
    preferences: "Preferenze", close: "Chiudi", save: "Salva preferenze", saved: "Salvate.",
    channelsAll: "Canali, per ogni tipo di notifica", quietAndLanguage: "Ore di silenzio e lingua",
    quietFrom: "Silenzio dalle", quietTo: "alle", quietStart: "Inizio del silenzio", timeZone: "Fuso orario",
    serviceDefault: "Quello del servizio", language: "Lingua",
    srcPreference: "tua scelta", srcChannel: "come la scelta sul canale", srcDefault: "predefinito",
    srcMandatory: "sempre inviato", notSaved: "non ancora salvato", locked: "Bloccato: {why}",
    changedElsewhere: "Le preferenze sono state cambiate altrove; ora sono mostrate. Ripeti la modifica.",
    notSavedError: "Non salvate: {reason}",
    pushTitle: "Notifiche push in questo browser", pushOn: "Avvisami in questo browser",
    pushOff: "Non avvisare più questo browser", pushUnsupported: "Questo browser non riceve notifiche push.",
    pushRegistered: "Questo browser riceve le notifiche push.",
    pushNone: "Questo servizio non invia notifiche push al browser.",
    pushBlocked: "Le notifiche sono bloccate per questa pagina ({perm}).",
    pushOnFailed: "Impossibile attivare le notifiche push: {reason}",
    pushOffDone: "Questo browser non riceve più notifiche push.",
    pushOffFailed: "Impossibile disattivare le notifiche push: {reason}",
  },
  de: {
    inbox: "Posteingang", live: "live", offline: "offline", connecting: "verbinde",
    unreadLabel: "{n} ungelesene Benachrichtigungen", loading: "Wird geladen…", empty: "Keine Benachrichtigungen.",
    emptyFiltered: "Nichts passt zu diesen Filtern.", offlineNote: "Sie sind offline; die Liste ist womöglich veraltet.",
    statusLabel: "Anzeigen", active: "Aktiv", unread: "Ungelesen", read: "Gelesen", archived: "Archiviert",
    severityLabel: "Dringlichkeit", anySeverity: "Jede Dringlichkeit", info: "Info", warning: "Warnung", critical: "Kritisch",
    search: "Suchen", searchLabel: "Titel und Text durchsuchen", readAll: "Alle als gelesen markieren", more: "Mehr anzeigen",
    confirm: "Bestätigen", reject: "Ablehnen", markRead: "Als gelesen markieren", markUnread: "Als ungelesen markieren",
    archive: "Archivieren", unarchive: "Wiederherstellen", open: "Öffnen",
    handledBy: "Erledigt von {user} ({action})", actedFirst: "Jemand war schneller: {user} ({action}).",
    CONFIRMED: "bestätigt", REJECTED: "abgelehnt",
    today: "Heute", yesterday: "Gestern", newArrival: "Neu: {title}", dismiss: "Schließen",
    noToken: "Kein Token: die Anwendung hat keines geliefert.", refused: "Das Token wurde abgelehnt ({reason}).",
    failed: "Anfrage fehlgeschlagen ({reason}).", unreachable: "Der Benachrichtigungsdienst ist nicht erreichbar ({reason}).",
    preferences: "Einstellungen", close: "Schließen", save: "Einstellungen speichern", saved: "Gespeichert.",
    channelsAll: "Kanäle, für jede Art von Benachrichtigung", quietAndLanguage: "Ruhezeiten und Sprache",
    quietFrom: "Ruhezeit von", quietTo: "bis", quietStart: "Beginn der Ruhezeit", timeZone: "Zeitzone",
    serviceDefault: "Die des Dienstes", language: "Sprache",
    srcPreference: "Ihre Wahl", srcChannel: "wie Ihre Kanalwahl", srcDefault: "Standard",
    srcMandatory: "immer gesendet", notSaved: "noch nicht gespeichert", locked: "Gesperrt: {why}",
    changedElsewhere: "Ihre Einstellungen wurden anderswo geändert; hier sehen Sie sie jetzt. Ändern Sie sie erneut.",
    notSavedError: "Nicht gespeichert: {reason}",
    pushTitle: "Push-Benachrichtigungen in diesem Browser", pushOn: "In diesem Browser benachrichtigen",
    pushOff: "Diesen Browser nicht mehr benachrichtigen", pushUnsupported: "Dieser Browser kann keine Push-Benachrichtigungen empfangen.",
    pushRegistered: "Dieser Browser erhält Push-Benachrichtigungen.",
    pushNone: "Dieser Dienst sendet keine Push-Benachrichtigungen an Browser.",
    pushBlocked: "Benachrichtigungen sind für diese Seite blockiert ({perm}).",
    pushOnFailed: "Push-Benachrichtigungen konnten nicht aktiviert werden: {reason}",
    pushOffDone: "Dieser Browser erhält keine Push-Benachrichtigungen mehr.",
    pushOffFailed: "Push-Benachrichtigungen konnten nicht deaktiviert werden: {reason}",
  },
  fr: {
    inbox: "Notifications", live: "en direct", offline: "hors ligne", connecting: "connexion",
    unreadLabel: "{n} notifications non lues", loading: "Chargement…", empty: "Aucune notification.",
    emptyFiltered: "Rien ne correspond à ces filtres.", offlineNote: "Vous êtes hors ligne ; la liste peut être périmée.",
    statusLabel: "Afficher", active: "Actives", unread: "Non lues", read: "Lues", archived: "Archivées",
    severityLabel: "Gravité", anySeverity: "Toute gravité", info: "Info", warning: "Alerte", critical: "Critique",
    search: "Rechercher", searchLabel: "Rechercher dans le titre et le texte", readAll: "Tout marquer comme lu", more: "Afficher plus",
    confirm: "Confirmer", reject: "Refuser", markRead: "Marquer comme lue", markUnread: "Marquer comme non lue",
    archive: "Archiver", unarchive: "Désarchiver", open: "Ouvrir",
    handledBy: "Traitée par {user} ({action})", actedFirst: "Quelqu'un a agi avant vous : {user} ({action}).",
    CONFIRMED: "confirmée", REJECTED: "refusée",
    today: "Aujourd'hui", yesterday: "Hier", newArrival: "Nouvelle : {title}", dismiss: "Fermer",
    noToken: "Aucun jeton : l'application n'en a fourni aucun.", refused: "Le jeton a été refusé ({reason}).",
    failed: "La requête a échoué ({reason}).", unreachable: "Impossible de joindre le service de notifications ({reason}).",
    preferences: "Préférences", close: "Fermer", save: "Enregistrer les préférences", saved: "Enregistré.",
    channelsAll: "Canaux, pour chaque type de notification", quietAndLanguage: "Heures calmes et langue",
    quietFrom: "Heures calmes de", quietTo: "à", quietStart: "Début des heures calmes", timeZone: "Fuseau horaire",
    serviceDefault: "Celui du service", language: "Langue",
    srcPreference: "votre choix", srcChannel: "comme votre choix de canal", srcDefault: "par défaut",
    srcMandatory: "toujours envoyé", notSaved: "pas encore enregistré", locked: "Verrouillé : {why}",
    changedElsewhere: "Vos préférences ont été modifiées ailleurs ; elles sont affichées ici. Refaites votre modification.",
    notSavedError: "Non enregistré : {reason}",
    pushTitle: "Notifications push dans ce navigateur", pushOn: "M'avertir dans ce navigateur",
    pushOff: "Ne plus avertir ce navigateur", pushUnsupported: "Ce navigateur ne reçoit pas de notifications push.",
    pushRegistered: "Ce navigateur reçoit les notifications push.",
    pushNone: "Ce service n'envoie pas de notifications push aux navigateurs.",
    pushBlocked: "Les notifications sont bloquées pour cette page ({perm}).",
    pushOnFailed: "Impossible d'activer les notifications push : {reason}",
    pushOffDone: "Ce navigateur ne reçoit plus de notifications push.",
    pushOffFailed: "Impossible de désactiver les notifications push : {reason}",
  },
  es: {
    inbox: "Notificaciones", live: "en directo", offline: "sin conexión", connecting: "conectando",
    unreadLabel: "{n} notificaciones sin leer", loading: "Cargando…", empty: "No hay notificaciones.",
    emptyFiltered: "Nada coincide con estos filtros.", offlineNote: "Estás sin conexión; la lista puede estar desactualizada.",
    statusLabel: "Mostrar", active: "Activas", unread: "Sin leer", read: "Leídas", archived: "Archivadas",
    severityLabel: "Gravedad", anySeverity: "Cualquier gravedad", info: "Info", warning: "Aviso", critical: "Crítica",
    search: "Buscar", searchLabel: "Buscar en el título y el texto", readAll: "Marcar todas como leídas", more: "Mostrar más",
    confirm: "Confirmar", reject: "Rechazar", markRead: "Marcar como leída", markUnread: "Marcar como no leída",
    archive: "Archivar", unarchive: "Desarchivar", open: "Abrir",
    handledBy: "Gestionada por {user} ({action})", actedFirst: "Alguien actuó antes: {user} ({action}).",
    CONFIRMED: "confirmada", REJECTED: "rechazada",
    today: "Hoy", yesterday: "Ayer", newArrival: "Nueva: {title}", dismiss: "Cerrar",
    noToken: "Sin token: la aplicación no proporcionó ninguno.", refused: "El token fue rechazado ({reason}).",
    failed: "La solicitud falló ({reason}).", unreachable: "No se puede conectar con el servicio de notificaciones ({reason}).",
    preferences: "Preferencias", close: "Cerrar", save: "Guardar preferencias", saved: "Guardado.",
    channelsAll: "Canales, para cada tipo de notificación", quietAndLanguage: "Horas de silencio e idioma",
    quietFrom: "Silencio desde", quietTo: "hasta", quietStart: "Inicio del silencio", timeZone: "Zona horaria",
    serviceDefault: "La del servicio", language: "Idioma",
    srcPreference: "tu elección", srcChannel: "como tu elección de canal", srcDefault: "predeterminado",
    srcMandatory: "siempre enviado", notSaved: "aún no guardado", locked: "Bloqueado: {why}",
    changedElsewhere: "Tus preferencias se cambiaron en otro lugar; ahora se muestran aquí. Repite tu cambio.",
    notSavedError: "No guardado: {reason}",
    pushTitle: "Notificaciones push en este navegador", pushOn: "Avisarme en este navegador",
    pushOff: "Dejar de avisar a este navegador", pushUnsupported: "Este navegador no puede recibir notificaciones push.",
    pushRegistered: "Este navegador recibe notificaciones push.",
    pushNone: "Este servicio no envía notificaciones push al navegador.",
    pushBlocked: "Las notificaciones están bloqueadas para esta página ({perm}).",
    pushOnFailed: "No se pudieron activar las notificaciones push: {reason}",
    pushOffDone: "Este navegador ya no recibe notificaciones push.",
    pushOffFailed: "No se pudieron desactivar las notificaciones push: {reason}",
  },
};

// RTL are the languages written right to left.
const RTL = new Set(["ar", "fa", "he", "ur", "yi", "ps", "dv", "ku", "sd", "ug"]);

// STYLES are the component's styles. Theme through the --herald-* custom
// properties on the element (or any ancestor) and the ::part hooks.
const STYLES = `
:host {
  --_fg: var(--herald-fg, #1d2330);
  --_muted: var(--herald-muted, #5d6678);
  --_line: var(--herald-line, #e3e6ec);
  --_bg: var(--herald-bg, #f6f7f9);
  --_card: var(--herald-card, #fff);
  --_accent: var(--herald-accent, #2f5bd3);
  --_on-accent: var(--herald-on-accent, #fff);
  --_unread: var(--herald-unread, #eef3ff);
  --_warn: var(--herald-warning, #9a6412);
  --_crit: var(--herald-critical, #c53030);
  --_ok: var(--herald-ok, #207a3c);
  --_radius: var(--herald-radius, 8px);
  --_font: var(--herald-font, system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif);
  --_d: var(--herald-density, 1);
  display: block;
  container-type: inline-size;
  font: 15px/1.45 var(--_font);
  color: var(--_fg);
  background: var(--_bg);
  min-width: 0;
  max-width: 100%;
  box-sizing: border-box;
}
:host([theme="dark"]) {
  --_fg: var(--herald-fg, #e6e9ef);
  --_muted: var(--herald-muted, #a3abbb);
  --_line: var(--herald-line, #343a46);
  --_bg: var(--herald-bg, #14171c);
  --_card: var(--herald-card, #1e222a);
  --_accent: var(--herald-accent, #7c9cff);
  --_on-accent: var(--herald-on-accent, #0b1020);
  --_unread: var(--herald-unread, #232b3d);
  --_warn: var(--herald-warning, #f0b35a);
  --_crit: var(--herald-critical, #ff7b7b);
  --_ok: var(--herald-ok, #6fd08c);
}
:host([hidden]) { display: none; }
[hidden] { display: none !important; }
* { box-sizing: border-box; }
.wrap { padding: calc(12px * var(--_d)); }
header { display: flex; flex-wrap: wrap; align-items: center; gap: calc(10px * var(--_d)); margin-bottom: calc(10px * var(--_d)); }
h2 { font-size: 18px; margin: 0; margin-inline-end: auto; }
.live { font-size: 12px; padding: 1px 8px; border-radius: 10px; background: var(--_line); color: var(--_muted); white-space: nowrap; }
.live[data-state="live"] { color: var(--_ok); }
.bell { position: relative; display: inline-flex; width: 26px; height: 26px; flex: none; }
.bell svg { width: 26px; height: 26px; fill: currentColor; }
.badge { position: absolute; top: -6px; inset-inline-end: -12px; min-width: 18px; padding: 0 5px; border-radius: 10px;
  background: var(--_crit); color: #fff; font-size: 12px; font-weight: 600; line-height: 18px; text-align: center; white-space: nowrap; }
.badge[data-count="0"] { background: var(--_muted); }
button, select, input { font: inherit; color: inherit; }
button { padding: calc(4px * var(--_d)) 12px; border: 1px solid var(--_line); border-radius: calc(var(--_radius) * .75);
  background: var(--_card); cursor: pointer; }
button:hover, button:focus-visible { border-color: var(--_accent); }
button:disabled { opacity: .5; cursor: default; }
button.primary { background: var(--_accent); border-color: var(--_accent); color: var(--_on-accent); }
:focus-visible { outline: 2px solid var(--_accent); outline-offset: 2px; }
.toolbar { display: flex; flex-wrap: wrap; gap: 8px; margin-bottom: calc(10px * var(--_d)); }
.toolbar input { flex: 1 1 8em; min-width: 0; }
.toolbar select, .toolbar input, .prefs select, .prefs input[type="text"], .prefs input[type="time"] {
  padding: 3px 6px; border: 1px solid var(--_line); border-radius: calc(var(--_radius) * .75); background: var(--_card); max-width: 100%; }
.error { padding: 8px 12px; border-radius: var(--_radius); background: color-mix(in srgb, var(--_crit) 14%, var(--_card)); color: var(--_crit); margin: 0 0 10px; }
.note { color: var(--_muted); margin: 0 0 10px; font-size: 13px; }
.empty, .loading { color: var(--_muted); text-align: center; padding: 24px; margin: 0; }
.list { list-style: none; margin: 0; padding: 0; display: grid; gap: calc(8px * var(--_d)); }
.day { color: var(--_muted); font-size: 12px; font-weight: 600; text-transform: uppercase; letter-spacing: .04em; margin-top: calc(6px * var(--_d)); }
.item { display: flex; gap: 12px; justify-content: space-between; padding: calc(10px * var(--_d)) calc(14px * var(--_d));
  border: 1px solid var(--_line); border-inline-start: 4px solid transparent; border-radius: var(--_radius); background: var(--_card); min-width: 0; }
.item.unread { background: var(--_unread); border-inline-start-color: var(--_accent); }
.item.unread .title { font-weight: 650; }
.item.archived { opacity: .75; }
.item.link { cursor: pointer; }
.item p { margin: 0; }
.main { display: flex; gap: calc(10px * var(--_d)); align-items: flex-start; min-width: 0; flex: 1 1 auto; }
.text { min-width: 0; flex: 1 1 auto; overflow-wrap: anywhere; }
.avatar { flex: none; display: inline-flex; align-items: center; justify-content: center; overflow: hidden;
  width: calc(40px * var(--_d)); height: calc(40px * var(--_d)); border-radius: 50%; background: var(--_line); color: var(--_muted);
  font-weight: 650; font-size: calc(17px * var(--_d)); line-height: 1; }
.avatar img { display: block; width: 100%; height: 100%; object-fit: cover; }
.head { display: flex; flex-wrap: wrap; gap: 2px 8px; align-items: baseline; }
.title { min-width: 0; }
.meta { color: var(--_muted); font-size: 13px; margin-top: 4px; }
.handled { margin-top: 6px; font-size: 13px; color: var(--_ok); font-weight: 600; }
.sev { font-size: 11px; text-transform: uppercase; letter-spacing: .04em; color: var(--_muted); white-space: nowrap; flex: none; }
.sev-warning { color: var(--_warn); }
.sev-critical { color: var(--_crit); font-weight: 700; }
.buttons { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-start; justify-content: flex-end; flex: 0 1 auto; max-width: 50%; }
.more { display: block; margin: 14px auto; }
.sentinel { height: 1px; }
.toast { position: fixed; inset-block-end: 16px; inset-inline-end: 16px; max-width: min(360px, calc(100vw - 32px)); z-index: 10;
  display: flex; gap: 10px; align-items: center; padding: 10px 14px; border-radius: var(--_radius);
  background: var(--_fg); color: var(--_bg); box-shadow: 0 4px 16px rgb(0 0 0 / .25); overflow-wrap: anywhere; }
.toast button { background: transparent; color: inherit; border-color: currentColor; flex: none; }
.prefs { margin-bottom: 14px; padding: calc(10px * var(--_d)) 14px; border: 1px solid var(--_line); border-radius: var(--_radius); background: var(--_card); }
.prefs h3 { font-size: 16px; margin: 0 0 8px; }
.prefs fieldset { border: 1px solid var(--_line); border-radius: calc(var(--_radius) * .75); margin: 0 0 12px; padding: 8px 12px; min-width: 0; }
.prefs legend { font-weight: 600; padding: 0 4px; }
.prefs .row { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 6px 0; }
.switches { list-style: none; margin: 0; padding: 0; display: grid; gap: 6px; }
.switch label { font-weight: 550; }
.switch.locked label { color: var(--_muted); }
.switch .source { color: var(--_muted); font-size: 12px; margin-inline-start: 6px; }
.switch p { margin: 0; margin-inline-start: 24px; font-size: 13px; color: var(--_muted); }
.event .description { margin: 0 0 6px; color: var(--_muted); font-size: 13px; }
.status { margin: 0; color: var(--_muted); font-size: 13px; min-height: 1em; }
.status.bad { color: var(--_crit); }
@container (max-width: 520px) {
  .item { flex-direction: column; gap: 8px; }
  .buttons { max-width: none; justify-content: flex-start; }
  .wrap { padding: calc(8px * var(--_d)); }
}
`;

const BELL_SVG = "M12 3a1.5 1.5 0 0 0-1.5 1.5v.6A6 6 0 0 0 6 11v5l-2 2v1h16v-1l-2-2v-5a6 6 0 0 0-4.5-5.9v-.6A1.5 1.5 0 0 0 12 3zm-2 17a2 2 0 0 0 4 0z";
const ACTIONS = { CONFIRMED: "confirm", REJECTED: "reject" };
const SEVERITIES = ["info", "warning", "critical"];

// BELL_STYLES are <herald-bell>'s own, after STYLES: it sits inline in
// the host's header, sized by its content, the badge inside its box.
const BELL_STYLES = `
:host { display: inline-flex; container-type: normal; background: transparent; padding-inline-end: 12px; vertical-align: middle; }
.bellbutton { border: 0; background: transparent; padding: 4px; color: inherit; }
`;

const sheets = {};
function sheet(name, css) {
  if (!sheets[name]) {
    sheets[name] = new CSSStyleSheet();
    sheets[name].replaceSync(css);
  }
  return sheets[name];
}

function styles() {
  return sheet("inbox", STYLES);
}

// h makes an element: h("button", {type: "button", part: "button"}, "text").
// Attributes are set with setAttribute and children are text nodes or
// elements: nothing is ever parsed as markup.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k === "hidden") el.hidden = !!v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

function svgBell() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  const p = document.createElementNS(ns, "path");
  p.setAttribute("d", BELL_SVG);
  svg.append(p);
  return svg;
}

// capCount is the bell's text: the count, or "99+" above 99.
export function capCount(n) {
  return n > 99 ? "99+" : String(Math.max(0, n | 0));
}

// safeURL is u when it is an absolute http or https URL, else "".
export function safeURL(u) {
  if (typeof u !== "string" || u === "") return "";
  try {
    const url = new URL(u);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : "";
  } catch {
    return "";
  }
}

// MAX_ICON_URL bounds a picture's URL (characters).
const MAX_ICON_URL = 2048;

// safeIcon is u, resolved against the page, when it is an https URL or a
// relative one (a path on the page's own origin) of at most MAX_ICON_URL
// characters; else "". Other schemes (javascript:, data:, http: to
// another host) and scheme-relative URLs (//host/...) are not loaded.
export function safeIcon(u) {
  if (typeof u !== "string" || u === "" || u.length > MAX_ICON_URL || /[\u0000-\u0020\\]/.test(u)) return "";
  const absolute = /^[a-z][a-z0-9+.-]*:/i.test(u);
  if (!absolute && u.startsWith("//")) return "";
  try {
    const url = new URL(u, document.baseURI);
    if (absolute ? url.protocol === "https:" : url.origin === new URL(document.baseURI).origin) return url.href;
  } catch {
    // not a URL
  }
  return "";
}

// initial is the first character of text, upper case: the picture's
// fallback.
function initial(text) {
  const c = [...String(text || "").trim()][0];
  return c ? c.toLocaleUpperCase() : "•";
}

// jwtExp is the token's exp claim in milliseconds, unverified (the server
// verifies the token); 0 when there is none.
export function jwtExp(tok) {
  try {
    const part = tok.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const c = JSON.parse(atob(part + "=".repeat((4 - part.length % 4) % 4)));
    return typeof c.exp === "number" ? c.exp * 1000 : 0;
  } catch {
    return 0;
  }
}

// Client talks to Herald's end-user API with tokens from a provider: it
// asks for a fresh one before the one it holds expires and once more when
// a request is answered 401.
class Client {
  constructor(owner) {
    this.owner = owner;
    this.token = "";
    this.exp = 0;
    this.pending = null;
    this.issued = 0;
    this.provided = 0; // how many tokens the provider gave
  }

  base() {
    return new URL(this.owner.getAttribute("api") || "/", document.baseURI);
  }

  url(path) {
    return new URL(path, this.base());
  }

  // fresh is a token that will not expire in the next moments: the one
  // held, or a new one from the provider (concurrent callers share one
  // provider call).
  async fresh(force) {
    const now = Date.now();
    if (!force && this.token && (this.exp === 0 || this.exp - now > Math.min(30000, (this.exp - this.issued) / 4))) {
      return this.token;
    }
    if (!this.pending) {
      const provider = this.owner.tokenProvider;
      this.pending = (async () => {
        if (typeof provider !== "function") throw Object.assign(new Error("no token provider"), { code: "noToken" });
        const tok = String((await provider()) || "").trim();
        if (!tok) throw Object.assign(new Error("no token"), { code: "noToken" });
        this.token = tok;
        this.issued = Date.now();
        this.exp = jwtExp(tok);
        this.provided++;
        return tok;
      })().finally(() => { this.pending = null; });
    }
    return this.pending;
  }

  forget() {
    this.token = "";
    this.exp = 0;
  }

  // request runs an API request and returns the response's JSON body
  // and headers; it throws an Error with the problem document's detail,
  // its field and the HTTP status.
  async request(method, path, body, headers) {
    for (let attempt = 0; ; attempt++) {
      const tok = await this.fresh(attempt > 0);
      const hs = Object.assign({ Authorization: "Bearer " + tok }, headers || {});
      if (body !== undefined) hs["Content-Type"] = "application/json";
      const res = await fetch(this.url(path), {
        method, headers: hs, cache: "no-store", credentials: "omit",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      if (res.status === 401 && attempt === 0) continue; // once more, with a new token
      const data = res.status === 204 ? null : await res.json().catch(() => null);
      if (!res.ok) {
        const err = new Error((data && (data.detail || data.title)) || res.status + " " + res.statusText);
        err.status = res.status;
        err.data = data;
        throw err;
      }
      return { data, headers: res.headers };
    }
  }

  async call(method, path, body) {
    return (await this.request(method, path, body)).data;
  }
}

// Live holds a live session: a one-time ticket, then the WebSocket, and
// reconnects with backoff and a fresh ticket when it closes.
class Live {
  constructor(client, onFrame, onState) {
    this.client = client;
    this.onFrame = onFrame;
    this.onState = onState;
    this.gen = 0;
    this.retries = 0;
    this.timer = 0;
    this.socket = null;
  }

  async start() {
    clearTimeout(this.timer);
    const gen = ++this.gen;
    this.onState("connecting");
    let ticket;
    try {
      ticket = await this.client.call("POST", "v1/live/tickets");
    } catch (err) {
      if (gen !== this.gen) return;
      if (err.status === 401 || err.code === "noToken") {
        this.onState("offline", err);
        return;
      }
      this.later(gen);
      return;
    }
    if (gen !== this.gen) return;
    const url = this.client.url(ticket.url);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(url);
    this.socket = ws;
    ws.onmessage = (ev) => {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (!f || typeof f !== "object") return;
      if (f.type === "ready") {
        this.retries = 0;
        this.onState("live");
      }
      this.onFrame(f);
    };
    ws.onclose = () => {
      if (gen !== this.gen) return;
      this.socket = null;
      this.onState("offline");
      this.later(gen);
    };
  }

  later(gen) {
    if (gen !== this.gen) return;
    const base = Math.min(30000, 500 * 2 ** this.retries);
    this.retries++;
    this.timer = setTimeout(() => this.start(), base / 2 + Math.random() * base / 2);
  }

  stop() {
    this.gen++;
    clearTimeout(this.timer);
    if (this.socket) this.socket.close();
    this.socket = null;
  }
}

// Localized is what both elements share: the message catalogue, the
// locale and the direction.
class Localized extends HTMLElement {
  constructor() {
    super();
    this._messages = {};
  }

  // messages overrides strings of the catalogue: {key: "text"} for every
  // locale, or {it: {key: "text"}} for one.
  get messages() {
    return this._messages;
  }

  set messages(m) {
    this._messages = m && typeof m === "object" ? m : {};
    this.rerender();
  }

  get lang2() {
    return this.locale.toLowerCase().split("-")[0];
  }

  get locale() {
    return this.getAttribute("locale") || document.documentElement.lang || navigator.language || "en";
  }

  set locale(v) {
    this.setAttribute("locale", v);
  }

  // t is the message key in the element's locale, with {name} filled
  // from vars.
  t(key, vars) {
    const o = this._messages;
    const lang = this.lang2;
    let s = (o[this.locale] && o[this.locale][key]) || (o[lang] && o[lang][key]) ||
      (typeof o[key] === "string" ? o[key] : undefined) ||
      (MESSAGES[lang] && MESSAGES[lang][key]) || MESSAGES.en[key] || key;
    for (const [k, v] of Object.entries(vars || {})) s = s.split("{" + k + "}").join(String(v));
    return s;
  }

  // direction is the dir attribute when set, else the locale's.
  direction() {
    const d = this.getAttribute("dir");
    if (d === "rtl" || d === "ltr") return d;
    return RTL.has(this.lang2) ? "rtl" : "ltr";
  }

  rerender() {}

  // upgrade moves properties set on the element before the module
  // defined it (own properties shadowing the class's setters) to the
  // setters.
  upgrade(...names) {
    for (const n of names) {
      if (Object.prototype.hasOwnProperty.call(this, n)) {
        const v = this[n];
        delete this[n];
        this[n] = v;
      }
    }
  }
}

// HeraldBell is the unread count on a bell. Alone it reads the count from
// the API and the live gateway (api and tokenProvider as <herald-inbox>);
// with for="<id of a herald-inbox>" it mirrors that inbox and a click
// toggles it.
export class HeraldBell extends Localized {
  static get observedAttributes() {
    return ["api", "locale", "for", "dir", "theme"];
  }

  constructor() {
    super();
    this.count = 0;
    const root = this.attachShadow({ mode: "open" });
    root.adoptedStyleSheets = [styles(), sheet("bell", BELL_STYLES)];
    this.badge = h("span", { class: "badge", part: "badge", id: "unread", "data-count": "0" }, "0");
    this.button = h("button", { type: "button", class: "bellbutton", part: "bell" }, h("span", { class: "bell" }, svgBell(), this.badge));
    root.append(this.button);
    this.button.addEventListener("click", () => {
      const target = this.target();
      if (target) target.hidden = !target.hidden;
      this.dispatchEvent(new CustomEvent("herald-bell-click", { bubbles: true, composed: true }));
    });
    this.onCount = (ev) => this.setCount(ev.detail.unread);
  }

  get tokenProvider() {
    return this._tokenProvider || null;
  }

  set tokenProvider(fn) {
    this._tokenProvider = fn;
    if (this.client) this.client.forget();
    if (this.isConnected && !this.hasAttribute("for")) {
      this.disconnectedCallback();
      this.connectedCallback();
    }
  }

  target() {
    const id = this.getAttribute("for");
    return id ? document.getElementById(id) : null;
  }

  connectedCallback() {
    this.upgrade("tokenProvider", "messages");
    const t = this.target();
    if (t) {
      this.watched = t;
      t.addEventListener("herald-unread", this.onCount);
      if (typeof t.unread === "number") this.setCount(t.unread);
      return;
    }
    if (this.hasAttribute("for") || !this._tokenProvider) return;
    this.client = this.client || new Client(this);
    this.live = new Live(this.client, (f) => {
      if (typeof f.unread === "number") this.setCount(f.unread);
      else if (f.type === "ready" || f.type === "notification") this.load();
    }, () => {});
    this.load();
    this.live.start();
  }

  disconnectedCallback() {
    if (this.watched) this.watched.removeEventListener("herald-unread", this.onCount);
    this.watched = null;
    if (this.live) this.live.stop();
  }

  attributeChangedCallback() {
    if (this.isConnected) this.rerender();
  }

  async load() {
    try {
      this.setCount((await this.client.call("GET", "v1/inbox/unread-count")).unread);
    } catch {
      // the bell keeps its last count
    }
  }

  setCount(n) {
    this.count = n;
    this.rerender();
  }

  rerender() {
    this.badge.textContent = capCount(this.count);
    this.badge.dataset.count = String(this.count);
    this.button.setAttribute("aria-label", this.t("unreadLabel", { n: this.count }));
    this.button.dir = this.direction();
  }
}

// HeraldInbox is the whole inbox: the list with its filters, actions and
// live updates, and the preferences panel.
export class HeraldInbox extends Localized {
  static get observedAttributes() {
    return ["api", "locale", "dir", "toast", "service-worker", "theme"];
  }

  constructor() {
    super();
    this.client = new Client(this);
    this.live = new Live(this.client, (f) => this.frame(f), (s, err) => this.setLive(s, err));
    this.unread = 0;
    this.items = [];
    this.cursor = "";
    this.shown = PAGE;
    this.busy = false;
    this.again = false;
    this.loaded = false;
    this.started = false;
    this.epoch = 0;
    this.prefs = { etag: "", switches: new Map(), loaded: false, data: null };
    this.badIcons = new Set(); // pictures that did not load: their fallback at once
    this.root = this.attachShadow({ mode: "open" });
    this.root.adoptedStyleSheets = [styles()];
    this._tokenProvider = null;
    this.build();
    this.onOnline = () => this.setLive(this.liveState || "offline");
  }

  // tokenProvider is the host app's callback for a fresh user token.
  get tokenProvider() {
    return this._tokenProvider;
  }

  set tokenProvider(fn) {
    this._tokenProvider = fn;
    this.client.forget();
    this.live.stop();
    this.epoch++; // answers to requests made for the previous provider are dropped
    this.items = [];
    this.cursor = "";
    this.loaded = false;
    this.prefs.loaded = false;
    this.renderList();
    this.setCount(0);
    this.showError("");
    if (fn && this.isConnected) this.restart();
  }

  // tokensProvided is how many tokens the provider has given so far.
  get tokensProvided() {
    return this.client.provided;
  }

  $(id) {
    return this.root.getElementById(id);
  }

  build() {
    const sel = (id, opts) => h("select", { id, part: "filter" }, ...opts.map(([v, k]) => h("option", { value: v, "data-msg": k })));
    this.wrap = h("div", { class: "wrap", part: "container" },
      h("header", { part: "header" },
        h("h2", { id: "heading", "data-msg": "inbox" }),
        h("span", { id: "live", class: "live", part: "live", role: "status", "data-state": "offline" }),
        h("span", { class: "bell", part: "bell", id: "bell" }, svgBell(),
          h("span", { id: "unread", class: "badge", part: "badge", "data-count": "0" }, "0")),
        h("button", { id: "prefs-open", type: "button", part: "button", "aria-controls": "prefs", "aria-expanded": "false", "data-msg": "preferences" })),
      h("p", { id: "error", class: "error", role: "alert", part: "error", hidden: true }),
      h("p", { id: "offline-note", class: "note", "data-msg": "offlineNote", hidden: true }),
      this.buildPrefs(),
      h("div", { class: "toolbar", part: "toolbar", role: "toolbar" },
        sel("status", [["active", "active"], ["unread", "unread"], ["read", "read"], ["archived", "archived"]]),
        sel("severity", [["", "anySeverity"], ["info", "info"], ["warning", "warning"], ["critical", "critical"]]),
        h("input", { id: "q", type: "search", maxlength: 200, part: "search" }),
        h("button", { id: "read-all", type: "button", part: "button", "data-msg": "readAll" })),
      h("p", { id: "loading", class: "loading", "data-msg": "loading", role: "status" }),
      h("ul", { id: "list", class: "list", part: "list", role: "list", "aria-labelledby": "heading" }),
      h("p", { id: "empty", class: "empty", part: "empty", hidden: true }),
      h("div", { id: "sentinel", class: "sentinel" }),
      h("button", { id: "more", class: "more", type: "button", part: "button", "data-msg": "more", hidden: true }),
      h("div", { id: "toast", class: "toast", part: "toast", role: "status", hidden: true },
        h("span", { id: "toast-text" }), h("button", { id: "toast-close", type: "button", "data-msg": "dismiss" })));
    this.root.append(this.wrap);
    this.$("status").setAttribute("aria-label", "");
    this.$("prefs-open").addEventListener("click", () => this.togglePrefs(this.$("prefs").hidden));
    this.$("prefs-close").addEventListener("click", () => this.togglePrefs(false));
    this.$("prefs-form").addEventListener("submit", (ev) => this.savePrefs(ev));
    this.$("quiet-on").addEventListener("change", () => this.quietToggled());
    this.$("push-on").addEventListener("click", () => this.pushOn());
    this.$("push-off").addEventListener("click", () => this.pushOff());
    this.$("read-all").addEventListener("click", async () => {
      try {
        await this.client.call("POST", "v1/inbox/read-all");
      } catch (err) {
        this.failed(err);
      }
      this.refresh();
    });
    this.$("more").addEventListener("click", () => this.more());
    this.$("toast-close").addEventListener("click", () => { this.$("toast").hidden = true; });
    const filtered = () => {
      this.shown = PAGE;
      this.loaded = false;
      this.refresh();
    };
    this.$("status").addEventListener("change", filtered);
    this.$("severity").addEventListener("change", filtered);
    let typing = 0;
    this.$("q").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(filtered, 250);
    });
    this.$("list").addEventListener("click", (ev) => this.clicked(ev));
    this.$("list").addEventListener("keydown", (ev) => this.key(ev));
    // Infinite scroll: while the sentinel after the list is in view and
    // the cursor has more, the next page is loaded.
    this.observer = new IntersectionObserver((entries) => {
      this.atEnd = entries[entries.length - 1].isIntersecting;
      this.maybeMore();
    });
    this.observer.observe(this.$("sentinel"));
  }

  buildPrefs() {
    return h("section", { id: "prefs", class: "prefs", part: "prefs", "aria-labelledby": "prefs-title", hidden: true },
      h("h3", { id: "prefs-title", "data-msg": "preferences" }),
      h("p", { id: "prefs-status", class: "status", role: "status" }),
      h("form", { id: "prefs-form" },
        h("fieldset", {}, h("legend", { "data-msg": "channelsAll" }), h("ul", { id: "prefs-channels", class: "switches" })),
        h("div", { id: "prefs-events" }),
        h("fieldset", {}, h("legend", { "data-msg": "quietAndLanguage" }),
          h("p", { class: "row" },
            h("label", {}, h("input", { id: "quiet-on", type: "checkbox" }), " ", h("span", { "data-msg": "quietFrom" })),
            h("input", { id: "quiet-start", type: "time", required: true }),
            h("label", { for: "quiet-end", "data-msg": "quietTo" }),
            h("input", { id: "quiet-end", type: "time", required: true })),
          h("p", { class: "row" },
            h("label", { for: "time-zone", "data-msg": "timeZone" }),
            h("select", { id: "time-zone" }, h("option", { value: "", "data-msg": "serviceDefault" }))),
          h("p", { class: "row" },
            h("label", { for: "locale", "data-msg": "language" }),
            h("input", { id: "locale", type: "text", maxlength: 35, placeholder: "en, it, pt-BR", autocomplete: "off", spellcheck: "false" }))),
        h("p", { class: "row" },
          h("button", { id: "prefs-save", class: "primary", type: "submit", part: "button", "data-msg": "save" }),
          h("button", { id: "prefs-close", type: "button", part: "button", "data-msg": "close" }))),
      h("fieldset", { id: "push" },
        h("legend", { "data-msg": "pushTitle" }),
        h("p", { class: "row" },
          h("button", { id: "push-on", type: "button", part: "button", "data-msg": "pushOn" }),
          h("button", { id: "push-off", type: "button", part: "button", "data-msg": "pushOff", hidden: true })),
        h("p", { id: "push-status", class: "status", role: "status" })));
  }

  connectedCallback() {
    this.upgrade("tokenProvider", "messages");
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOnline);
    this.rerender();
    if (this._tokenProvider && !this.started) this.restart();
  }

  disconnectedCallback() {
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOnline);
    this.live.stop();
    this.started = false;
  }

  attributeChangedCallback(name, old, value) {
    if (old === value) return;
    if (name === "api" && this.started) {
      this.client.forget();
      this.restart();
    } else {
      this.rerender();
    }
  }

  restart() {
    this.started = true;
    this.live.stop();
    this.loaded = false;
    this.refresh();
    this.live.start();
  }

  // rerender applies the locale and direction to every static string and
  // redraws the list (dates and labels are the locale's).
  rerender() {
    this.wrap.dir = this.direction();
    this.wrap.lang = this.locale;
    for (const el of this.root.querySelectorAll("[data-msg]")) el.textContent = this.t(el.dataset.msg);
    this.$("status").setAttribute("aria-label", this.t("statusLabel"));
    this.$("severity").setAttribute("aria-label", this.t("severityLabel"));
    this.$("q").placeholder = this.t("search");
    this.$("q").setAttribute("aria-label", this.t("searchLabel"));
    this.setLive(this.liveState || "offline");
    this.setCount(this.unread);
    this.$("push").hidden = !this.getAttribute("service-worker");
    this.renderList();
    if (this.prefs.loaded) this.renderPrefs(this.prefs.data, this.prefs.etag);
  }

  showError(msg) {
    this.$("error").textContent = msg || "";
    this.$("error").hidden = !msg;
  }

  // failed shows err; a token the API refuses even fresh from the
  // provider is reported to the host app (herald-auth-error).
  failed(err) {
    if (err && err.code === "noToken") {
      this.showError(this.t("noToken"));
      return;
    }
    if (err && err.status === 401) {
      this.showError(this.t("refused", { reason: err.message }));
      this.dispatchEvent(new CustomEvent("herald-auth-error", { bubbles: true, composed: true, detail: { message: err.message } }));
      return;
    }
    if (err instanceof TypeError) {
      // fetch's own failure: no network, or the browser blocked the
      // answer (an origin the tenant does not allow, CORS).
      this.showError(this.t("unreachable", { reason: err.message }));
      return;
    }
    this.showError(this.t("failed", { reason: err ? err.message : "?" }));
  }

  setLive(s, err) {
    this.liveState = s;
    const el = this.$("live");
    el.dataset.state = s;
    el.textContent = this.t(s);
    this.$("offline-note").hidden = navigator.onLine !== false;
    if (err) this.failed(err);
  }

  setCount(n) {
    this.unread = n;
    const b = this.$("unread");
    b.textContent = capCount(n);
    b.dataset.count = String(n);
    this.$("bell").setAttribute("aria-label", this.t("unreadLabel", { n }));
    this.$("bell").setAttribute("role", "img");
    this.dispatchEvent(new CustomEvent("herald-unread", { bubbles: true, composed: true, detail: { unread: n } }));
  }

  listQuery(limit, cursor) {
    const q = new URLSearchParams({ status: this.$("status").value, limit: String(limit) });
    if (this.$("severity").value) q.set("severity", this.$("severity").value);
    const text = this.$("q").value.trim();
    if (text) q.set("q", text);
    if (cursor) q.set("cursor", cursor);
    return "v1/inbox?" + q;
  }

  // dayLabel is "Today", "Yesterday" or the date, in the locale.
  dayLabel(d) {
    const start = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
    const days = Math.round((start(new Date()) - start(d)) / 86400000);
    if (days === 0) return this.t("today");
    if (days === 1) return this.t("yesterday");
    try {
      return new Intl.DateTimeFormat(this.locale, { weekday: "long", day: "numeric", month: "long", year: "numeric" }).format(d);
    } catch {
      return d.toDateString();
    }
  }

  // relative is how long ago d was, in the locale ("5 minutes ago").
  relative(d) {
    const s = Math.round((d.getTime() - Date.now()) / 1000);
    const units = [["year", 31536000], ["month", 2592000], ["day", 86400], ["hour", 3600], ["minute", 60]];
    try {
      const rtf = new Intl.RelativeTimeFormat(this.locale, { numeric: "auto" });
      for (const [u, n] of units) if (Math.abs(s) >= n) return rtf.format(Math.trunc(s / n), u);
      return rtf.format(0, "second");
    } catch {
      return d.toLocaleString();
    }
  }

  // avatar is a notification's picture: the icon, or the title's initial
  // when there is none to load or it does not load.
  avatar(icon, title) {
    const box = h("span", { class: "avatar", part: "avatar", "aria-hidden": "true" });
    const src = safeIcon(icon);
    if (!src || this.badIcons.has(src)) {
      box.append(initial(title));
      return box;
    }
    const img = h("img", { src, alt: "", width: 40, height: 40, loading: "lazy", decoding: "async", referrerpolicy: "no-referrer" });
    img.addEventListener("error", () => {
      this.badIcons.add(src);
      box.replaceChildren(initial(title));
    }, { once: true });
    box.append(img);
    return box;
  }

  renderItem(n) {
    const data = n.data && typeof n.data === "object" ? n.data : {};
    const url = safeURL(data.url);
    const icon = typeof data.icon === "string" && data.icon !== "" ? this.avatar(data.icon, n.title) : null;
    const tid = "t-" + n.notification_id;
    const sev = SEVERITIES.includes(n.severity) ? this.t(n.severity) : String(n.severity || "");
    const when = new Date(n.created_at);
    const time = h("time", { class: "when", datetime: n.created_at }, this.relative(when));
    try {
      time.title = new Intl.DateTimeFormat(this.locale, { dateStyle: "full", timeStyle: "short" }).format(when);
    } catch {
      time.title = when.toLocaleString();
    }
    const button = (op, key, on, cls) => h("button", { type: "button", "data-op": op, part: "button action", class: cls, hidden: !on }, this.t(key));
    const handled = n.handled_by ? this.t("handledBy", { user: n.handled_by.user_id, action: n.handled_by.type }) : "";
    const li = h("li", {
      class: "item " + n.status + (url ? " link" : ""), part: "item " + n.status, "data-id": n.notification_id,
      tabindex: "-1", "aria-labelledby": tid, "data-url": url || false,
    },
    h("div", { class: "main" }, icon,
      h("div", { class: "text" },
        h("p", { class: "head" },
          h("span", { class: "sev" + (SEVERITIES.includes(n.severity) ? " sev-" + n.severity : ""), part: "severity" }, sev),
          h("span", { class: "title", id: tid, part: "title" }, String(n.title))),
        h("p", { class: "body", part: "body" }, String(n.body)),
        h("p", { class: "meta", part: "meta" }, h("span", { class: "type" }, String(n.event_type)), " · ", time),
        h("p", { class: "handled", hidden: !handled }, handled))),
    h("div", { class: "buttons" },
      button("open", "open", !!url),
      button("CONFIRMED", "confirm", n.actionable, "primary"),
      button("REJECTED", "reject", n.actionable),
      button("read", "markRead", n.status === "unread"),
      button("unread", "markUnread", n.status === "read"),
      button("archive", "archive", n.status !== "archived"),
      button("unarchive", "unarchive", n.status === "archived")));
    return li;
  }

  renderList() {
    const list = this.$("list");
    const focused = this.root.activeElement && this.root.activeElement.closest && this.root.activeElement.closest("li[data-id]");
    const focusID = focused ? focused.dataset.id : "";
    const out = [];
    let day = "";
    for (const n of this.items) {
      const label = this.dayLabel(new Date(n.created_at));
      if (label !== day) {
        day = label;
        out.push(h("li", { class: "day", role: "presentation", part: "day" }, label));
      }
      out.push(this.renderItem(n));
    }
    list.replaceChildren(...out);
    const items = list.querySelectorAll("li[data-id]");
    items.forEach((li, i) => { li.tabIndex = i === 0 ? 0 : -1; });
    if (focusID) {
      const again = list.querySelector('li[data-id="' + CSS.escape(focusID) + '"]');
      if (again) {
        again.tabIndex = 0;
        if (items[0] && items[0] !== again) items[0].tabIndex = -1;
        again.focus();
      }
    }
    const filtered = this.$("status").value !== "active" || this.$("severity").value || this.$("q").value.trim();
    this.$("empty").textContent = this.t(filtered ? "emptyFiltered" : "empty");
    this.$("empty").hidden = !this.loaded || this.items.length > 0;
    this.$("loading").hidden = this.loaded;
    list.setAttribute("aria-busy", String(!this.loaded));
    this.$("more").hidden = !this.cursor;
  }

  async loadCount() {
    const epoch = this.epoch;
    const c = await this.client.call("GET", "v1/inbox/unread-count");
    if (epoch === this.epoch) this.setCount(c.unread);
  }

  async loadList() {
    const epoch = this.epoch;
    const page = await this.client.call("GET", this.listQuery(Math.min(100, this.shown), ""));
    if (epoch !== this.epoch) return;
    this.items = page.items;
    this.cursor = page.next_cursor || "";
    this.loaded = true;
    this.renderList();
  }

  // refresh reloads the count and the list; calls during a refresh are
  // folded into one more round after it.
  async refresh() {
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    try {
      do {
        this.again = false;
        await Promise.all([this.loadCount(), this.loadList()]);
      } while (this.again);
      this.showError("");
    } catch (err) {
      if (this._tokenProvider) this.failed(err);
    } finally {
      this.busy = false;
    }
    setTimeout(() => this.maybeMore(), 0);
  }

  // maybeMore loads the next page when the end of the list is in view
  // and nothing else is loading (it runs again when that ends).
  maybeMore() {
    if (this.atEnd && this.cursor && this.loaded && !this.busy && !this.moreBusy) this.more();
  }

  async more() {
    if (!this.cursor || this.moreBusy) return;
    this.moreBusy = true;
    try {
      const epoch = this.epoch;
      const page = await this.client.call("GET", this.listQuery(PAGE, this.cursor));
      if (epoch !== this.epoch) return;
      const have = new Set(this.items.map((n) => n.notification_id));
      this.items.push(...page.items.filter((n) => !have.has(n.notification_id)));
      this.shown = this.items.length;
      this.cursor = page.next_cursor || "";
      this.renderList();
    } catch (err) {
      this.failed(err);
      this.atEnd = false; // no retry loop on errors; scrolling again retries
    } finally {
      this.moreBusy = false;
    }
    setTimeout(() => this.maybeMore(), 0);
  }

  frame(f) {
    if (typeof f.unread === "number") this.setCount(f.unread);
    if (f.type === "ready" || f.type === "inbox") this.refresh();
    if (f.type === "notification") {
      const before = new Set(this.items.map((n) => n.notification_id));
      this.refresh().then(() => {
        const fresh = this.items.find((n) => !before.has(n.notification_id));
        const title = typeof f.title === "string" && f.title ? f.title : fresh ? fresh.title : "";
        if (title) this.toast(title);
      });
    }
  }

  // toast shows a live arrival for a few seconds, unless toast="off".
  toast(title) {
    if (this.getAttribute("toast") === "off") return;
    this.$("toast-text").textContent = this.t("newArrival", { title });
    this.$("toast").hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => { this.$("toast").hidden = true; }, 6000);
    this.dispatchEvent(new CustomEvent("herald-toast", { bubbles: true, composed: true, detail: { title } }));
  }

  async act(id, op, button) {
    if (button) button.disabled = true;
    try {
      if (ACTIONS[op]) {
        await this.client.call("POST", "v1/inbox/" + encodeURIComponent(id) + "/actions", { type: op });
      } else {
        await this.client.call("POST", "v1/inbox/" + encodeURIComponent(id) + "/" + op);
      }
    } catch (err) {
      if (err.status === 409 && err.data && err.data.handled_by) {
        this.showError(this.t("actedFirst", { user: err.data.handled_by.user_id, action: err.data.handled_by.type }));
      } else {
        this.failed(err);
      }
    } finally {
      if (button) button.disabled = false;
    }
    await this.refresh();
  }

  // open opens the notification's click-through URL (http or https only)
  // in a new tab and marks it read.
  open(li) {
    const url = safeURL(li.dataset.url || "");
    if (!url) return;
    const n = this.items.find((x) => x.notification_id === li.dataset.id);
    this.dispatchEvent(new CustomEvent("herald-open", { bubbles: true, composed: true, detail: { url, notification: n } }));
    window.open(url, "_blank", "noopener,noreferrer");
    if (n && n.status === "unread") this.act(n.notification_id, "read", null);
  }

  clicked(ev) {
    const button = ev.target.closest("button[data-op]");
    const li = ev.target.closest("li[data-id]");
    if (!li) return;
    if (button) {
      if (button.dataset.op === "open") this.open(li);
      else this.act(li.dataset.id, button.dataset.op, button);
    } else if (li.dataset.url) {
      this.open(li);
    }
  }

  // key moves the focus through the list (arrows, Home, End) and opens an
  // item's URL with Enter.
  key(ev) {
    const li = ev.target.closest("li[data-id]");
    if (!li || ev.target !== li) return;
    const items = [...this.$("list").querySelectorAll("li[data-id]")];
    const i = items.indexOf(li);
    let next = null;
    if (ev.key === "ArrowDown") next = items[i + 1];
    else if (ev.key === "ArrowUp") next = items[i - 1];
    else if (ev.key === "Home") next = items[0];
    else if (ev.key === "End") next = items[items.length - 1];
    else if (ev.key === "Enter" && li.dataset.url) {
      ev.preventDefault();
      this.open(li);
      return;
    } else return;
    ev.preventDefault();
    if (next) {
      for (const x of items) x.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    }
  }

  // The preference centre: the server says which switches the user may
  // change and which are locked, and why (choices); the panel edits the
  // user's own switches and PUTs the whole document back with If-Match.
  prefsStatus(msg, bad) {
    this.$("prefs-status").textContent = msg || "";
    this.$("prefs-status").classList.toggle("bad", !!bad);
  }

  pushStatus(msg, bad) {
    this.$("push-status").textContent = msg || "";
    this.$("push-status").classList.toggle("bad", !!bad);
  }

  sourceText(source) {
    const k = { preference: "srcPreference", "channel preference": "srcChannel", default: "srcDefault", mandatory: "srcMandatory" }[source];
    return k ? this.t(k) : String(source);
  }

  renderSwitch(ev, c) {
    const key = ev + "\u0000" + c.channel;
    const mine = this.prefs.switches.get(key);
    const changed = mine && mine.changed;
    const box = h("input", { type: "checkbox" });
    box.checked = changed ? mine.enabled : c.enabled;
    box.disabled = !!c.locked;
    const source = h("span", { class: "source" }, "(" + (changed ? this.t("srcPreference") + ", " + this.t("notSaved") : this.sourceText(c.source)) + ")");
    const li = h("li", { class: "switch" + (c.locked ? " locked" : ""), "data-event": ev, "data-channel": c.channel },
      h("label", {}, box, " ", h("span", { class: "channel" }, String(c.channel))),
      source,
      h("p", { class: "why", hidden: !c.locked }, c.locked ? this.t("locked", { why: c.why || "" }) : ""),
      h("p", { class: "note", hidden: !c.note }, String(c.note || "")));
    box.addEventListener("change", () => {
      this.prefs.switches.set(key, { event_type: ev, channel: c.channel, enabled: box.checked, changed: true });
      source.textContent = "(" + this.t("srcPreference") + ", " + this.t("notSaved") + ")";
    });
    return li;
  }

  fillZones(selected) {
    const sel = this.$("time-zone");
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

  renderPrefs(p, etag) {
    this.prefs.data = p;
    this.prefs.etag = etag || "";
    if (!this.prefs.loaded || this.prefs.fresh) {
      this.prefs.switches = new Map();
      for (const c of p.preferences.channels || []) {
        this.prefs.switches.set((c.event_type || "") + "\u0000" + c.channel, { event_type: c.event_type || "", channel: c.channel, enabled: c.enabled });
      }
      const q = p.preferences.quiet_hours;
      this.$("quiet-on").checked = !!q;
      this.$("quiet-start").value = q ? q.start : "22:00";
      this.$("quiet-end").value = q ? q.end : "07:00";
      this.quietToggled();
      this.fillZones(p.preferences.time_zone || "");
      this.$("locale").value = p.preferences.locale || "";
      this.prefs.fresh = false;
    }
    this.$("prefs-channels").replaceChildren(...p.choices.channels.map((c) => this.renderSwitch("", c)));
    this.$("prefs-events").replaceChildren(...p.choices.events.map((e) => h("fieldset", { class: "event", "data-event": e.event_type },
      h("legend", {}, String(e.event_type)),
      h("p", { class: "description", hidden: !e.description }, String(e.description || "")),
      h("ul", { class: "switches" }, ...e.channels.map((c) => this.renderSwitch(e.event_type, c))))));
    this.$("quiet-start").setAttribute("aria-label", this.t("quietStart"));
    this.prefs.loaded = true;
  }

  quietToggled() {
    const on = this.$("quiet-on").checked;
    this.$("quiet-start").disabled = !on;
    this.$("quiet-end").disabled = !on;
  }

  async loadPrefs() {
    try {
      const { data, headers } = await this.client.request("GET", "v1/me/preferences");
      this.prefs.fresh = true;
      this.renderPrefs(data, headers.get("ETag"));
      this.prefsStatus("");
    } catch (err) {
      if (err.status === 401) return this.failed(err);
      this.prefsStatus(err.message, true);
    }
  }

  prefsDocument() {
    const doc = { channels: [...this.prefs.switches.values()].map((s) => {
      const c = { channel: s.channel, enabled: s.enabled };
      if (s.event_type) c.event_type = s.event_type;
      return c;
    }) };
    if (this.$("quiet-on").checked) doc.quiet_hours = { start: this.$("quiet-start").value, end: this.$("quiet-end").value };
    if (this.$("time-zone").value) doc.time_zone = this.$("time-zone").value;
    const loc = this.$("locale").value.trim();
    if (loc) doc.locale = loc;
    return doc;
  }

  async savePrefs(ev) {
    ev.preventDefault();
    if (!this.prefs.loaded) return;
    this.$("prefs-save").disabled = true;
    try {
      const headers = this.prefs.etag ? { "If-Match": this.prefs.etag } : {};
      const { data, headers: hs } = await this.client.request("PUT", "v1/me/preferences", this.prefsDocument(), headers);
      this.prefs.fresh = true;
      this.renderPrefs(data, hs.get("ETag"));
      this.prefsStatus(this.t("saved"));
    } catch (err) {
      if (err.status === 401) return this.failed(err);
      if (err.status === 412) {
        await this.loadPrefs();
        this.prefsStatus(this.t("changedElsewhere"), true);
      } else {
        const field = err.data && err.data.field ? " (" + err.data.field + ")" : "";
        this.prefsStatus(this.t("notSavedError", { reason: err.message + field }), true);
      }
    } finally {
      this.$("prefs-save").disabled = false;
    }
  }

  togglePrefs(open) {
    this.$("prefs").hidden = !open;
    this.$("prefs-open").setAttribute("aria-expanded", String(open));
    if (open) {
      this.loadPrefs();
      this.showPushState();
    }
  }

  // Web Push for this browser: the host page's service worker (the
  // service-worker attribute, a script on the page's own origin), a
  // subscription with the server's VAPID public key, and the subscription
  // registered as the user's device.
  pushSupported() {
    return "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
  }

  deviceKey() {
    return "herald.push.device";
  }

  showPushState() {
    const dev = localStorage.getItem(this.deviceKey());
    this.$("push-off").hidden = !dev;
    if (!this.pushSupported()) {
      this.$("push-on").disabled = true;
      this.pushStatus(this.t("pushUnsupported"));
    } else if (dev) {
      this.pushStatus(this.t("pushRegistered"));
    }
  }

  async pushOn() {
    const sw = this.getAttribute("service-worker");
    if (!sw) return;
    const scope = this.getAttribute("service-worker-scope") || new URL("./", new URL(sw, document.baseURI)).pathname;
    this.$("push-on").disabled = true;
    try {
      const cfg = await this.client.call("GET", "v1/me/push-config");
      if (!cfg.web_push) return this.pushStatus(this.t("pushNone"), true);
      const perm = await Notification.requestPermission();
      if (perm !== "granted") return this.pushStatus(this.t("pushBlocked", { perm }), true);
      const reg = await navigator.serviceWorker.register(sw, { scope });
      await activated(reg);
      const key = b64urlBytes(cfg.web_push.vapid_public_key);
      let sub = await reg.pushManager.getSubscription();
      if (sub && !sameBytes(sub.options && sub.options.applicationServerKey, key)) {
        await sub.unsubscribe(); // made with another server key
        sub = null;
      }
      if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
      const j = sub.toJSON();
      const dev = await this.client.call("POST", "v1/me/devices", {
        kind: "webpush", endpoint: j.endpoint, p256dh: j.keys.p256dh, auth: j.keys.auth,
      });
      localStorage.setItem(this.deviceKey(), dev.device_id);
      this.$("push-off").hidden = false;
      this.pushStatus(this.t("pushRegistered"));
    } catch (err) {
      if (err.status === 401) return this.failed(err);
      this.pushStatus(this.t("pushOnFailed", { reason: err.message }), true);
    } finally {
      this.$("push-on").disabled = false;
    }
  }

  async pushOff() {
    const dev = localStorage.getItem(this.deviceKey());
    const sw = this.getAttribute("service-worker");
    try {
      if (dev) await this.client.call("DELETE", "v1/me/devices/" + encodeURIComponent(dev)).catch((err) => {
        if (err.status !== 404) throw err; // already gone
      });
      const scope = this.getAttribute("service-worker-scope") || (sw ? new URL("./", new URL(sw, document.baseURI)).pathname : "");
      const reg = scope && await navigator.serviceWorker.getRegistration(scope);
      const sub = reg && await reg.pushManager.getSubscription();
      if (sub) await sub.unsubscribe();
      localStorage.removeItem(this.deviceKey());
      this.$("push-off").hidden = true;
      this.pushStatus(this.t("pushOffDone"));
    } catch (err) {
      if (err.status === 401) return this.failed(err);
      this.pushStatus(this.t("pushOffFailed", { reason: err.message }), true);
    }
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

function b64urlBytes(s) {
  const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - s.length % 4) % 4));
  return Uint8Array.from(b, (c) => c.charCodeAt(0));
}

function sameBytes(a, b) {
  if (!a || !b) return false;
  a = new Uint8Array(a);
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export { VERSION };

if (!customElements.get("herald-inbox")) customElements.define("herald-inbox", HeraldInbox);
if (!customElements.get("herald-bell")) customElements.define("herald-bell", HeraldBell);
