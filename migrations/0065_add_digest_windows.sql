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
-- Each month's copy of the index is named after it (deliveries_y2026m11_digest_items), as
-- herald_partition_settings names the other waiting-row indexes (0021, 0057).
-- +goose StatementBegin
DO $$
DECLARE
    ix record;
BEGIN
    -- The partitions' copies of the indexes just made are named after the
    -- parent's, as herald_partition_settings names a new month's.
    FOR ix IN SELECT c.relname AS child, p.relname AS parent, t.relname AS part FROM pg_index x
        JOIN pg_class c ON c.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_inherits i ON i.inhrelid = x.indexrelid JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relname = 'deliveries_digest_items' LOOP
        EXECUTE format('ALTER INDEX public.%I RENAME TO %I', ix.child, ix.part || substr(ix.parent, length('deliveries') + 1));
    END LOOP;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_partition_settings(p_table text, p_part text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    ix record;
BEGIN
    IF p_table = 'deliveries' THEN
        -- The partition's partial indexes of the waiting rows are named
        -- after the parent's (deliveries_y2026m11_pending), so plans read
        -- as before.
        FOR ix IN SELECT c.relname AS child, p.relname AS parent FROM pg_index x
            JOIN pg_class c ON c.oid = x.indexrelid
            JOIN pg_inherits i ON i.inhrelid = x.indexrelid JOIN pg_class p ON p.oid = i.inhparent
            WHERE x.indrelid = format('public.%I', p_part)::regclass
              AND p.relname IN ('deliveries_pending', 'deliveries_due', 'deliveries_leased', 'deliveries_waiting', 'deliveries_digest_items') LOOP
            EXECUTE format('ALTER INDEX public.%I RENAME TO %I', ix.child, p_part || substr(ix.parent, length('deliveries') + 1));
        END LOOP;
        -- As the flat table had them (migration 0017): room in each page
        -- for the outcome's HOT update, autovacuum early.
        EXECUTE format('ALTER TABLE public.%I SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02, '
            'autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05)', p_part);
        EXECUTE format('ALTER TABLE public.%I ALTER COLUMN recipient SET STATISTICS 0, ALTER COLUMN content SET STATISTICS 0, '
            'ALTER COLUMN provider_message_id SET STATISTICS 0, ALTER COLUMN last_error SET STATISTICS 0', p_part);
    ELSE
        EXECUTE format('ALTER TABLE public.%I SET (autovacuum_vacuum_insert_scale_factor = 0.05, '
            'autovacuum_analyze_scale_factor = 0.05)', p_part);
        IF p_table = 'delivery_attempts' THEN
            EXECUTE format('ALTER TABLE public.%I ALTER COLUMN error SET STATISTICS 0, '
                'ALTER COLUMN provider_message_id SET STATISTICS 0', p_part);
        ELSE
            EXECUTE format('ALTER TABLE public.%I ALTER COLUMN title SET STATISTICS 0, '
                'ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN data SET STATISTICS 0', p_part);
        END IF;
    END IF;
    EXECUTE format('ALTER TABLE public.%I ENABLE ROW LEVEL SECURITY', p_part);
    EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', p_part);
    EXECUTE format('CREATE POLICY worker_all ON public.%I TO herald_worker USING (true) WITH CHECK (true)', p_part);
END;
$$;
-- +goose StatementEnd

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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_partition_settings(p_table text, p_part text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    ix record;
BEGIN
    IF p_table = 'deliveries' THEN
        -- The partition's partial indexes of the waiting rows are named
        -- after the parent's (deliveries_y2026m11_pending), so plans read
        -- as before.
        FOR ix IN SELECT c.relname AS child, p.relname AS parent FROM pg_index x
            JOIN pg_class c ON c.oid = x.indexrelid
            JOIN pg_inherits i ON i.inhrelid = x.indexrelid JOIN pg_class p ON p.oid = i.inhparent
            WHERE x.indrelid = format('public.%I', p_part)::regclass
              AND p.relname IN ('deliveries_pending', 'deliveries_due', 'deliveries_leased', 'deliveries_waiting') LOOP
            EXECUTE format('ALTER INDEX public.%I RENAME TO %I', ix.child, p_part || substr(ix.parent, length('deliveries') + 1));
        END LOOP;
        -- As the flat table had them (migration 0017): room in each page
        -- for the outcome's HOT update, autovacuum early.
        EXECUTE format('ALTER TABLE public.%I SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02, '
            'autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05)', p_part);
        EXECUTE format('ALTER TABLE public.%I ALTER COLUMN recipient SET STATISTICS 0, ALTER COLUMN content SET STATISTICS 0, '
            'ALTER COLUMN provider_message_id SET STATISTICS 0, ALTER COLUMN last_error SET STATISTICS 0', p_part);
    ELSE
        EXECUTE format('ALTER TABLE public.%I SET (autovacuum_vacuum_insert_scale_factor = 0.05, '
            'autovacuum_analyze_scale_factor = 0.05)', p_part);
        IF p_table = 'delivery_attempts' THEN
            EXECUTE format('ALTER TABLE public.%I ALTER COLUMN error SET STATISTICS 0, '
                'ALTER COLUMN provider_message_id SET STATISTICS 0', p_part);
        ELSE
            EXECUTE format('ALTER TABLE public.%I ALTER COLUMN title SET STATISTICS 0, '
                'ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN data SET STATISTICS 0', p_part);
        END IF;
    END IF;
    EXECUTE format('ALTER TABLE public.%I ENABLE ROW LEVEL SECURITY', p_part);
    EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', p_part);
    EXECUTE format('CREATE POLICY worker_all ON public.%I TO herald_worker USING (true) WITH CHECK (true)', p_part);
END;
$$;
-- +goose StatementEnd
DROP INDEX deliveries_digest_items;
ALTER TABLE deliveries DROP COLUMN digest_window;
DROP TABLE digest_windows;
