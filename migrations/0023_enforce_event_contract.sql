-- The event contract, enforced by the database for every writer of the
-- outbox (issue 24): a producer role writes event_outbox directly, so the
-- checks of sdk/producer and POST /v1/events (Event.Validate) are only
-- courtesy until the database makes them.
--
-- herald_check_event raises SQLSTATE 23514 (check_violation) with a
-- message that starts with the field, "event_outbox.<column>: ...", and
-- sets the error's TABLE, COLUMN and CONSTRAINT (event_outbox_contract)
-- fields, so that a client can name the field without parsing the text.
-- The limits are those of sdk/producer: event_id 1-200 bytes of printable
-- ASCII without spaces (0x21-0x7E); event_type (required), aggregate_type
-- and aggregate_id at most 200 bytes without control characters
-- (U+0000-U+001F, U+007F-U+009F); payload a JSON object of at most 262144
-- bytes as stored (jsonb's text: keys sorted, ", " and ": " between items,
-- numbers written out — what the relay loads), nested at most 32 deep (the
-- payload object is depth 1); traceparent and tracestate at most 512
-- bytes. It returns the payload's size as stored. The insert trigger calls
-- it; a later SQL enqueue function can call it too.
--
-- Bookkeeping (status, attempts, last_error, processed_at, created_at) is
-- Herald's: an insert by a role without herald_worker's privileges (a
-- producer, the API) must leave them to their defaults (PENDING, 0, '',
-- NULL, now()), or it is refused naming the column. id is not granted to
-- producer roles at all (an id picked ahead of the sequence would make
-- later inserts of every tenant fail).
--
-- Rows written before this migration are not checked (no table scan, no
-- failure on old data): the relay fails an oversize payload at claim time
-- without loading it (store.ClaimEvents), whoever wrote it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION herald_check_event(p_event_id text, p_event_type text, p_aggregate_type text, p_aggregate_id text,
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
    -- One test for the common case (every field fine), the field-by-field
    -- walk only to name the one at fault.
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
    -- A value at level k below the payload object is at depth k+1: an
    -- object or array at level 32 or deeper is nested deeper than 32. The
    -- path stops at the first one.
    IF jsonb_path_exists(p_payload, 'strict $.**{32 to last} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'event_outbox.payload: nested deeper than 32 levels' USING ERRCODE = '23514',
            TABLE = 'event_outbox', COLUMN = 'payload', CONSTRAINT = 'event_outbox_contract';
    END IF;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION herald_event_contract() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    col text;
BEGIN
    -- No SET search_path here (it costs a setting's save and restore per
    -- row): herald_check_event sets its own, and the rest is pg_catalog's.
    PERFORM public.herald_check_event(NEW.event_id, NEW.event_type, NEW.aggregate_type, NEW.aggregate_id, NEW.payload,
        NEW.traceparent, NEW.tracestate);
    -- Only an insert that sets a bookkeeping column pays for the role
    -- lookup.
    col := CASE
        WHEN NEW.status IS DISTINCT FROM 'PENDING' THEN 'status'
        WHEN NEW.attempts IS DISTINCT FROM 0 THEN 'attempts'
        WHEN NEW.last_error IS DISTINCT FROM '' THEN 'last_error'
        WHEN NEW.processed_at IS NOT NULL THEN 'processed_at'
        WHEN NEW.created_at IS DISTINCT FROM pg_catalog.now() THEN 'created_at'
    END;
    IF col IS NOT NULL AND NOT pg_catalog.pg_has_role(current_user, 'herald_worker', 'USAGE') THEN
        RAISE EXCEPTION 'event_outbox.%: set by Herald; a producer leaves it to its default (status PENDING)', col
            USING ERRCODE = '23514', TABLE = 'event_outbox', COLUMN = col, CONSTRAINT = 'event_outbox_contract',
                HINT = 'insert only tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload, payload_sha256, available_at, traceparent, tracestate';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER event_outbox_contract BEFORE INSERT ON event_outbox
    FOR EACH ROW EXECUTE FUNCTION herald_event_contract();

REVOKE INSERT ON event_outbox FROM herald_producer;
GRANT INSERT (tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload, payload_sha256, available_at,
    traceparent, tracestate, status, attempts, last_error, processed_at, created_at) ON event_outbox TO herald_producer;

-- +goose Down
REVOKE INSERT (tenant_id, project_id, event_id, event_type, aggregate_type, aggregate_id, payload, payload_sha256, available_at,
    traceparent, tracestate, status, attempts, last_error, processed_at, created_at) ON event_outbox FROM herald_producer;
GRANT INSERT ON event_outbox TO herald_producer;
DROP TRIGGER event_outbox_contract ON event_outbox;
DROP FUNCTION herald_event_contract();
DROP FUNCTION herald_check_event(text, text, text, text, jsonb, text, text);
