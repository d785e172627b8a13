-- A default partition for delivery_attempts and notifications: a row
-- whose month has no partition (the month was dropped by retention, or
-- never created) goes there instead of failing its statement. Without it,
-- the outcome of a delivery created in a month retention already dropped
-- (a FAILED delivery requeued weeks later by `herald deliveries retry`, a
-- retry that outlived retention.delivery_attempts) would fail the whole
-- batch of outcomes its listener records, and the fan-out of an event
-- whose month was never created (producers enqueueing while no daemon ran
-- for months) would fail the event.
--
-- The default partition only ever holds such stragglers. When a month is
-- created whose range has rows waiting in it, herald_ensure_partitions
-- moves them into the new month before attaching it. Retention deletes the
-- default partition's rows past it (taking unread notifications off the
-- counters), and herald_partitions, `herald retention status` and the
-- monthly drops leave it out.

-- +goose Up
CREATE TABLE delivery_attempts_default PARTITION OF delivery_attempts DEFAULT;
ALTER TABLE delivery_attempts_default SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE delivery_attempts_default ALTER COLUMN error SET STATISTICS 0, ALTER COLUMN provider_message_id SET STATISTICS 0;
ALTER TABLE delivery_attempts_default ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_attempts_default FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON delivery_attempts_default TO herald_worker USING (true) WITH CHECK (true);
CREATE TABLE notifications_default PARTITION OF notifications DEFAULT;
ALTER TABLE notifications_default SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE notifications_default ALTER COLUMN title SET STATISTICS 0, ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN data SET STATISTICS 0;
ALTER TABLE notifications_default ENABLE ROW LEVEL SECURITY;
ALTER TABLE notifications_default FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON notifications_default TO herald_worker USING (true) WITH CHECK (true);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_ensure_partitions(p_table text, p_from timestamptz, p_to timestamptz)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    m timestamp;
    last timestamp;
    part text;
    created int := 0;
    stray boolean;
    key constant text := CASE p_table WHEN 'notifications' THEN 'created_at' ELSE 'delivery_created_at' END;
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications') THEN
        RAISE EXCEPTION 'herald_ensure_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    IF p_from IS NULL OR p_to IS NULL OR p_to < p_from OR p_to - p_from > interval '10 years' THEN
        RAISE EXCEPTION 'herald_ensure_partitions: bad range % to %', p_from, p_to;
    END IF;
    -- Daemons starting together create each partition once.
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
    m := date_trunc('month', p_from AT TIME ZONE 'UTC');
    last := date_trunc('month', p_to AT TIME ZONE 'UTC');
    WHILE m <= last LOOP
        part := format('%s_y%sm%s', p_table, to_char(m, 'YYYY'), to_char(m, 'MM'));
        IF to_regclass(format('public.%I', part)) IS NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM public.%I WHERE %I >= %L AND %I < %L)', p_table || '_default',
                key, (m AT TIME ZONE 'UTC'), key, ((m + interval '1 month') AT TIME ZONE 'UTC')) INTO stray;
            IF stray THEN
                -- Rows of this month wait in the default partition: they
                -- move into the new month, which is attached afterwards.
                EXECUTE format('CREATE TABLE public.%I (LIKE public.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part, p_table);
                EXECUTE format('WITH moved AS (DELETE FROM public.%I WHERE %I >= %L AND %I < %L RETURNING *) '
                    'INSERT INTO public.%I SELECT * FROM moved', p_table || '_default',
                    key, (m AT TIME ZONE 'UTC'), key, ((m + interval '1 month') AT TIME ZONE 'UTC'), part);
                EXECUTE format('ALTER TABLE public.%I ATTACH PARTITION public.%I FOR VALUES FROM (%L) TO (%L)',
                    p_table, part, (m AT TIME ZONE 'UTC'), ((m + interval '1 month') AT TIME ZONE 'UTC'));
            ELSE
                EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%L) TO (%L)',
                    part, p_table, (m AT TIME ZONE 'UTC'), ((m + interval '1 month') AT TIME ZONE 'UTC'));
            END IF;
            EXECUTE format('ALTER TABLE public.%I SET (autovacuum_vacuum_insert_scale_factor = 0.05, '
                'autovacuum_analyze_scale_factor = 0.05)', part);
            IF p_table = 'delivery_attempts' THEN
                EXECUTE format('ALTER TABLE public.%I ALTER COLUMN error SET STATISTICS 0, '
                    'ALTER COLUMN provider_message_id SET STATISTICS 0', part);
            ELSE
                EXECUTE format('ALTER TABLE public.%I ALTER COLUMN title SET STATISTICS 0, '
                    'ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN data SET STATISTICS 0', part);
            END IF;
            EXECUTE format('ALTER TABLE public.%I ENABLE ROW LEVEL SECURITY', part);
            EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', part);
            EXECUTE format('CREATE POLICY worker_all ON public.%I TO herald_worker USING (true) WITH CHECK (true)', part);
            created := created + 1;
        END IF;
        m := m + interval '1 month';
    END LOOP;
    RETURN created;
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
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications') THEN
        RAISE EXCEPTION 'herald_drop_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
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
        EXECUTE format('DROP TABLE public.%I', r.partition_name);
        RETURN NEXT r.partition_name;
    END LOOP;
    -- The default partition holds the rows of months without a partition
    -- of their own (a month already dropped, or never created): its rows
    -- past retention are deleted (it is small and off the hot path), the
    -- unread ones of notifications taken off the counters.
    key := CASE p_table WHEN 'notifications' THEN 'created_at' ELSE 'delivery_created_at' END;
    EXECUTE format('LOCK TABLE public.%I IN EXCLUSIVE MODE', p_table || '_default');
    IF p_table = 'notifications' THEN
        EXECUTE format('WITH gone AS (DELETE FROM public.%I WHERE created_at < %L
                RETURNING tenant_id, user_id, project_id, read_at IS NULL AND archived_at IS NULL AS unread)
            UPDATE notification_counters c SET unread = c.unread - x.n FROM (
                SELECT tenant_id, user_id, project_id, count(*) FILTER (WHERE unread) AS n FROM gone
                GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) x
            WHERE x.n > 0 AND c.tenant_id = x.tenant_id AND c.user_id = x.user_id AND c.project_id = x.project_id',
            p_table || '_default', p_before);
    ELSE
        EXECUTE format('DELETE FROM public.%I WHERE %I < %L', p_table || '_default', key, p_before);
    END IF;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_partitions(p_table text)
