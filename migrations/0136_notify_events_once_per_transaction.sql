-- The event_outbox insert trigger (migration 0003) looks once per INSERT
-- statement for an older event still waiting, and notifies the relay only
-- when there is none. Its scan walks the pending index from the oldest
-- entry and passes every row the transaction itself wrote (their
-- created_at is now(), so none counts), so a producer that enqueues many
-- events in one transaction, one herald_enqueue call each, rescanned all
-- of its own earlier rows at each call: 300 calls took 452 ms and 3,000
-- took 17 to 30 s here, where 300 rows in one INSERT took 26 ms.
--
-- Now a transaction decides once: its first insert into event_outbox
-- looks and notifies (or not) as before, and marks the transaction in a
-- transaction-local setting; its later inserts find the mark and return.
-- Nothing is lost by it: a notification is sent at commit only, and one
-- per transaction is all the relay needs (it keeps claiming while it finds
-- events; what it misses as it goes idle its fallback poll finds). A
-- savepoint rolled back takes the mark with it, and the next insert looks
-- again. (CREATE OR REPLACE resets what it does not name: the function
-- stays SECURITY DEFINER with its search_path, as migration 0007 made it.)

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_notify_event() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$
BEGIN
    IF pg_catalog.current_setting('herald.event_notify_checked', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_catalog.set_config('herald.event_notify_checked', 'on', true);
    IF NOT EXISTS (SELECT 1 FROM event_outbox
                   WHERE status = 'PENDING' AND available_at <= now() AND created_at < now()) THEN
        PERFORM pg_notify('herald_events', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_notify_event() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM event_outbox
                   WHERE status = 'PENDING' AND available_at <= now() AND created_at < now()) THEN
        PERFORM pg_notify('herald_events', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
