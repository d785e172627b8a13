-- Workflows (issue 28) give deliveries four more states, added here at
-- once so every workflow shares one set:
--   WAITING    not sent yet, waiting for its time: an escalation that a
--              read or an action may still cancel, a digest item in an
--              open window; it waits in next_attempt_at like DEFERRED.
--   SKIPPED    final, not sent by design (last_error says why: a live
--              delivery to a user with no open session is "offline", a
--              notification over a throttle is "throttled").
--   CANCELLED  final, not sent because it was called off (last_error says
--              by what: DELETE /v1/events/{id}, a read or an action that
--              made an escalation unneeded).
--   DIGESTED   final, sent as part of one digest delivery, not alone.
-- hold says what a WAITING delivery waits for: 'escalation' (sent when
-- due unless its notification was read or acted on) or 'digest' (an item
-- of an open digest window); NULL for every other delivery. Each workflow
-- reads only its own.
-- queue (0017) now holds WAITING too, with an index of its own for the
-- poller that releases waiting rows (named per month by
-- herald_partition_settings like the others); herald_drop_partitions keeps a
-- month's WAITING deliveries (still owed) and counts the three new final
-- states as final.
--
-- Monthly partitions were created with LIKE ... INCLUDING CONSTRAINTS and
-- attached, so each holds its own copy of the status check: the parent's
-- is dropped, then every partition's copy, then the new one is added to
-- the parent, which gives it to every partition.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    p regclass;
BEGIN
    ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_status_check1;
    ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_status_check;
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'deliveries'::regclass LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS deliveries_status_check1', p);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS deliveries_status_check', p);
    END LOOP;
END;
$$;
-- +goose StatementEnd
ALTER TABLE deliveries ADD CONSTRAINT deliveries_status_check1 CHECK (status IN
    ('DEFERRED', 'WAITING', 'PENDING', 'PUBLISHED', 'SENDING', 'SENT', 'RETRY', 'FAILED', 'SKIPPED', 'CANCELLED', 'DIGESTED'));
