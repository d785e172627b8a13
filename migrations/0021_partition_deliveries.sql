-- deliveries, the biggest table (about 1.1 KiB a row, with its rendered
-- content), is partitioned by month of created_at (issue 17), like
-- delivery_attempts (0018) and notifications (0019): deliveries_yYYYYmMM,
-- created ahead by the daemon, dropped whole by retention
-- (retention.deliveries), and a default partition (0020) for the rows of
-- months without one.
--
-- created_at is now the creation time of the delivery's event (the relay
-- writes event_outbox.created_at, as for notifications; it was the
-- fan-out's clock), so a retried fan-out gives each delivery the same
-- partition key, and the unique key (tenant_id, event_id, user_id,
-- channel, created_at) refuses it as (tenant_id, event_id, user_id,
-- channel) did. The rows there are keep their created_at, which their
-- attempts carry as delivery_created_at: a delivery and its attempts stay
-- in the same month. The primary key is (delivery_id, created_at);
-- delivery ids are still unique (UUIDv7, written by the relay), and
-- lookups by id alone probe each partition's primary key.
--
-- Every partition is as the flat table was: fillfactor 50 and early
-- autovacuum (0017), no statistics of the rendered content (0006),
-- row-level security enabled and forced with the worker's policy
-- (herald_partition_settings, which herald_ensure_partitions now calls).
-- The partial indexes of the waiting rows (on queue) are the parent's.
--
-- Retention never loses a delivery still owed: herald_drop_partitions
-- moves a month's deliveries not final (PENDING, PUBLISHED, SENDING,
-- RETRY, DEFERRED) to the default partition in the transaction that
-- detaches and drops the month, and deletes the default partition's rows
-- past retention only once they are SENT or FAILED.

-- +goose Up
ALTER TABLE deliveries RENAME TO deliveries_0020;
ALTER INDEX deliveries_pkey RENAME TO deliveries_0020_pkey;
ALTER INDEX deliveries_tenant_id_event_id_user_id_channel_key RENAME TO deliveries_0020_tenant_id_event_id_user_id_channel_key;
ALTER INDEX deliveries_pending RENAME TO deliveries_0020_pending;
ALTER INDEX deliveries_due RENAME TO deliveries_0020_due;
ALTER INDEX deliveries_leased RENAME TO deliveries_0020_leased;
CREATE TABLE deliveries (
    delivery_id         uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id           text NOT NULL,
    notification_id     uuid NOT NULL,
    event_id            text NOT NULL,
    event_type          text NOT NULL,
    user_id             text NOT NULL,
    user_type           text NOT NULL,
    channel             text NOT NULL,
    severity            text NOT NULL DEFAULT 'info',
    status              text NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('DEFERRED', 'PENDING', 'PUBLISHED', 'SENDING', 'SENT', 'RETRY', 'FAILED')),
    best_effort         boolean NOT NULL DEFAULT false,
    attempts            int NOT NULL DEFAULT 0,
    max_attempts        int NOT NULL DEFAULT 1,
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    lease_until         timestamptz,
    recipient           jsonb NOT NULL DEFAULT '{}',
    content             jsonb NOT NULL DEFAULT '{}',
    provider            text NOT NULL DEFAULT '',
    provider_message_id text NOT NULL DEFAULT '',
    last_error          text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    traceparent         text,
    tracestate          text,
    queue               text GENERATED ALWAYS AS (
        CASE WHEN status IN ('PENDING', 'RETRY', 'DEFERRED', 'SENDING') THEN status END) STORED,
    PRIMARY KEY (delivery_id, created_at),
    UNIQUE (tenant_id, event_id, user_id, channel, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE queue = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE queue IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE queue = 'SENDING';
ALTER TABLE deliveries
    ALTER COLUMN recipient SET STATISTICS 0,
    ALTER COLUMN content SET STATISTICS 0,
    ALTER COLUMN provider_message_id SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0;

-- herald_partition_settings gives the partition p_part of p_table the
-- storage settings, statistics targets and row-level security the table's
-- partitions all have (herald_ensure_partitions, the default partitions).
-- +goose StatementBegin
CREATE FUNCTION herald_partition_settings(p_table text, p_part text)
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
CREATE OR REPLACE FUNCTION herald_ensure_partitions(p_table text, p_from timestamptz, p_to timestamptz)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    m timestamp;
    last timestamp;
    part text;
    created int := 0;
    stray boolean;
    key constant text := CASE p_table WHEN 'delivery_attempts' THEN 'delivery_created_at' ELSE 'created_at' END;
    cols text;
BEGIN
    IF p_table NOT IN ('delivery_attempts', 'notifications', 'deliveries') THEN
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
                -- The columns named are the stored ones (deliveries.queue
                -- is generated).
                SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols FROM pg_attribute
                WHERE attrelid = format('public.%I', p_table)::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '';
                EXECUTE format('CREATE TABLE public.%I (LIKE public.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)',
                    part, p_table);
                EXECUTE format('WITH moved AS (DELETE FROM public.%I WHERE %I >= %L AND %I < %L RETURNING %s) '
                    'INSERT INTO public.%I (%s) SELECT %s FROM moved', p_table || '_default',
                    key, (m AT TIME ZONE 'UTC'), key, ((m + interval '1 month') AT TIME ZONE 'UTC'), cols, part, cols, cols);
                EXECUTE format('ALTER TABLE public.%I ATTACH PARTITION public.%I FOR VALUES FROM (%L) TO (%L)',
                    p_table, part, (m AT TIME ZONE 'UTC'), ((m + interval '1 month') AT TIME ZONE 'UTC'));
            ELSE
                EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%L) TO (%L)',
                    part, p_table, (m AT TIME ZONE 'UTC'), ((m + interval '1 month') AT TIME ZONE 'UTC'));
            END IF;
            PERFORM herald_partition_settings(p_table, part);
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_analyze(p_table text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_table NOT IN ('event_outbox', 'notifications', 'notification_counters', 'deliveries', 'delivery_attempts',
                       'delivery_handoffs', 'recipients', 'recipient_devices', 'groups', 'group_members',
                       'user_preferences', 'group_settings')
       AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                       WHERE c.relname = p_table AND c.relnamespace = 'public'::regnamespace
                         AND i.inhparent IN ('public.delivery_attempts'::regclass, 'public.notifications'::regclass,
                                                'public.deliveries'::regclass)) THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION herald_partition_settings(text, text) FROM PUBLIC;

CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT;
SELECT herald_partition_settings('deliveries', 'deliveries_default');
-- The months of the rows there are (and of the events not yet fanned
-- out: their deliveries take the event's time), and three ahead.
SELECT herald_ensure_partitions('deliveries',
    least(now(), (SELECT min(created_at) FROM deliveries_0020), (SELECT min(created_at) FROM event_outbox)),
    greatest(now() + interval '3 months', (SELECT max(created_at) FROM deliveries_0020)));
INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, severity, status, best_effort, attempts, max_attempts, next_attempt_at, lease_until, recipient, content, provider, provider_message_id, last_error, created_at, updated_at, sent_at, traceparent, tracestate)
SELECT delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, severity, status, best_effort, attempts, max_attempts, next_attempt_at, lease_until, recipient, content, provider, provider_message_id, last_error, created_at, updated_at, sent_at, traceparent, tracestate FROM deliveries_0020;
DROP TABLE deliveries_0020;
ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON deliveries TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON deliveries TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON deliveries FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON deliveries TO herald_api, herald_worker;
GRANT SELECT ON deliveries TO herald_admin;

-- +goose Down
ALTER TABLE deliveries RENAME TO deliveries_0021;
ALTER INDEX deliveries_pkey RENAME TO deliveries_0021_pkey;
ALTER INDEX deliveries_tenant_id_event_id_user_id_channel_created_at_key RENAME TO deliveries_0021_tenant_id_event_id_user_id_channel_created_at_key;
ALTER INDEX deliveries_pending RENAME TO deliveries_0021_pending;
ALTER INDEX deliveries_due RENAME TO deliveries_0021_due;
ALTER INDEX deliveries_leased RENAME TO deliveries_0021_leased;
CREATE TABLE deliveries (
    delivery_id         uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id           text NOT NULL,
    notification_id     uuid NOT NULL,
    event_id            text NOT NULL,
    event_type          text NOT NULL,
    user_id             text NOT NULL,
    user_type           text NOT NULL,
    channel             text NOT NULL,
    severity            text NOT NULL DEFAULT 'info',
    status              text NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('DEFERRED', 'PENDING', 'PUBLISHED', 'SENDING', 'SENT', 'RETRY', 'FAILED')),
    best_effort         boolean NOT NULL DEFAULT false,
    attempts            int NOT NULL DEFAULT 0,
    max_attempts        int NOT NULL DEFAULT 1,
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    lease_until         timestamptz,
    recipient           jsonb NOT NULL DEFAULT '{}',
    content             jsonb NOT NULL DEFAULT '{}',
    provider            text NOT NULL DEFAULT '',
    provider_message_id text NOT NULL DEFAULT '',
    last_error          text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    traceparent         text,
    tracestate          text,
    queue               text GENERATED ALWAYS AS (
        CASE WHEN status IN ('PENDING', 'RETRY', 'DEFERRED', 'SENDING') THEN status END) STORED,
    PRIMARY KEY (delivery_id),
    UNIQUE (tenant_id, event_id, user_id, channel)
);
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE queue = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE queue IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE queue = 'SENDING';
ALTER TABLE deliveries
    ALTER COLUMN recipient SET STATISTICS 0,
    ALTER COLUMN content SET STATISTICS 0,
    ALTER COLUMN provider_message_id SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0;
ALTER TABLE deliveries SET (fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05);
INSERT INTO deliveries (delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, severity, status, best_effort, attempts, max_attempts, next_attempt_at, lease_until, recipient, content, provider, provider_message_id, last_error, created_at, updated_at, sent_at, traceparent, tracestate)
SELECT delivery_id, tenant_id, notification_id, event_id, event_type, user_id, user_type, channel, severity, status, best_effort, attempts, max_attempts, next_attempt_at, lease_until, recipient, content, provider, provider_message_id, last_error, created_at, updated_at, sent_at, traceparent, tracestate FROM deliveries_0021 ON CONFLICT DO NOTHING;
DROP TABLE deliveries_0021;
ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON deliveries TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON deliveries TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON deliveries FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON deliveries TO herald_api, herald_worker;
GRANT SELECT ON deliveries TO herald_admin;
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
CREATE OR REPLACE FUNCTION herald_analyze(p_table text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_table NOT IN ('event_outbox', 'notifications', 'notification_counters', 'deliveries', 'delivery_attempts',
                       'delivery_handoffs', 'recipients', 'recipient_devices', 'groups', 'group_members',
                       'user_preferences', 'group_settings')
       AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                       WHERE c.relname = p_table AND c.relnamespace = 'public'::regnamespace
                         AND i.inhparent IN ('public.delivery_attempts'::regclass, 'public.notifications'::regclass)) THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd
DROP FUNCTION herald_partition_settings(text, text);
