-- notifications, the inbox rows (one per event and user), is partitioned
-- by month of created_at (issue 17), like delivery_attempts (0018):
-- notifications_yYYYYmMM, created ahead by the daemon, dropped whole by
-- retention (retention.notifications).
--
-- created_at is now the creation time of the notification's event (the
-- relay writes event_outbox.created_at; it was the fan-out's now()), so a
-- retried fan-out of one event gives each user's notification the same
-- partition key, and the unique key (tenant_id, event_id, user_id,
-- created_at) refuses it as (tenant_id, event_id, user_id) did. The
-- primary key is (notification_id, created_at); notification ids are
-- still unique (UUIDv7, written by the relay). Lookups by id alone (the
-- inbox's read, archive, unread) probe each partition's primary key.
--
-- Retention drops a month of notifications and, in the same transaction,
-- takes its unread rows off the unread counters (herald_drop_partitions),
-- so the counters stay equal to a recount. The superadmin's list and
-- statistics filter on created_at, so a time range reads only its months.

-- +goose Up
ALTER TABLE notifications RENAME TO notifications_0018;
ALTER INDEX notifications_pkey RENAME TO notifications_0018_pkey;
ALTER INDEX notifications_tenant_id_event_id_user_id_key RENAME TO notifications_0018_tenant_id_event_id_user_id_key;
ALTER INDEX notifications_inbox RENAME TO notifications_0018_inbox;
ALTER INDEX notifications_recent RENAME TO notifications_0018_recent;
ALTER INDEX notifications_tenant_recent RENAME TO notifications_0018_tenant_recent;
ALTER INDEX notifications_shared RENAME TO notifications_0018_shared;
CREATE TABLE notifications (
    notification_id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    event_id        text NOT NULL,
    user_id         text NOT NULL,
    event_type      text NOT NULL,
    title           text NOT NULL DEFAULT '',
    body            text NOT NULL DEFAULT '',
    data            jsonb NOT NULL DEFAULT '{}',
    severity        text NOT NULL DEFAULT 'info',
    share_key       text,
    read_at         timestamptz,
    archived_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    project_id      text NOT NULL DEFAULT 'default',
    PRIMARY KEY (notification_id, created_at),
    UNIQUE (tenant_id, event_id, user_id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX notifications_inbox ON notifications (tenant_id, user_id, created_at DESC, notification_id DESC);
CREATE INDEX notifications_recent ON notifications (created_at DESC, notification_id DESC);
CREATE INDEX notifications_tenant_recent ON notifications (tenant_id, created_at DESC, notification_id DESC);
CREATE INDEX notifications_shared ON notifications (tenant_id, share_key) WHERE share_key IS NOT NULL;
ALTER TABLE notifications
    ALTER COLUMN title SET STATISTICS 0,
    ALTER COLUMN body SET STATISTICS 0,
    ALTER COLUMN data SET STATISTICS 0;

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

-- The months of the rows there are (and of the events not yet fanned
-- out: their notifications take the event's time), and three ahead.
SELECT herald_ensure_partitions('notifications',
    least(now(), (SELECT min(created_at) FROM notifications_0018), (SELECT min(created_at) FROM event_outbox)),
    greatest(now() + interval '3 months', (SELECT max(created_at) FROM notifications_0018)));
INSERT INTO notifications (notification_id, tenant_id, event_id, user_id, event_type, title, body, data, severity, share_key, read_at, archived_at, created_at, project_id)
SELECT notification_id, tenant_id, event_id, user_id, event_type, title, body, data, severity, share_key, read_at, archived_at, created_at, project_id FROM notifications_0018;
DROP TABLE notifications_0018;
ALTER TABLE notifications ENABLE ROW LEVEL SECURITY;
ALTER TABLE notifications FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON notifications TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON notifications TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true) AND CASE
        WHEN coalesce(current_setting('herald.project', true), '') = '' THEN true
        ELSE project_id = current_setting('herald.project', true) END)
    WITH CHECK (tenant_id = current_setting('herald.tenant', true) AND CASE
        WHEN coalesce(current_setting('herald.project', true), '') = '' THEN true
        ELSE project_id = current_setting('herald.project', true) END);
CREATE POLICY admin_read ON notifications FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON notifications TO herald_api, herald_worker;
GRANT SELECT ON notifications TO herald_admin;

-- +goose Down
ALTER TABLE notifications RENAME TO notifications_0019;
ALTER INDEX notifications_pkey RENAME TO notifications_0019_pkey;
ALTER INDEX notifications_tenant_id_event_id_user_id_created_at_key RENAME TO notifications_0019_tenant_id_event_id_user_id_created_at_key;
ALTER INDEX notifications_inbox RENAME TO notifications_0019_inbox;
ALTER INDEX notifications_recent RENAME TO notifications_0019_recent;
ALTER INDEX notifications_tenant_recent RENAME TO notifications_0019_tenant_recent;
ALTER INDEX notifications_shared RENAME TO notifications_0019_shared;
CREATE TABLE notifications (
    notification_id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    event_id        text NOT NULL,
    user_id         text NOT NULL,
    event_type      text NOT NULL,
    title           text NOT NULL DEFAULT '',
    body            text NOT NULL DEFAULT '',
    data            jsonb NOT NULL DEFAULT '{}',
    severity        text NOT NULL DEFAULT 'info',
    share_key       text,
    read_at         timestamptz,
    archived_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    project_id      text NOT NULL DEFAULT 'default',
    PRIMARY KEY (notification_id),
    UNIQUE (tenant_id, event_id, user_id)
);
CREATE INDEX notifications_inbox ON notifications (tenant_id, user_id, created_at DESC, notification_id DESC);
CREATE INDEX notifications_recent ON notifications (created_at DESC, notification_id DESC);
CREATE INDEX notifications_tenant_recent ON notifications (tenant_id, created_at DESC, notification_id DESC);
CREATE INDEX notifications_shared ON notifications (tenant_id, share_key) WHERE share_key IS NOT NULL;
ALTER TABLE notifications
    ALTER COLUMN title SET STATISTICS 0,
    ALTER COLUMN body SET STATISTICS 0,
    ALTER COLUMN data SET STATISTICS 0;
ALTER TABLE notifications SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
INSERT INTO notifications (notification_id, tenant_id, event_id, user_id, event_type, title, body, data, severity, share_key, read_at, archived_at, created_at, project_id)
SELECT notification_id, tenant_id, event_id, user_id, event_type, title, body, data, severity, share_key, read_at, archived_at, created_at, project_id FROM notifications_0019 ON CONFLICT DO NOTHING;
DROP TABLE notifications_0019;
ALTER TABLE notifications ENABLE ROW LEVEL SECURITY;
ALTER TABLE notifications FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON notifications TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON notifications TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true) AND CASE
        WHEN coalesce(current_setting('herald.project', true), '') = '' THEN true
        ELSE project_id = current_setting('herald.project', true) END)
    WITH CHECK (tenant_id = current_setting('herald.tenant', true) AND CASE
        WHEN coalesce(current_setting('herald.project', true), '') = '' THEN true
        ELSE project_id = current_setting('herald.project', true) END);
CREATE POLICY admin_read ON notifications FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON notifications TO herald_api, herald_worker;
GRANT SELECT ON notifications TO herald_admin;
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_drop_partitions(p_table text, p_before timestamptz)
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
