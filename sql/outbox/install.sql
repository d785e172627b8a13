-- Herald's outbox in a service's own database (issue 26): what `herald
-- outbox install --database-url URL` runs, embedded in the binary, and
-- what a team whose migrations must own the schema runs itself:
--
--     psql -v ON_ERROR_STOP=1 -d "$DATABASE_URL" -f sql/outbox/install.sql
--
-- It creates, in the public schema:
--   herald_enqueue(...)   the same signature, checks and messages as
--                         Herald's own herald_enqueue (migration 0045); a
--                         service calls it inside its own transaction.
--   herald_outbox         the events waiting for Herald. Herald's source
--                         stage (a `source` block of `herald serve`)
--                         forwards them and deletes each row it forwarded;
--                         a row Herald refuses stays, with refused_at and
--                         refusal set.
--   herald_outbox_version the version installed; a later file upgrades it.
--   a NOTIFY on the channel herald_outbox after every insert.
--
-- herald_refuse and herald_check_event are Herald's, word for word (a test,
-- core/internal/source/install_test.go, holds them to migration 0045's text), so that
-- an event refused here is refused by Herald with the same words and vice
-- versa.
--
-- The file is one transaction and may be run again: it installs what is
-- missing and upgrades what an earlier version installed; it refuses to
-- downgrade. EXECUTE on herald_enqueue is revoked from PUBLIC: grant it to
-- the service's login,
--     GRANT EXECUTE ON FUNCTION herald_enqueue(text, text, text, jsonb, text, text, text, timestamptz, text, text) TO app;
-- and grant SELECT, DELETE, UPDATE (refused_at, refusal) on herald_outbox
-- to the login Herald reads it with, if it is not the owner.

BEGIN;
-- Unqualified names below (Herald's check functions) go to public.
SET LOCAL search_path = public, pg_catalog;
-- Two installs at once: one waits for the other.
SELECT pg_advisory_xact_lock(hashtext('herald_outbox install'));

CREATE TABLE IF NOT EXISTS public.herald_outbox_version (
    version integer NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now(),
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton)
);

DO $$
BEGIN
    IF (SELECT version FROM public.herald_outbox_version) > 1 THEN
        RAISE EXCEPTION 'herald_outbox_version: version % is installed, newer than this file (1); run the newer herald outbox install',
            (SELECT version FROM public.herald_outbox_version) USING ERRCODE = '55000';
    END IF;
    IF to_regclass('public.event_outbox') IS NOT NULL AND to_regclass('public.goose_db_version') IS NOT NULL THEN
        RAISE EXCEPTION 'this is a Herald database: its herald_enqueue already writes event_outbox; install the outbox in the service''s own database'
            USING ERRCODE = '55000';
    END IF;
END;
$$;

-- Version 1.
CREATE TABLE IF NOT EXISTS public.herald_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id text NOT NULL,
    project_id text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    aggregate_type text NOT NULL DEFAULT '',
    aggregate_id text NOT NULL DEFAULT '',
    payload jsonb NOT NULL,
    payload_sha256 bytea NOT NULL,
    available_at timestamptz NOT NULL DEFAULT now(),
    traceparent text,
    tracestate text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Set when Herald refuses the row (a tenant the source may not write
    -- for, a project the tenant lacks, an event_id Herald holds for
    -- another event); the row is not forwarded again.
    refused_at timestamptz,
    refusal text,
    UNIQUE (tenant_id, event_id)
);
CREATE INDEX IF NOT EXISTS herald_outbox_pending ON public.herald_outbox (id) WHERE refused_at IS NULL;
REVOKE ALL ON public.herald_outbox, public.herald_outbox_version FROM PUBLIC;

CREATE OR REPLACE FUNCTION public.herald_outbox_notify() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('herald_outbox', '');
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS herald_outbox_notify ON public.herald_outbox;
CREATE TRIGGER herald_outbox_notify AFTER INSERT ON public.herald_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION public.herald_outbox_notify();

