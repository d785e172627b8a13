-- The SQL contract for producers in any language (issue 26): a service
-- calls herald_enqueue inside its own transaction instead of writing
-- event_outbox, and a producer role may be granted several tenants.
--
-- herald_enqueue(tenant_id, event_id, event_type, payload, aggregate_type,
-- aggregate_id, project_id, available_at, traceparent, tracestate) checks
-- the event (tenant_id and project_id here; the event's own fields through
-- the insert trigger's herald_check_event, whose messages this migration
-- aligns word for word with sdk/producer's Event.Validate and POST
-- /v1/events), that the login may enqueue for the tenant, that the tenant
-- has the project, hashes the payload as sdk/producer did (SHA-256 of
-- jsonb's text) and inserts the row. It returns outcome 'new', 'repeat'
-- (the tenant has this event_id with the same type, project and payload,
-- or a payload written before payload_sha256 existed) or 'conflict' (the
-- event_id is taken by another event), and the row's id. A repeat or a
-- conflict is an answer, not an error: the caller's transaction goes on.
--
-- SQLSTATEs: 23514 a field of the event (the message starts with it, and
-- the error's COLUMN names it; CONSTRAINT event_outbox_contract); 42501 the
-- login may not enqueue for the tenant; 23503 the tenant has no such
-- project (checked for every login but Herald's own, which wrote the table
-- directly before and are trusted with it). Who may enqueue for a tenant is decided on session_user, the
-- login (a SECURITY DEFINER function sees no other): a login granted the
-- tenant in herald_producer_roles, a member of herald_worker (Herald's own
-- pipeline and the tables' owner, which may write every tenant anyway), or
-- a member of herald_api for the tenant (and project) its transaction set
-- in herald.tenant (herald.project).
--
-- herald_producer keeps EXECUTE on herald_enqueue and reads (SELECT on
-- event_outbox and projects, its tenants' rows only): no INSERT, no
-- sequence, nothing else that writes.

-- +goose Up
-- One row per (role, tenant) granted.
ALTER TABLE herald_producer_roles DROP CONSTRAINT herald_producer_roles_pkey;
ALTER TABLE herald_producer_roles ADD PRIMARY KEY (role_name, tenant_id);

-- herald_producer_may reports whether the role p_role was granted tenant
-- p_tenant. The read policies call it with current_user.
-- +goose StatementBegin
CREATE FUNCTION herald_producer_may(p_role text, p_tenant text) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM public.herald_producer_roles r WHERE r.role_name = p_role AND r.tenant_id = p_tenant)
$$;
-- +goose StatementEnd

DROP POLICY producer_own_tenant ON event_outbox;
DROP POLICY producer_own_tenant ON projects;
CREATE POLICY producer_own_tenant ON event_outbox FOR SELECT TO herald_producer
    USING (herald_producer_may(current_user::text, tenant_id));
CREATE POLICY producer_own_tenant ON projects FOR SELECT TO herald_producer
    USING (herald_producer_may(current_user::text, tenant_id));
DROP FUNCTION herald_producer_tenant(text);

-- herald_refuse raises the event contract's error: SQLSTATE 23514, the
-- message "<field>: <msg>", the field in the error's COLUMN. Every role
-- that inserts events runs it (through the insert trigger); it only
-- raises.
-- +goose StatementBegin
CREATE FUNCTION herald_refuse(p_field text, p_msg text) RETURNS void
    LANGUAGE plpgsql PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '%: %', p_field, p_msg USING ERRCODE = '23514', TABLE = 'event_outbox', COLUMN = p_field,
        CONSTRAINT = 'event_outbox_contract';
END;
$$;
-- +goose StatementEnd

-- herald_check_event (migration 0023) with the words of sdk/producer's
-- Event.Validate, and two checks Validate made that the database did not:
-- a number beyond a 64-bit float's range (jsonb keeps it, Go cannot read
-- it), and the W3C traceparent's form. The limits are unchanged.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_check_event(p_event_id text, p_event_type text, p_aggregate_type text, p_aggregate_id text,
        p_payload jsonb, p_traceparent text, p_tracestate text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, public
    AS $$
DECLARE
    n integer;
    ok text;
    bad text;
    field text;
    val text;
BEGIN
    IF p_event_id IS NULL OR p_event_id = '' THEN
        PERFORM herald_refuse('event_id', 'is required');
    END IF;
    IF octet_length(p_event_id) > 200 THEN
        PERFORM herald_refuse('event_id', 'is longer than 200 bytes');
    END IF;
    IF p_event_id ~ '[^!-~]' THEN
        ok := substring(p_event_id FROM '^[!-~]*');
        bad := substr(p_event_id, length(ok) + 1, 1);
        PERFORM herald_refuse('event_id', format('byte %s is 0x%s; an event_id is printable ASCII without spaces (0x21-0x7E)',
            octet_length(ok), lpad(to_hex(get_byte(convert_to(bad, 'UTF8'), 0)), 2, '0')));
    END IF;
    IF p_event_type IS NULL OR p_event_type = '' THEN
        PERFORM herald_refuse('event_type', 'is required');
    END IF;
    -- One test for the common case (every field fine), the field-by-field
    -- walk only to name the one at fault.
    IF NOT coalesce(octet_length(p_event_type) <= 200 AND octet_length(p_aggregate_type) <= 200 AND octet_length(p_aggregate_id) <= 200
            AND concat(p_event_type, p_aggregate_type, p_aggregate_id) !~ '[\x01-\x1f\x7f-\x9f]', false) THEN
        FOR field, val IN VALUES ('event_type', p_event_type), ('aggregate_type', p_aggregate_type), ('aggregate_id', p_aggregate_id) LOOP
            IF octet_length(val) > 200 THEN
                PERFORM herald_refuse(field, 'is longer than 200 bytes');
            END IF;
            IF val ~ '[\x01-\x1f\x7f-\x9f]' THEN
                ok := substring(val FROM '^[^\x01-\x1f\x7f-\x9f]*');
                bad := substr(val, length(ok) + 1, 1);
                PERFORM herald_refuse(field, format('holds the control character U+%s at byte %s',
                    lpad(upper(to_hex(ascii(bad))), 4, '0'), octet_length(ok)));
            END IF;
        END LOOP;
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        PERFORM herald_refuse('payload', 'must be a JSON object, not ' || coalesce(jsonb_typeof(p_payload), 'null'));
    END IF;
    n := octet_length(p_payload::text);
    IF n > 262144 THEN
        PERFORM herald_refuse('payload', format('is %s bytes, more than 262144', n));
    END IF;
    -- A value at level k below the payload object is at depth k+1: an
    -- object or array at level 32 or deeper is nested deeper than 32. The
    -- path stops at the first one.
    IF jsonb_path_exists(p_payload, 'strict $.**{32 to last} ? (@.type() == "object" || @.type() == "array")') THEN
        PERFORM herald_refuse('payload', 'is nested deeper than 32 levels');
    END IF;
    -- A number a float64 cannot hold (from 2^1024 - 2^970 on, which Go
    -- rounds up to infinity) is written out in at least 309 digits as
    -- stored, so a shorter payload holds none.
    IF n > 309 AND jsonb_path_exists(p_payload, 'strict $.** ? (@.type() == "number" && (@ >= $max || @ <= -$max))',
            '{"max": 179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792}') THEN
        PERFORM herald_refuse('payload', 'holds a number beyond the range of a 64-bit float');
    END IF;
    IF coalesce(p_traceparent, '') = '' THEN
        IF coalesce(p_tracestate, '') <> '' THEN
            PERFORM herald_refuse('tracestate', 'is set without a traceparent');
        END IF;
        RETURN n;
    END IF;
    -- Version 00 has exactly four fields; a later version (not ff) may add
    -- fields after a dash. The trace and parent ids are not all zeros.
    IF NOT (octet_length(p_traceparent) <= 512 AND p_traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}'
            AND (octet_length(p_traceparent) = 55 OR (left(p_traceparent, 2) <> '00' AND substr(p_traceparent, 56, 1) = '-'))
            AND left(p_traceparent, 2) <> 'ff' AND substr(p_traceparent, 4, 32) <> repeat('0', 32)
            AND substr(p_traceparent, 37, 16) <> repeat('0', 16)) THEN
        PERFORM herald_refuse('traceparent', 'is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, ids not all zeros)');
    END IF;
    IF octet_length(p_tracestate) > 512 THEN
        PERFORM herald_refuse('tracestate', 'is longer than 512 bytes');
    END IF;
    IF p_tracestate ~ '[^\x20-\x7e]' THEN
        PERFORM herald_refuse('tracestate', 'is not a W3C tracestate: it holds a character outside printable ASCII');
    END IF;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION herald_enqueue(tenant_id text, event_id text, event_type text, payload jsonb DEFAULT '{}',
        aggregate_type text DEFAULT '', aggregate_id text DEFAULT '', project_id text DEFAULT 'default',
        available_at timestamptz DEFAULT NULL, traceparent text DEFAULT NULL, tracestate text DEFAULT NULL,
        OUT outcome text, OUT id bigint)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    -- pg_temp last: a caller's temporary table cannot stand in for one of
    -- Herald's (every table is named with its schema besides).
    SET search_path = pg_catalog, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := coalesce(herald_enqueue.tenant_id, '');
    v_project text := coalesce(nullif(herald_enqueue.project_id, ''), 'default');
    v_payload jsonb := coalesce(herald_enqueue.payload, '{}');
    v_herald boolean := pg_has_role(session_user, 'herald_worker', 'USAGE');
    v_hash bytea;
    v_id bigint;
    old record;
BEGIN
    IF v_tenant = '' THEN
        PERFORM public.herald_refuse('tenant_id', 'is required');
    END IF;
    IF v_tenant !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$' THEN
        PERFORM public.herald_refuse('tenant_id', 'must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit');
    END IF;
    IF v_project !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$' THEN
        PERFORM public.herald_refuse('project_id', 'must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit');
    END IF;
    IF NOT (v_herald
            OR EXISTS (SELECT 1 FROM public.herald_producer_roles r WHERE r.role_name = session_user AND r.tenant_id = v_tenant)
            OR (pg_has_role(session_user, 'herald_api', 'USAGE') AND v_tenant = current_setting('herald.tenant', true)
                AND coalesce(current_setting('herald.project', true), '') IN ('', v_project))) THEN
        RAISE EXCEPTION 'tenant_id: the login % may not enqueue events for tenant "%"', session_user, v_tenant
            USING ERRCODE = '42501', COLUMN = 'tenant_id',
                HINT = format('an operator grants it with: herald db producer %s --tenant %s (and --tenant for each other tenant it keeps)',
                    session_user, v_tenant);
    END IF;
    -- Herald's own roles are trusted with the project, as they were when
    -- they wrote the table directly (the API checks it before).
    IF NOT v_herald AND NOT EXISTS (SELECT 1 FROM public.projects p WHERE p.tenant_id = v_tenant AND p.project_id = v_project) THEN
        RAISE EXCEPTION 'project_id: this tenant has no project "%"', v_project
            USING ERRCODE = '23503', COLUMN = 'project_id',
                HINT = format('create it with: herald projects create --tenant %s %s', v_tenant, v_project);
    END IF;
    -- The payload's hash as sdk/producer and POST /v1/events wrote it
    -- (migration 0012): SHA-256 of jsonb's text.
    v_hash := sha256(convert_to(v_payload::text, 'UTF8'));
    LOOP
        -- The insert trigger (event_outbox_contract) checks the event's
        -- fields, before the unique key decides new or not.
        INSERT INTO public.event_outbox AS e (tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload,
                payload_sha256, available_at, traceparent, tracestate)
            VALUES (v_tenant, v_project, herald_enqueue.event_id, herald_enqueue.event_type, coalesce(herald_enqueue.aggregate_type, ''),
                coalesce(herald_enqueue.aggregate_id, ''), v_payload, v_hash, coalesce(herald_enqueue.available_at, now()),
                nullif(herald_enqueue.traceparent, ''), nullif(herald_enqueue.tracestate, ''))
            ON CONFLICT (tenant_id, event_id) DO NOTHING
            RETURNING e.id INTO v_id;
        IF v_id IS NOT NULL THEN
            outcome := 'new';
            id := v_id;
            RETURN;
        END IF;
        -- Taken (by a committed transaction: the insert waited for any
        -- other one holding the key). A row written before migration 0012
        -- has no hash and compares by type and project.
        SELECT e.id, e.event_type, e.project_id, e.payload_sha256 INTO old
            FROM public.event_outbox e WHERE e.tenant_id = v_tenant AND e.event_id = herald_enqueue.event_id;
        IF FOUND THEN
            id := old.id;
            outcome := CASE WHEN old.event_type = herald_enqueue.event_type AND old.project_id = v_project
                AND (old.payload_sha256 IS NULL OR old.payload_sha256 = v_hash) THEN 'repeat' ELSE 'conflict' END;
            RETURN;
        END IF;
        -- The row went meanwhile (the retention sweep): insert again.
    END LOOP;
END;
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION herald_enqueue(text, text, text, jsonb, text, text, text, timestamptz, text, text),
    herald_producer_may(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_enqueue(text, text, text, jsonb, text, text, text, timestamptz, text, text)
    TO herald_producer, herald_api, herald_worker;
GRANT EXECUTE ON FUNCTION herald_producer_may(text, text) TO herald_producer;

-- A producer writes through herald_enqueue only.
REVOKE INSERT (tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload, payload_sha256, available_at,
    traceparent, tracestate, status, attempts, last_error, processed_at, created_at) ON event_outbox FROM herald_producer;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON event_outbox FROM herald_producer;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM herald_producer;

-- +goose Down
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO herald_producer;
GRANT INSERT (tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload, payload_sha256, available_at,
    traceparent, tracestate, status, attempts, last_error, processed_at, created_at) ON event_outbox TO herald_producer;
DROP FUNCTION herald_enqueue(text, text, text, jsonb, text, text, text, timestamptz, text, text);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_check_event(p_event_id text, p_event_type text, p_aggregate_type text, p_aggregate_id text,
        p_payload jsonb, p_traceparent text, p_tracestate text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, public
    AS $$
DECLARE
    n integer;
    bad text;
    field text;
    val text;
    lim integer;
BEGIN
    IF p_event_id IS NULL OR p_event_id = '' THEN
        RAISE EXCEPTION 'event_outbox.event_id: is required' USING ERRCODE = '23514',
            TABLE = 'event_outbox', COLUMN = 'event_id', CONSTRAINT = 'event_outbox_contract';
    END IF;
    IF octet_length(p_event_id) > 200 THEN
        RAISE EXCEPTION 'event_outbox.event_id: longer than 200 bytes' USING ERRCODE = '23514',
            TABLE = 'event_outbox', COLUMN = 'event_id', CONSTRAINT = 'event_outbox_contract';
    END IF;
    IF p_event_id ~ '[^!-~]' THEN
        bad := substring(p_event_id FROM '[^!-~]');
        RAISE EXCEPTION 'event_outbox.event_id: holds U+%; an event_id is 1-200 bytes of printable ASCII without spaces (0x21-0x7E)',
                lpad(upper(to_hex(ascii(bad))), 4, '0') USING ERRCODE = '23514',
            TABLE = 'event_outbox', COLUMN = 'event_id', CONSTRAINT = 'event_outbox_contract';
    END IF;
    IF p_event_type IS NULL OR p_event_type = '' THEN
        RAISE EXCEPTION 'event_outbox.event_type: is required' USING ERRCODE = '23514',
            TABLE = 'event_outbox', COLUMN = 'event_type', CONSTRAINT = 'event_outbox_contract';
    END IF;
    IF NOT coalesce(octet_length(p_event_type) <= 200 AND octet_length(p_aggregate_type) <= 200 AND octet_length(p_aggregate_id) <= 200
            AND octet_length(coalesce(p_traceparent, '')) <= 512 AND octet_length(coalesce(p_tracestate, '')) <= 512
            AND concat(p_event_type, p_aggregate_type, p_aggregate_id, p_traceparent, p_tracestate) !~ '[\x01-\x1f\x7f-\x9f]', false) THEN
        FOR field, val, lim IN VALUES ('event_type', p_event_type, 200), ('aggregate_type', p_aggregate_type, 200),
                ('aggregate_id', p_aggregate_id, 200), ('traceparent', p_traceparent, 512), ('tracestate', p_tracestate, 512) LOOP
            IF octet_length(val) > lim THEN
                RAISE EXCEPTION 'event_outbox.%: longer than % bytes', field, lim USING ERRCODE = '23514',
                    TABLE = 'event_outbox', COLUMN = field, CONSTRAINT = 'event_outbox_contract';
            END IF;
            bad := substring(val FROM '[\x01-\x1f\x7f-\x9f]');
            IF bad IS NOT NULL THEN
                RAISE EXCEPTION 'event_outbox.%: holds the control character U+%', field, lpad(upper(to_hex(ascii(bad))), 4, '0')
                    USING ERRCODE = '23514', TABLE = 'event_outbox', COLUMN = field, CONSTRAINT = 'event_outbox_contract';
            END IF;
        END LOOP;
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'event_outbox.payload: must be a JSON object, not %', coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = '23514', TABLE = 'event_outbox', COLUMN = 'payload', CONSTRAINT = 'event_outbox_contract';
    END IF;
    n := octet_length(p_payload::text);
    IF n > 262144 THEN
        RAISE EXCEPTION 'event_outbox.payload: larger than 262144 bytes (% bytes as stored)', n
            USING ERRCODE = '23514', TABLE = 'event_outbox', COLUMN = 'payload', CONSTRAINT = 'event_outbox_contract';
    END IF;
    IF jsonb_path_exists(p_payload, 'strict $.**{32 to last} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'event_outbox.payload: nested deeper than 32 levels' USING ERRCODE = '23514',
            TABLE = 'event_outbox', COLUMN = 'payload', CONSTRAINT = 'event_outbox_contract';
    END IF;
    RETURN n;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION herald_refuse(text, text);
-- +goose StatementBegin
CREATE FUNCTION herald_producer_tenant(p_role text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT b.tenant_id FROM public.herald_producer_roles b WHERE b.role_name = p_role
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION herald_producer_tenant(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_producer_tenant(text) TO herald_producer;
DROP POLICY producer_own_tenant ON event_outbox;
DROP POLICY producer_own_tenant ON projects;
CREATE POLICY producer_own_tenant ON event_outbox TO herald_producer
    USING (tenant_id = current_setting('herald.tenant', true) AND tenant_id = herald_producer_tenant(current_user::text))
    WITH CHECK (tenant_id = current_setting('herald.tenant', true) AND tenant_id = herald_producer_tenant(current_user::text)
        AND EXISTS (SELECT 1 FROM projects p WHERE p.tenant_id = event_outbox.tenant_id AND p.project_id = event_outbox.project_id));
CREATE POLICY producer_own_tenant ON projects FOR SELECT TO herald_producer
    USING (tenant_id = current_setting('herald.tenant', true) AND tenant_id = herald_producer_tenant(current_user::text));
DROP FUNCTION herald_producer_may(text, text);
-- A role keeps the tenant it was granted first.
DELETE FROM herald_producer_roles r USING herald_producer_roles o
    WHERE o.role_name = r.role_name AND (o.created_at, o.tenant_id) < (r.created_at, r.tenant_id);
ALTER TABLE herald_producer_roles DROP CONSTRAINT herald_producer_roles_pkey;
ALTER TABLE herald_producer_roles ADD PRIMARY KEY (role_name);
