// Types of herald-inbox.js: the <herald-inbox> and <herald-bell> custom
// elements. Importing the module defines both elements.

/** A function the component calls for a fresh user token (a JWT Herald
 * accepts): before the one it holds expires (it reads the token's exp) and
 * again when the API answers 401. */
export type TokenProvider = () => Promise<string> | string;

/** Message overrides: {key: text} for every locale, or {locale: {key: text}}
 * for one ("it", "pt-BR"). {name} in a text is filled in. */
export type Messages = Record<string, string | Record<string, string>>;

/** The built-in message catalogue: en, it, de, fr, es. */
export declare const MESSAGES: Record<"en" | "it" | "de" | "fr" | "es", Record<string, string>>;

export declare const VERSION: string;

/** The bell's text for n unread: "99+" above 99. */
export declare function capCount(n: number): string;

/** u when it is an absolute http(s) URL, else "". */
export declare function safeURL(u: unknown): string;

/** u resolved against the page when it is an https URL or a relative one
 * (at most 2048 characters), else "": the URLs a notification's picture
 * (data.icon) loads from. */
export declare function safeIcon(u: unknown): string;

/** The token's exp claim in milliseconds (unverified); 0 when none. */
export declare function jwtExp(token: string): number;

/** One notification as GET /v1/inbox lists it. */
export interface HeraldNotification {
  notification_id: string;
  event_id: string;
  event_type: string;
  project_id: string;
  title: string;
  body: string;
  /** The inbox template's data block; data.url is the click-through URL,
   * data.icon the notification's picture. */
  data: Record<string, unknown> | null;
  severity: string;
  status: "unread" | "read" | "archived";
  created_at: string;
  shared: boolean;
  actionable: boolean;
  handled_by?: { action_id: string; user_id: string; type: string; at: string };
}

declare class Localized extends HTMLElement {
  /** Attribute locale: a BCP 47 tag; default the page's lang, then the browser's. */
  locale: string;
  /** Overrides of any catalogue string. */
  messages: Messages;
  /** A catalogue string in the element's locale. */
  t(key: string, vars?: Record<string, string | number>): string;
}

/**
 * <herald-inbox api="https://herald.example.com/" locale="it" theme="dark"
 *   toast="off" service-worker="/sw.js" dir="rtl">
 *
 * Events (bubbling, composed): herald-unread {unread}, herald-toast {title},
 * herald-open {url, notification}, herald-auth-error {message}.
 * Parts: container header live bell badge button action toolbar filter
 * search list day item (and its status) avatar severity title body meta
 * empty error toast prefs.
 */
export declare class HeraldInbox extends Localized {
  /** The host app's token callback; setting it (re)starts the inbox. */
  tokenProvider: TokenProvider | null;
  /** How many tokens the provider has given. */
  readonly tokensProvided: number;
  /** The current unread count. */
  readonly unread: number;
  /** Reloads the count and the list. */
  refresh(): Promise<void>;
}

/**
 * <herald-bell for="inbox-id"> mirrors that inbox's count and toggles its
 * hidden on click; without for it reads the count itself and follows it
 * live (api and tokenProvider as herald-inbox), and a click is the host's
 * to handle. Either way a click fires herald-bell-click.
 */
export declare class HeraldBell extends Localized {
  tokenProvider: TokenProvider | null;
  readonly count: number;
}

declare global {
  interface HTMLElementTagNameMap {
    "herald-inbox": HeraldInbox;
    "herald-bell": HeraldBell;
  }
  interface HTMLElementEventMap {
    "herald-unread": CustomEvent<{ unread: number }>;
    "herald-toast": CustomEvent<{ title: string }>;
    "herald-open": CustomEvent<{ url: string; notification: HeraldNotification | undefined }>;
    "herald-auth-error": CustomEvent<{ message: string }>;
    "herald-bell-click": CustomEvent<void>;
  }
}
