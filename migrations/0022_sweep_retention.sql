-- Retention that whole partitions cannot give (issue 17): the event
-- outbox, archived notifications kept shorter than the rest, and tenants
-- kept shorter than the global periods. These rows go by short bounded
-- batches (store.Sweep*: at most p_limit rows a statement, each statement
-- its own transaction), never by one long DELETE.
--
-- event_outbox stays unpartitioned: producers compile
-- `ON CONFLICT (tenant_id, event_id) DO NOTHING` into their binaries, which
-- needs a unique index on exactly (tenant_id, event_id) — a partitioned
-- table may only have one that includes its partition key — and the
-- event_id dedupe must hold across months.
--
-- Each batch finds its rows, the oldest first, through an index on
-- (tenant, time) (migration 0017 on HOT updates):
--   event_outbox_sweep (tenant_id, created_at): columns the relay never
--     updates (it changes status, attempts, processed_at, last_error), so
--     its updates are what they were. Without it a batch reads the table
--     in key order past every row inside the period to learn that none is
--     left (README, "Sweeps: retention that partitions cannot give").
--   delivery_attempts_sweep (tenant_id, delivery_created_at): the log is
--     never updated.
--   notifications_archived (tenant_id, archived_at) WHERE archived_at IS
--     NOT NULL: archiving (a user's action, once per row) is no longer a
--     HOT update; reading (read_at, unindexed) still can be.
-- A tenant's notifications use notifications_tenant_recent (0019).
--
-- herald_sweep deletes one batch of one tenant's rows past p_before:
-- PROCESSED and FAILED events created before it (never a PENDING one),
-- notifications created before it, notifications archived before it,
-- attempts of deliveries created before it. It starts at p_after (NULL:
-- the oldest row) and returns how many it deleted and the time key of the
-- last, the next batch's p_after: the next batch starts there instead of
-- walking again the index entries of the rows just deleted, which stay
-- until vacuum. Notifications are locked with SKIP LOCKED (a row the inbox
-- is changing waits for the next batch), and their unread ones leave the
-- unread counters in the same call (one statement, one transaction), the
-- counters locked in key order as every other writer of them does.
-- herald_sweep_tenants lists the tenants a sweep visits, herald_sweep_due
-- counts the rows past a period (`herald retention status`).

-- +goose Up
CREATE INDEX event_outbox_sweep ON event_outbox (tenant_id, created_at);
CREATE INDEX delivery_attempts_sweep ON delivery_attempts (tenant_id, delivery_created_at);
CREATE INDEX notifications_archived ON notifications (tenant_id, archived_at) WHERE archived_at IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION herald_sweep(p_kind text, p_tenant text, p_before timestamptz, p_limit int, p_after timestamptz)
RETURNS TABLE (deleted int, last_key timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
-- A batch reads p_limit rows in index order and stops, and deletes each
-- by its primary key: left to itself the planner may read every row past
-- p_before by bitmap and sort them, or hash every row of the table to
-- join the batch's keys, work that grows with the table instead of the
-- batch (README, "Partitioning and retention").
SET enable_sort = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
    gone record;
    since constant timestamptz := coalesce(p_after, '-infinity');
    ids uuid[];
    attempts int[];
    keys timestamptz[];
    last timestamptz;
BEGIN
    IF p_tenant IS NULL OR p_before IS NULL OR p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'herald_sweep: bad arguments (tenant %, before %, limit %)', p_tenant, p_before, p_limit;
    END IF;
    IF p_kind = 'events' THEN
        RETURN QUERY
        WITH c AS (SELECT id FROM event_outbox
                   WHERE tenant_id = p_tenant AND created_at >= since AND created_at < p_before AND status IN ('PROCESSED', 'FAILED')
                   ORDER BY created_at LIMIT p_limit FOR UPDATE SKIP LOCKED),
             d AS (DELETE FROM event_outbox e USING c
                   WHERE e.id = c.id AND e.status IN ('PROCESSED', 'FAILED') AND e.created_at < p_before RETURNING e.created_at)
        SELECT count(*)::int, max(created_at) FROM d;
        RETURN;
    ELSIF p_kind NOT IN ('notifications', 'archived_notifications', 'delivery_attempts') THEN
        RAISE EXCEPTION 'herald_sweep: unknown kind % (want events, notifications, archived_notifications or delivery_attempts)', p_kind;
    END IF;
    -- The partitioned tables, in two steps: the batch's keys, read in
    -- order from the sweep's index (a Merge Append of each month's index
    -- rather than every row past p_before read and sorted), then the
    -- delete of those keys, each probing its month's primary key.
    IF p_kind = 'delivery_attempts' THEN
        SELECT array_agg(delivery_id), array_agg(attempt), array_agg(delivery_created_at), max(delivery_created_at)
            INTO ids, attempts, keys, last
        FROM (SELECT delivery_id, attempt, delivery_created_at FROM delivery_attempts
              WHERE tenant_id = p_tenant AND delivery_created_at >= since AND delivery_created_at < p_before
              ORDER BY delivery_created_at LIMIT p_limit) c;
        IF ids IS NOT NULL THEN
            DELETE FROM delivery_attempts a USING unnest(ids, attempts, keys) AS g(id, attempt, key)
            WHERE a.delivery_id = g.id AND a.attempt = g.attempt AND a.delivery_created_at = g.key;
        END IF;
        deleted := coalesce(cardinality(ids), 0);
        last_key := last;
        RETURN NEXT;
        RETURN;
    END IF;
    -- Notifications: the rows are locked as they are read (a row the
    -- inbox is changing is skipped: the next batch or pass takes it),
    -- deleted, then their unread ones leave their counters.
    IF p_kind = 'notifications' THEN
        SELECT array_agg(notification_id), array_agg(created_at), max(created_at) INTO ids, keys, last
        FROM (SELECT notification_id, created_at FROM notifications
              WHERE tenant_id = p_tenant AND created_at >= since AND created_at < p_before
              ORDER BY created_at LIMIT p_limit FOR UPDATE SKIP LOCKED) c;
    ELSE
        -- archived_at is never before created_at (the event's time), so
        -- created_at < p_before holds too and leaves the months after
        -- p_before (the current one) out of the plan.
        SELECT array_agg(notification_id), array_agg(created_at), max(archived_at) INTO ids, keys, last
        FROM (SELECT notification_id, created_at, archived_at FROM notifications
              WHERE tenant_id = p_tenant AND archived_at IS NOT NULL AND archived_at >= since AND archived_at < p_before
                AND created_at < p_before
              ORDER BY archived_at LIMIT p_limit FOR UPDATE SKIP LOCKED) c;
    END IF;
    IF ids IS NULL THEN
        deleted := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    WITH d AS (DELETE FROM notifications x USING unnest(ids, keys) AS g(id, key)
               WHERE x.notification_id = g.id AND x.created_at = g.key
               RETURNING x.user_id, x.project_id, x.read_at IS NULL AND x.archived_at IS NULL AS unread)
    SELECT count(*)::int AS rows, array_agg(user_id) FILTER (WHERE unread) AS users,
        array_agg(project_id) FILTER (WHERE unread) AS projects INTO gone FROM d;
    IF gone.users IS NOT NULL THEN
        PERFORM 1 FROM notification_counters c
            WHERE c.tenant_id = p_tenant AND (c.user_id, c.project_id) IN (SELECT * FROM unnest(gone.users, gone.projects))
            ORDER BY c.tenant_id, c.user_id, c.project_id FOR UPDATE;
        UPDATE notification_counters c SET unread = greatest(c.unread - x.n, 0)
        FROM (SELECT u, p, count(*) AS n FROM unnest(gone.users, gone.projects) AS g(u, p) GROUP BY 1, 2) x
        WHERE c.tenant_id = p_tenant AND c.user_id = x.u AND c.project_id = x.p;
    END IF;
    deleted := gone.rows;
    last_key := last;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

-- herald_sweep_due counts one tenant's rows herald_sweep would delete
-- before p_before, up to p_cap (`herald retention status`).
-- +goose StatementBegin
CREATE FUNCTION herald_sweep_due(p_kind text, p_tenant text, p_before timestamptz, p_cap int)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    n bigint;
BEGIN
    CASE p_kind
    WHEN 'events' THEN
        SELECT count(*) INTO n FROM (SELECT 1 FROM event_outbox WHERE tenant_id = p_tenant AND created_at < p_before
            AND status IN ('PROCESSED', 'FAILED') LIMIT p_cap) x;
    WHEN 'delivery_attempts' THEN
        SELECT count(*) INTO n FROM (SELECT 1 FROM delivery_attempts WHERE tenant_id = p_tenant
            AND delivery_created_at < p_before LIMIT p_cap) x;
    WHEN 'notifications' THEN
        SELECT count(*) INTO n FROM (SELECT 1 FROM notifications WHERE tenant_id = p_tenant AND created_at < p_before LIMIT p_cap) x;
    WHEN 'archived_notifications' THEN
        SELECT count(*) INTO n FROM (SELECT 1 FROM notifications WHERE tenant_id = p_tenant AND created_at < p_before
            AND archived_at IS NOT NULL AND archived_at < p_before LIMIT p_cap) x;
    ELSE
        RAISE EXCEPTION 'herald_sweep_due: unknown kind %', p_kind;
    END CASE;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- herald_sweep_tenants lists the tenants with rows a sweep of p_kind may
-- delete (events: any event; archived_notifications: an archived
-- notification), skipping from one tenant to the next in the sweep's
-- index rather than reading its rows.
-- +goose StatementBegin
CREATE FUNCTION herald_sweep_tenants(p_kind text)
RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_kind = 'events' THEN
        RETURN QUERY WITH RECURSIVE t(id) AS (
            SELECT min(tenant_id) FROM event_outbox
            UNION ALL
            SELECT (SELECT min(tenant_id) FROM event_outbox WHERE tenant_id > t.id) FROM t WHERE t.id IS NOT NULL)
        SELECT id FROM t WHERE id IS NOT NULL;
    ELSIF p_kind = 'archived_notifications' THEN
        RETURN QUERY WITH RECURSIVE t(id) AS (
            SELECT min(tenant_id) FROM notifications WHERE archived_at IS NOT NULL
            UNION ALL
            SELECT (SELECT min(tenant_id) FROM notifications WHERE archived_at IS NOT NULL AND tenant_id > t.id)
            FROM t WHERE t.id IS NOT NULL)
        SELECT id FROM t WHERE id IS NOT NULL;
    ELSE
        RAISE EXCEPTION 'herald_sweep_tenants: unknown kind %', p_kind;
    END IF;
END;
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION herald_sweep(text, text, timestamptz, int, timestamptz), herald_sweep_due(text, text, timestamptz, int),
    herald_sweep_tenants(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_sweep(text, text, timestamptz, int, timestamptz), herald_sweep_due(text, text, timestamptz, int),
    herald_sweep_tenants(text) TO herald_worker;

-- +goose Down
DROP FUNCTION herald_sweep_tenants(text);
DROP FUNCTION herald_sweep_due(text, text, timestamptz, int);
DROP FUNCTION herald_sweep(text, text, timestamptz, int, timestamptz);
DROP INDEX notifications_archived;
DROP INDEX delivery_attempts_sweep;
DROP INDEX event_outbox_sweep;