ALTER TABLE deliveries DROP COLUMN queue;
ALTER TABLE deliveries ADD COLUMN queue text GENERATED ALWAYS AS (
    CASE WHEN status IN ('PENDING', 'RETRY', 'DEFERRED', 'WAITING', 'SENDING') THEN status END) STORED;
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE queue = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE queue IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE queue = 'SENDING';
CREATE INDEX deliveries_waiting ON deliveries (next_attempt_at) WHERE queue = 'WAITING';
ALTER TABLE deliveries ADD COLUMN hold text CHECK (hold IN ('escalation', 'digest'));
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
        WHERE p.relname IN ('deliveries_pending', 'deliveries_due', 'deliveries_leased', 'deliveries_waiting') LOOP
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_drop_partitions(p_table text, p_before timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
    key text;
    cols text;
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications', 'deliveries') THEN
        RAISE EXCEPTION 'herald_drop_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols FROM pg_attribute
    WHERE attrelid = format('public.%I', p_table)::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '';
    FOR r IN SELECT * FROM herald_partitions(p_table) WHERE upper_bound <= p_before ORDER BY upper_bound LOOP
        IF p_table = 'notifications' THEN
            -- The unread counters lose the partition's unread rows in the
            -- same transaction. EXCLUSIVE waits for the inbox's writes of
            -- the partition under way (they update their counter in their
            -- own transaction) and holds off new ones; readers go on.
            EXECUTE format('LOCK TABLE public.%I IN EXCLUSIVE MODE', r.partition_name);
            EXECUTE format('UPDATE notification_counters c SET unread = c.unread - x.n FROM (
                    SELECT tenant_id, user_id, project_id, count(*) AS n FROM public.%I
                    WHERE read_at IS NULL AND archived_at IS NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x
                WHERE c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id',
                r.partition_name);
        END IF;
        EXECUTE format('ALTER TABLE public.%I DETACH PARTITION public.%I', p_table, r.partition_name);
        IF p_table = 'deliveries' THEN
            -- A delivery not final yet (PENDING, PUBLISHED, SENDING,
            -- RETRY, DEFERRED, WAITING) is still owed to its user: it moves to the
            -- default partition, in this transaction (the detach holds
            -- off every statement on deliveries until it commits), with
            -- its id, status and attempts, and goes on from there.
            EXECUTE format('INSERT INTO public.deliveries_default (%s) SELECT %s FROM public.%I
                WHERE status NOT IN (''SENT'', ''FAILED'', ''SKIPPED'', ''CANCELLED'', ''DIGESTED'')', cols, cols, r.partition_name);
        END IF;
        EXECUTE format('DROP TABLE public.%I', r.partition_name);
        RETURN NEXT r.partition_name;
    END LOOP;
    -- The default partition holds the rows of months without a partition
    -- of their own (a month already dropped, or never created): its rows
    -- past retention are deleted (it is small and off the hot path), the
    -- unread ones of notifications taken off the counters, the
    -- deliveries not final yet kept until they are.
    key := CASE p_table WHEN 'delivery_attempts' THEN 'delivery_created_at' ELSE 'created_at' END;
    EXECUTE format('LOCK TABLE public.%I IN EXCLUSIVE MODE', p_table || '_default');
    IF p_table = 'notifications' THEN
        EXECUTE format('WITH gone AS (DELETE FROM public.%I WHERE created_at < %L
                RETURNING tenant_id, user_id, project_id, read_at IS NULL AND archived_at IS NULL AS unread)
            UPDATE notification_counters c SET unread = c.unread - x.n FROM (
                SELECT tenant_id, user_id, project_id, count(*) FILTER (WHERE unread) AS n FROM gone
                GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x
            WHERE x.n > 0 AND c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id',
            p_table || '_default', p_before);
    ELSIF p_table = 'deliveries' THEN
        EXECUTE format('DELETE FROM public.deliveries_default WHERE created_at < %L AND status IN (''SENT'', ''FAILED'', ''SKIPPED'', ''CANCELLED'', ''DIGESTED'')', p_before);
    ELSE
        EXECUTE format('DELETE FROM public.%I WHERE %I < %L', p_table || '_default', key, p_before);
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM deliveries WHERE status IN ('WAITING', 'SKIPPED', 'CANCELLED', 'DIGESTED')) THEN
        RAISE EXCEPTION 'deliveries hold WAITING, SKIPPED, CANCELLED or DIGESTED rows: 0057 cannot be undone';
    END IF;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    p regclass;
BEGIN
    ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_status_check1;
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'deliveries'::regclass LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS deliveries_status_check1', p);
    END LOOP;
END;
$$;
-- +goose StatementEnd
ALTER TABLE deliveries DROP COLUMN hold;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_status_check1 CHECK (status IN
    ('DEFERRED', 'PENDING', 'PUBLISHED', 'SENDING', 'SENT', 'RETRY', 'FAILED'));
ALTER TABLE deliveries DROP COLUMN queue;
ALTER TABLE deliveries ADD COLUMN queue text GENERATED ALWAYS AS (
    CASE WHEN status IN ('PENDING', 'RETRY', 'DEFERRED', 'SENDING') THEN status END) STORED;
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE queue = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE queue IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE queue = 'SENDING';
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
        WHERE p.relname IN ('deliveries_pending', 'deliveries_due', 'deliveries_leased', 'deliveries_waiting') LOOP
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
              AND p.relname IN ('deliveries_pending', 'deliveries_due', 'deliveries_leased') LOOP
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_drop_partitions(p_table text, p_before timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
    key text;
    cols text;
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications', 'deliveries') THEN
        RAISE EXCEPTION 'herald_drop_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols FROM pg_attribute
    WHERE attrelid = format('public.%I', p_table)::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '';
    FOR r IN SELECT * FROM herald_partitions(p_table) WHERE upper_bound <= p_before ORDER BY upper_bound LOOP
        IF p_table = 'notifications' THEN
            -- The unread counters lose the partition's unread rows in the
            -- same transaction. EXCLUSIVE waits for the inbox's writes of
            -- the partition under way (they update their counter in their
            -- own transaction) and holds off new ones; readers go on.
            EXECUTE format('LOCK TABLE public.%I IN EXCLUSIVE MODE', r.partition_name);
            EXECUTE format('UPDATE notification_counters c SET unread = c.unread - x.n FROM (
                    SELECT tenant_id, user_id, project_id, count(*) AS n FROM public.%I
                    WHERE read_at IS NULL AND archived_at IS NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x
                WHERE c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id',
                r.partition_name);
        END IF;
        EXECUTE format('ALTER TABLE public.%I DETACH PARTITION public.%I', p_table, r.partition_name);
        IF p_table = 'deliveries' THEN
            -- A delivery not final yet (PENDING, PUBLISHED, SENDING,
            -- RETRY, DEFERRED) is still owed to its user: it moves to the
            -- default partition, in this transaction (the detach holds
            -- off every statement on deliveries until it commits), with
            -- its id, status and attempts, and goes on from there.
            EXECUTE format('INSERT INTO public.deliveries_default (%s) SELECT %s FROM public.%I
                WHERE status NOT IN (''SENT'', ''FAILED'')', cols, cols, r.partition_name);
        END IF;
        EXECUTE format('DROP TABLE public.%I', r.partition_name);
        RETURN NEXT r.partition_name;
    END LOOP;
    -- The default partition holds the rows of months without a partition
    -- of their own (a month already dropped, or never created): its rows
    -- past retention are deleted (it is small and off the hot path), the
    -- unread ones of notifications taken off the counters, the
    -- deliveries not final yet kept until they are.
    key := CASE p_table WHEN 'delivery_attempts' THEN 'delivery_created_at' ELSE 'created_at' END;
    EXECUTE format('LOCK TABLE public.%I IN EXCLUSIVE MODE', p_table || '_default');
    IF p_table = 'notifications' THEN
        EXECUTE format('WITH gone AS (DELETE FROM public.%I WHERE created_at < %L
                RETURNING tenant_id, user_id, project_id, read_at IS NULL AND archived_at IS NULL AS unread)
            UPDATE notification_counters c SET unread = c.unread - x.n FROM (
                SELECT tenant_id, user_id, project_id, count(*) FILTER (WHERE unread) AS n FROM gone
                GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x
            WHERE x.n > 0 AND c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id',
            p_table || '_default', p_before);
    ELSIF p_table = 'deliveries' THEN
        EXECUTE format('DELETE FROM public.deliveries_default WHERE created_at < %L AND status IN (''SENT'', ''FAILED'')', p_before);
    ELSE
        EXECUTE format('DELETE FROM public.%I WHERE %I < %L', p_table || '_default', key, p_before);
    END IF;
END;
$$;
-- +goose StatementEnd