-- herald_refuse and herald_check_event: migration 0045's text.
CREATE OR REPLACE FUNCTION herald_refuse(p_field text, p_msg text) RETURNS void
    LANGUAGE plpgsql PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '%: %', p_field, p_msg USING ERRCODE = '23514', TABLE = 'event_outbox', COLUMN = p_field,
        CONSTRAINT = 'event_outbox_contract';
END;
$$;

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

-- herald_enqueue is Herald's (migrations 0045 and 0095, whose tenant and
-- project checks it holds word for word) writing herald_outbox: the
-- same arguments, checks, words and outcomes. Who may write for which
-- tenant, and whether the tenant has the project, Herald decides when it
-- forwards the row (the source's tenants; a refusal is set on the row).
CREATE OR REPLACE FUNCTION public.herald_enqueue(tenant_id text, event_id text, event_type text, payload jsonb DEFAULT '{}',
        aggregate_type text DEFAULT '', aggregate_id text DEFAULT '', project_id text DEFAULT 'default',
        available_at timestamptz DEFAULT NULL, traceparent text DEFAULT NULL, tracestate text DEFAULT NULL,
        OUT outcome text, OUT id bigint)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := coalesce(herald_enqueue.tenant_id, '');
    v_project text := coalesce(nullif(herald_enqueue.project_id, ''), 'default');
    v_payload jsonb := coalesce(herald_enqueue.payload, '{}');
    v_id bigint;
    old record;
BEGIN
    -- One test for the common case, the walk only to name the field at
    -- fault (tenant_id before project_id, as 0045 did).
    IF NOT (length(v_tenant) BETWEEN 1 AND 100 AND v_tenant ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$'
            AND length(v_project) <= 100 AND v_project ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$') THEN
        IF v_tenant = '' THEN
            PERFORM public.herald_refuse('tenant_id', 'is required');
        END IF;
        IF NOT (length(v_tenant) <= 100 AND v_tenant ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]*$') THEN
            PERFORM public.herald_refuse('tenant_id', 'must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit');
        END IF;
        PERFORM public.herald_refuse('project_id', 'must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit');
    END IF;
    PERFORM public.herald_check_event(herald_enqueue.event_id, herald_enqueue.event_type, coalesce(herald_enqueue.aggregate_type, ''),
        coalesce(herald_enqueue.aggregate_id, ''), v_payload, nullif(herald_enqueue.traceparent, ''), nullif(herald_enqueue.tracestate, ''));
    LOOP
        INSERT INTO public.herald_outbox AS e (tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload,
                payload_sha256, available_at, traceparent, tracestate)
            VALUES (v_tenant, v_project, herald_enqueue.event_id, herald_enqueue.event_type, coalesce(herald_enqueue.aggregate_type, ''),
                coalesce(herald_enqueue.aggregate_id, ''), v_payload, sha256(convert_to(v_payload::text, 'UTF8')),
                coalesce(herald_enqueue.available_at, now()), nullif(herald_enqueue.traceparent, ''), nullif(herald_enqueue.tracestate, ''))
            ON CONFLICT (tenant_id, event_id) DO NOTHING
            RETURNING e.id INTO v_id;
        IF v_id IS NOT NULL THEN
            outcome := 'new';
            id := v_id;
            RETURN;
        END IF;
        SELECT e.id, e.event_type, e.project_id, e.payload_sha256 INTO old
            FROM public.herald_outbox e WHERE e.tenant_id = v_tenant AND e.event_id = herald_enqueue.event_id;
        IF FOUND THEN
            id := old.id;
            outcome := CASE WHEN old.event_type = herald_enqueue.event_type AND old.project_id = v_project
                AND old.payload_sha256 = sha256(convert_to(v_payload::text, 'UTF8')) THEN 'repeat' ELSE 'conflict' END;
            RETURN;
        END IF;
        -- The row was forwarded meanwhile: insert again (Herald tells a
        -- repeat from a conflict when it forwards it).
    END LOOP;
END;
$$;
REVOKE ALL ON FUNCTION public.herald_enqueue(text, text, text, jsonb, text, text, text, timestamptz, text, text) FROM PUBLIC;

INSERT INTO public.herald_outbox_version (version) VALUES (1)
    ON CONFLICT (singleton) DO UPDATE SET version = excluded.version, installed_at = now();
COMMIT;
