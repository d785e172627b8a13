-- delivery_attempts, the audit log (one row per attempt, never updated),
-- is the first table partitioned by time (issue 17): one partition per
-- calendar month (UTC) of the delivery's creation, named
-- delivery_attempts_yYYYYmMM. Old months go by detaching and dropping a
-- whole partition (store.ApplyRetention), never by a long DELETE.
--
-- The partition key is delivery_created_at, the created_at of the
-- attempt's delivery, which the statements that write an attempt read from
-- the delivery they update (RETURNING d.created_at). It never changes for
-- a delivery, so every attempt of one delivery lands in one partition, and
-- the primary key (delivery_id, attempt, delivery_created_at) refuses a
-- retried insert of the same attempt exactly as (delivery_id, attempt)
-- did: a key of a partitioned table must include its partition key.
--
-- herald_ensure_partitions creates the months ahead; the daemon calls it
-- at start and every hour (store.EnsurePartitions, server.PartitionKeeper),
-- so no cron is needed. This migration creates the months of the existing
-- rows and three months ahead.
--
-- Partitions are reached through the parent: its row-level security and
-- grants apply there. The partitions themselves grant nothing to Herald's
-- roles, and have row-level security enabled and forced with the same
-- worker policy, so a direct query of a partition by herald_api is
-- refused.

-- +goose Up
ALTER TABLE delivery_attempts RENAME TO delivery_attempts_0017;
ALTER INDEX delivery_attempts_pkey RENAME TO delivery_attempts_0017_pkey;
CREATE TABLE delivery_attempts (
    tenant_id           text NOT NULL,
    delivery_id         uuid NOT NULL,
    attempt             int NOT NULL,
    outcome             text NOT NULL,
    provider            text NOT NULL DEFAULT '',
    provider_message_id text NOT NULL DEFAULT '',
    error               text NOT NULL DEFAULT '',
    retry_after_ms      bigint NOT NULL DEFAULT 0,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL DEFAULT now(),
    delivery_created_at timestamptz NOT NULL,
    PRIMARY KEY (delivery_id, attempt, delivery_created_at)
) PARTITION BY RANGE (delivery_created_at);
ALTER TABLE delivery_attempts
    ALTER COLUMN error SET STATISTICS 0,
    ALTER COLUMN provider_message_id SET STATISTICS 0;

-- herald_ensure_partitions creates the monthly partitions of p_table
-- (one of Herald's partitioned tables) covering p_from to p_to, those
-- that do not exist yet, as the owner (the daemon's role may not create
-- tables). It returns how many it created.
-- +goose StatementBegin
CREATE FUNCTION herald_ensure_partitions(p_table text, p_from timestamptz, p_to timestamptz)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    m timestamp;
    last timestamp;
    part text;
    created int := 0;
BEGIN
    IF p_table NOT IN ('delivery_attempts') THEN
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
            EXECUTE format('ALTER TABLE public.%I ALTER COLUMN error SET STATISTICS 0, '
                'ALTER COLUMN provider_message_id SET STATISTICS 0', part);
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

-- herald_drop_partitions detaches and drops the monthly partitions of
-- p_table whose every row is older than p_before (the partition's upper
-- bound is at or before it), as the owner. It returns the dropped
-- partitions' names.
-- +goose StatementBegin
CREATE FUNCTION herald_drop_partitions(p_table text, p_before timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
BEGIN
    IF p_table NOT IN ('delivery_attempts') THEN
        RAISE EXCEPTION 'herald_drop_partitions: % is not one of Herald''s partitioned tables', p_table;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('herald_ensure_partitions'));
    FOR r IN SELECT * FROM herald_partitions(p_table) WHERE upper_bound <= p_before ORDER BY upper_bound LOOP
        EXECUTE format('ALTER TABLE public.%I DETACH PARTITION public.%I', p_table, r.partition_name);
        EXECUTE format('DROP TABLE public.%I', r.partition_name);
        RETURN NEXT r.partition_name;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- herald_partitions lists the partitions of p_table with their bounds and
-- an estimate of their rows (the planner's, from the last analyze).
-- +goose StatementBegin
CREATE FUNCTION herald_partitions(p_table text)
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

-- herald_analyze also takes a partition of one of Herald's partitioned
-- tables (store.AnalyzeStale analyzes a fresh month on its own).
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
                         AND i.inhparent = 'public.delivery_attempts'::regclass) THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd

-- The months of the rows there are, and three ahead.
SELECT herald_ensure_partitions('delivery_attempts',
    least(now(), (SELECT min(coalesce(d.created_at, a.started_at)) FROM delivery_attempts_0017 a
        LEFT JOIN deliveries d ON d.delivery_id = a.delivery_id)),
    greatest(now() + interval '3 months', (SELECT max(coalesce(d.created_at, a.started_at)) FROM delivery_attempts_0017 a
        LEFT JOIN deliveries d ON d.delivery_id = a.delivery_id)));
-- An attempt whose delivery is gone (no foreign key since 0004) goes to
-- the month it started in.
INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, provider, provider_message_id, error,
    retry_after_ms, started_at, finished_at, delivery_created_at)
