-- Cancel (issue 28): DELETE /v1/events/{id}, `herald events cancel` and
-- producers in any language (through SQL) call off an event that has not
-- gone out yet, and every delivery of it still waiting.
--
-- event_outbox gets the status CANCELLED: a PENDING event (due now or
-- scheduled with a later available_at) that was cancelled before the relay
-- claimed it. The relay claims PENDING only, so it never fans out; the
-- retention sweep deletes it like a PROCESSED or FAILED one.
--
-- herald_cancel(tenant_id, event_id) does the cancel, one implementation
-- for every caller. It locks the event's row first (a concurrent cancel of
-- the same event waits and then gives the same answer; the relay claims
-- with SKIP LOCKED and passes it by; a relay that holds it is waited for,
-- and its fan-out is then seen), moves a PENDING event to CANCELLED, then
-- cancels each delivery that is still waiting to be sent: DEFERRED (quiet
-- hours), WAITING (whatever its hold: an escalation, a digest item),
-- PENDING, PUBLISHED and RETRY. A delivery is cancelled only while the
-- cancel holds the advisory lock of its next attempt (store.AttemptLockKey,
-- seeded with store.AttemptLockSeed): a listener takes the same lock before
-- it sends and keeps it until the outcome is recorded, and sends only what
-- the database still calls due once it holds it. A lock some listener holds
-- is not waited for: that delivery is being sent now and is reported in
-- flight, never cancelled. The status update is guarded by the attempt
-- count read under the lock, so a send that finished in between is seen.
-- SENDING (left by daemons older than the listener's lock) is in flight
-- too. Cancelled deliveries get CANCELLED with last_error 'cancelled by
-- DELETE /v1/events/{id}' and no delivery_attempts row: no attempt was
-- made, and the audit log records attempts.
--
-- It returns outcome 'cancelled' (the event or at least one delivery is
-- cancelled, by this call or an earlier one: a repeat gives the same
-- answer) or 'too_late' (nothing was or could be cancelled: every
-- delivery already ended or is in flight), the event's status, and the
-- deliveries counted by status (jsonb: {"CANCELLED": 2, "SENT": 1, ...}),
-- in_flight being those a sender holds, and cancelled_now the deliveries
-- this call cancelled by channel ({"EMAIL": 1}; a repeat cancels none). Unknown events, and events of a
-- project other than the API key's, raise SQLSTATE P0002 naming event_id.
-- Who may cancel is who may enqueue (herald_enqueue, migration 0045).

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE event_outbox DROP CONSTRAINT event_outbox_status_check;
    ALTER TABLE event_outbox ADD CONSTRAINT event_outbox_status_check CHECK (status IN ('PENDING', 'PROCESSED', 'FAILED', 'CANCELLED'));
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_sweep(p_kind text, p_tenant text, p_before timestamptz, p_limit int, p_after timestamptz)
RETURNS TABLE (deleted int, last_key timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
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
                   WHERE tenant_id = p_tenant AND created_at >= since AND created_at < p_before
                     AND status IN ('PROCESSED', 'FAILED', 'CANCELLED')
                   ORDER BY created_at LIMIT p_limit FOR UPDATE SKIP LOCKED),
             d AS (DELETE FROM event_outbox e USING c
                   WHERE e.id = c.id AND e.status IN ('PROCESSED', 'FAILED', 'CANCELLED') AND e.created_at < p_before RETURNING e.created_at)
        SELECT count(*)::int, max(created_at) FROM d;
        RETURN;
    ELSIF p_kind NOT IN ('notifications', 'archived_notifications', 'delivery_attempts') THEN
        RAISE EXCEPTION 'herald_sweep: unknown kind % (want events, notifications, archived_notifications or delivery_attempts)', p_kind;
    END IF;
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
    IF p_kind = 'notifications' THEN
        SELECT array_agg(notification_id), array_agg(created_at), max(created_at) INTO ids, keys, last
        FROM (SELECT notification_id, created_at FROM notifications
              WHERE tenant_id = p_tenant AND created_at >= since AND created_at < p_before
              ORDER BY created_at LIMIT p_limit FOR UPDATE SKIP LOCKED) c;
    ELSE
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_sweep_due(p_kind text, p_tenant text, p_before timestamptz, p_cap int)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    n bigint;
BEGIN
    CASE p_kind
    WHEN 'events' THEN
        SELECT count(*) INTO n FROM (SELECT 1 FROM event_outbox WHERE tenant_id = p_tenant AND created_at < p_before
            AND status IN ('PROCESSED', 'FAILED', 'CANCELLED') LIMIT p_cap) x;
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

-- +goose StatementBegin
CREATE FUNCTION herald_cancel(tenant_id text, event_id text,
        OUT outcome text, OUT event_status text, OUT deliveries jsonb, OUT in_flight int, OUT cancelled_now jsonb)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := coalesce(herald_cancel.tenant_id, '');
    v_event text := coalesce(herald_cancel.event_id, '');
    v_herald boolean := pg_has_role(session_user, 'herald_worker', 'USAGE');
    v_api boolean := pg_has_role(session_user, 'herald_api', 'USAGE');
    v_reason constant text := 'cancelled by DELETE /v1/events/{id}';
    -- store.AttemptLockSeed ("herld").
    v_seed constant bigint := 448378596452;
    ev record;
    d record;
    busy uuid[] := '{}';
    moved boolean;
    round int := 0;
    v_channel text;
BEGIN
    cancelled_now := '{}';
    IF v_tenant = '' THEN
        PERFORM public.herald_refuse('tenant_id', 'is required');
    END IF;
    IF v_tenant !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$' THEN
        PERFORM public.herald_refuse('tenant_id', 'must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit');
    END IF;
    IF v_event = '' THEN
        PERFORM public.herald_refuse('event_id', 'is required');
    END IF;
    IF octet_length(v_event) > 200 THEN
        PERFORM public.herald_refuse('event_id', 'is longer than 200 bytes');
    END IF;
    IF NOT (v_herald
            OR EXISTS (SELECT 1 FROM public.herald_producer_roles r WHERE r.role_name = session_user AND r.tenant_id = v_tenant)
            OR (v_api AND v_tenant = current_setting('herald.tenant', true))) THEN
        RAISE EXCEPTION 'tenant_id: the login % may not cancel events of tenant "%"', session_user, v_tenant
            USING ERRCODE = '42501', COLUMN = 'tenant_id',
                HINT = format('an operator grants it with: herald db producer %s --tenant %s (and --tenant for each other tenant it keeps)',
                    session_user, v_tenant);
    END IF;
    -- The event's row, locked: a second cancel of it waits for this one,
    -- a relay that claimed it is waited for (and its fan-out then seen).
    SELECT e.id, e.status, e.project_id INTO ev FROM public.event_outbox e
        WHERE e.tenant_id = v_tenant AND e.event_id = v_event FOR UPDATE;
    -- A project-scoped API key sees its project's events only, as GET
    -- /v1/events/{id} does.
    IF NOT FOUND OR (v_api AND NOT v_herald AND coalesce(current_setting('herald.project', true), '') NOT IN ('', ev.project_id)) THEN
        RAISE EXCEPTION 'event_id: tenant "%" has no event "%"', v_tenant, left(v_event, 200)
            USING ERRCODE = 'P0002', COLUMN = 'event_id';
    END IF;
    IF ev.status = 'PENDING' THEN
        UPDATE public.event_outbox e SET status = 'CANCELLED', last_error = v_reason, processed_at = now() WHERE e.id = ev.id;
        ev.status := 'CANCELLED';
    END IF;
    -- Each round takes the next-attempt lock of every delivery still
    -- waiting and cancels those whose attempt count did not move meanwhile;
    -- one that moved (a send finished between the read and the lock) is
    -- read again in the next round.
    LOOP
        round := round + 1;
        moved := false;
        FOR d IN SELECT x.delivery_id, x.created_at, x.attempts FROM public.deliveries x
                WHERE x.tenant_id = v_tenant AND x.event_id = v_event
                  AND x.status IN ('DEFERRED', 'WAITING', 'PENDING', 'PUBLISHED', 'RETRY') AND x.delivery_id <> ALL (busy)
                ORDER BY x.delivery_id LOOP
            IF NOT pg_try_advisory_xact_lock(hashtextextended(d.delivery_id::text || '/' || (d.attempts + 1), v_seed)) THEN
                busy := busy || d.delivery_id;
                CONTINUE;
            END IF;
            UPDATE public.deliveries x SET status = 'CANCELLED', last_error = v_reason, lease_until = NULL, updated_at = now()
                WHERE x.delivery_id = d.delivery_id AND x.created_at = d.created_at AND x.attempts = d.attempts
                  AND x.status IN ('DEFERRED', 'WAITING', 'PENDING', 'PUBLISHED', 'RETRY')
                RETURNING x.channel INTO v_channel;
            IF FOUND THEN
                cancelled_now := jsonb_set(cancelled_now, ARRAY[v_channel], to_jsonb(coalesce((cancelled_now->>v_channel)::int, 0) + 1));
            ELSE
                moved := true;
            END IF;
        END LOOP;
        EXIT WHEN NOT moved OR round >= 5;
    END LOOP;
    -- In flight: held by a sender when this call looked and not final
    -- since (a listener drops its lock a moment after it recorded the
    -- outcome), or SENDING.
    SELECT coalesce(jsonb_object_agg(s.status, s.n), '{}'), coalesce(sum(s.busy), 0)::int
        INTO deliveries, in_flight
        FROM (SELECT x.status, count(*) AS n,
                count(*) FILTER (WHERE x.status = 'SENDING' OR (x.delivery_id = ANY (busy)
                    AND x.status IN ('DEFERRED', 'WAITING', 'PENDING', 'PUBLISHED', 'RETRY'))) AS busy
              FROM public.deliveries x
              WHERE x.tenant_id = v_tenant AND x.event_id = v_event GROUP BY 1) s;
    event_status := ev.status;
    -- A delivery a read or an action cancelled (an escalation) counts
    -- under CANCELLED too, but only this cancel's own make it 'cancelled'.
    outcome := CASE WHEN ev.status = 'CANCELLED' OR EXISTS (SELECT 1 FROM public.deliveries x
            WHERE x.tenant_id = v_tenant AND x.event_id = v_event AND x.status = 'CANCELLED' AND x.last_error = v_reason)
        THEN 'cancelled' ELSE 'too_late' END;
END;
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION herald_cancel(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_cancel(text, text) TO herald_producer, herald_api, herald_worker;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM event_outbox WHERE status = 'CANCELLED') THEN
        RAISE EXCEPTION 'event_outbox holds CANCELLED events: 0060 cannot be undone';
    END IF;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION herald_cancel(text, text);
ALTER TABLE event_outbox DROP CONSTRAINT event_outbox_status_check;
ALTER TABLE event_outbox ADD CONSTRAINT event_outbox_status_check CHECK (status IN ('PENDING', 'PROCESSED', 'FAILED'));
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_sweep_due(p_kind text, p_tenant text, p_before timestamptz, p_cap int)
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
