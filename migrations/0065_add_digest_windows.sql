-- Digests (issue 28): an event rule may collect a recipient's
-- notifications on a channel, per digest key, over a window, and send one
-- message rendered from all of them.
--
-- An item waiting in an open window is a deliveries row with status
-- WAITING, hold 'digest' and digest_window naming its window (so a cancel
-- that moves WAITING rows to CANCELLED also cancels items not flushed yet).
-- digest_windows holds the open windows, at most one OPEN per (tenant,
-- user, channel, event type, key): the relay opens one or counts an item
-- into it in its own transaction (INSERT ... ON CONFLICT on the partial
-- unique index). A window that reaches max_items turns FULL (closed, due at
-- once) and the next item opens a new one.
--
-- The flush claims due windows FOR UPDATE SKIP LOCKED, takes their items
-- still WAITING, inserts exactly one digest delivery per window (event_id
-- 'digest:' || window_id), marks the items DIGESTED and deletes the window,
-- all in one transaction: a crash loses nothing and sends nothing twice,
-- and two daemons never flush one window twice.

-- +goose Up
CREATE TABLE digest_windows (
    tenant_id  text NOT NULL,
    window_id  uuid NOT NULL DEFAULT gen_random_uuid(),
    user_id    text NOT NULL,
    channel    text NOT NULL,
    event_type text NOT NULL,
    digest_key text NOT NULL CONSTRAINT digest_windows_key CHECK (digest_key <> '' AND octet_length(digest_key) <= 1000),
    status     text NOT NULL DEFAULT 'OPEN' CHECK (status IN ('OPEN', 'FULL')),
    items      integer NOT NULL DEFAULT 0 CHECK (items >= 0),
    max_items  integer NOT NULL CHECK (max_items > 0),
    opened_at  timestamptz NOT NULL DEFAULT now(),
    closes_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, window_id)
);
CREATE UNIQUE INDEX digest_windows_open ON digest_windows (tenant_id, user_id, channel, event_type, digest_key) WHERE status = 'OPEN';
CREATE INDEX digest_windows_due ON digest_windows (closes_at);

ALTER TABLE deliveries ADD COLUMN digest_window uuid;
CREATE INDEX deliveries_digest_items ON deliveries (digest_window) WHERE queue = 'WAITING' AND digest_window IS NOT NULL;

GRANT SELECT, INSERT, UPDATE, DELETE ON digest_windows TO herald_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON digest_windows TO herald_api;
GRANT SELECT ON digest_windows TO herald_admin;
ALTER TABLE digest_windows ENABLE ROW LEVEL SECURITY;
ALTER TABLE digest_windows FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON digest_windows TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON digest_windows TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON digest_windows FOR SELECT TO herald_admin USING (true);

-- +goose Down
DROP INDEX deliveries_digest_items;
ALTER TABLE deliveries DROP COLUMN digest_window;
DROP TABLE digest_windows;
