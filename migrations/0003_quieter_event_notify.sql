-- Every NOTIFY takes PostgreSQL's notify-queue lock at commit and holds it
-- through the commit's WAL flush, so when every producer transaction
-- notified, producer commits ran one at a time (about 700 a second here)
-- however many producers there were. The relay keeps claiming while it
-- finds events, so a notification only matters when it is idle: notify
-- only when no older event is waiting. Any event a relay misses in the
-- moment it goes idle is found by its fallback poll.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
CREATE OR REPLACE FUNCTION herald_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