RETURNS TABLE (partition_name text, lower_bound timestamptz, upper_bound timestamptz, estimated_rows bigint, bytes bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT c.relname::text,
        (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
        (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz,
        greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = format('public.%I', p_table)::regclass AND NOT c.relname LIKE '%\_default'
    ORDER BY 3
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_partitions(p_table text)
RETURNS TABLE (partition_name text, lower_bound timestamptz, upper_bound timestamptz, estimated_rows bigint, bytes bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT c.relname::text,
        (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
        (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz,
        greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = format('public.%I', p_table)::regclass
    ORDER BY 3
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_drop_partitions(p_table text, p_before timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications') THEN
        RAISE EXCEPTION 'herald_drop_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
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
        EXECUTE format('DROP TABLE public.%I', r.partition_name);
        RETURN NEXT r.partition_name;
    END LOOP;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_ensure_partitions(p_table text, p_from timestamptz, p_to timestamptz)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    m timestamp;
    last timestamp;
    part text;
    created int := 0;
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications') THEN
        RAISE EXCEPTION 'herald_ensure_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    IF p_from IS NULL OR p_to IS NULL OR p_to < p_from OR p_to - p_from > interval '10 years' THEN
        RAISE EXCEPTION 'herald_ensure_partitions: bad range % to %', p_from, p_to;
    END IF;
    -- Daemons starting together create each partition once.
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
    m := date_trunc('month', p_from AT TIME ZONE 'UTC');
    last := date_trunc('month', p_to AT TIME ZONE 'UTC');
    WHILE m <= last LOOP
        part := format('%s_y%sm%s', p_table, to_char(m, 'YYYY'), to_char(m, 'MM'));
        IF to_regclass(format('public.%I', part)) IS NULL THEN
            EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%L) TO (%L)',
                part, p_table, (m AT TIME ZONE 'UTC'), ((m + interval '1 month') AT TIME ZONE 'UTC'));
            EXECUTE format('ALTER TABLE public.%I SET (autovacuum_vacuum_insert_scale_factor = 0.05, '
                'autovacuum_analyze_scale_factor = 0.05)', part);
            IF p_table = 'delivery_attempts' THEN
                EXECUTE format('ALTER TABLE public.%I ALTER COLUMN error SET STATISTICS 0, '
                    'ALTER COLUMN provider_message_id SET STATISTICS 0', part);
            ELSE
                EXECUTE format('ALTER TABLE public.%I ALTER COLUMN title SET STATISTICS 0, '
                    'ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN data SET STATISTICS 0', part);
            END IF;
            EXECUTE format('ALTER TABLE public.%I ENABLE ROW LEVEL SECURITY', part);
            EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', part);
            EXECUTE format('CREATE POLICY worker_all ON public.%I TO herald_worker USING (true) WITH CHECK (true)', part);
            created := created + 1;
        END IF;
        m := m + interval '1 month';
    END LOOP;
    RETURN created;
END;
$$;
-- +goose StatementEnd
-- Rows of the default partitions go with them.
DROP TABLE notifications_default;
DROP TABLE delivery_attempts_default;