SELECT a.tenant_id, a.delivery_id, a.attempt, a.outcome, a.provider, a.provider_message_id, a.error,
    a.retry_after_ms, a.started_at, a.finished_at, coalesce(d.created_at, a.started_at)
FROM delivery_attempts_0017 a LEFT JOIN deliveries d ON d.delivery_id = a.delivery_id;
DROP TABLE delivery_attempts_0017;

ALTER TABLE delivery_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON delivery_attempts TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON delivery_attempts TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON delivery_attempts FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON delivery_attempts TO herald_api, herald_worker;
GRANT SELECT ON delivery_attempts TO herald_admin;
REVOKE ALL ON FUNCTION herald_ensure_partitions(text, timestamptz, timestamptz),
    herald_drop_partitions(text, timestamptz), herald_partitions(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_ensure_partitions(text, timestamptz, timestamptz),
    herald_drop_partitions(text, timestamptz), herald_partitions(text) TO herald_worker;
GRANT EXECUTE ON FUNCTION herald_partitions(text) TO herald_admin;

-- +goose Down
ALTER TABLE delivery_attempts RENAME TO delivery_attempts_0018;
ALTER INDEX delivery_attempts_pkey RENAME TO delivery_attempts_0018_pkey;
CREATE TABLE delivery_attempts (
    tenant_id           text NOT NULL,
    delivery_id         uuid NOT NULL,
    attempt             int NOT NULL,
    outcome             text NOT NULL,
    provider            text NOT NULL DEFAULT '',
    provider_message_id text NOT NULL DEFAULT '',
    error               text NOT NULL DEFAULT '',
    retry_after_ms      bigint NOT NULL DEFAULT 0,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (delivery_id, attempt)
);
INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, provider, provider_message_id, error,
    retry_after_ms, started_at, finished_at)
SELECT tenant_id, delivery_id, attempt, outcome, provider, provider_message_id, error,
    retry_after_ms, started_at, finished_at FROM delivery_attempts_0018
ON CONFLICT (delivery_id, attempt) DO NOTHING;
DROP TABLE delivery_attempts_0018;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_analyze(p_table text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_table NOT IN ('event_outbox', 'notifications', 'notification_counters', 'deliveries', 'delivery_attempts',
                       'delivery_handoffs', 'recipients', 'recipient_devices', 'groups', 'group_members',
                       'user_preferences', 'group_settings') THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd
DROP FUNCTION herald_drop_partitions(text, timestamptz);
DROP FUNCTION herald_partitions(text);
DROP FUNCTION herald_ensure_partitions(text, timestamptz, timestamptz);
ALTER TABLE delivery_attempts
    ALTER COLUMN error SET STATISTICS 0,
    ALTER COLUMN provider_message_id SET STATISTICS 0;
ALTER TABLE delivery_attempts SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE delivery_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON delivery_attempts TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON delivery_attempts TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON delivery_attempts FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON delivery_attempts TO herald_api, herald_worker;
GRANT SELECT ON delivery_attempts TO herald_admin;
