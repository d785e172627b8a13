-- The relay hands the deliveries it just wrote straight to the broker
-- instead of leaving them for the publisher to claim: that claim was a
-- second write of every delivery row, and the listener's read of the
-- row's content a third round of work. A handed-off delivery is written as
-- PUBLISHED, and its batch gets one row here, in the same transaction,
-- naming its deliveries. The row is deleted once the broker confirmed the
-- batch's messages. A row still here at due_at (the daemon died, or the
-- broker refused the messages and the row was made due at once) is
-- taken over by the publisher, which publishes its deliveries again.
--
-- The statement-level NOTIFY on deliveries goes: it woke every publisher
-- on every relay batch, which now publishes its own deliveries, and it
-- took PostgreSQL's notify-queue lock at each relay commit. A relay kicks
-- its own daemon's publisher when it leaves deliveries to it, and every
-- publisher polls.

-- +goose Up
CREATE TABLE delivery_handoffs (
    handoff_id   bigserial PRIMARY KEY,
    due_at       timestamptz NOT NULL,
    delivery_ids uuid[] NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX delivery_handoffs_due ON delivery_handoffs (due_at);
DROP TRIGGER deliveries_notify ON deliveries;
DROP FUNCTION herald_notify_delivery();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION herald_notify_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_deliveries', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER deliveries_notify AFTER INSERT ON deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION herald_notify_delivery();
DROP TABLE delivery_handoffs;
