-- The status-event publisher marked every event it published: an UPDATE
-- of each row (published_at), non-HOT because the partial index of
-- unpublished events named the column, so every delivery's outcome cost
-- its status event a second row version and two more index entries, and
-- the dead versions stayed until a vacuum. Measured on the single shape
-- (1 recipient × 1 channel): the mark and the claim that found the rows
-- took a tenth of the pipeline's statement time.
--
-- Now the publisher keeps one cursor instead: every event records the
-- transaction that wrote it (txid), and the publisher takes events in
-- (txid, seq) order past the cursor, only from transactions older than
-- every transaction still running (the xmin of its snapshot). Those are
-- all finished, so no event can later appear before the cursor: a
-- transaction still open has a txid at or above that xmin, and its events
-- sort after it. The cursor moves in the claim's transaction once the
-- broker confirmed the events, as the mark did; one row, one update per
-- batch. A write transaction left open delays the events committed after
-- it began (the backlog gauge shows them), it never loses them.
--
-- The unique index on event_id goes too: nothing looks an event up by
-- it, and a random UUID (gen_random_uuid(), 122 random bits) is unique
-- without one; its inserts touched a random page of the index per event.
--
-- Events recorded before this migration: the ones not yet published get
-- the smallest txid and go first; the published ones keep txid NULL
-- (published, and never taken again).

-- +goose Up
ALTER TABLE status_events ADD COLUMN txid xid8;
ALTER TABLE status_events ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
UPDATE status_events SET txid = '3'::xid8 WHERE published_at IS NULL;
DROP INDEX status_events_unpublished;
ALTER TABLE status_events DROP COLUMN published_at;
CREATE INDEX status_events_by_txid ON status_events (txid, seq);
ALTER TABLE status_events DROP CONSTRAINT status_events_event_id_key;

CREATE TABLE status_event_cursor (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    -- The last event published: every event at or before (txid, seq)
    -- has been confirmed by the broker.
    txid     xid8 NOT NULL,
    seq      bigint NOT NULL
);
INSERT INTO status_event_cursor (txid, seq) VALUES ('0'::xid8, 0);
GRANT SELECT, UPDATE ON status_event_cursor TO herald_worker;
GRANT SELECT ON status_event_cursor TO herald_api, herald_admin;
ALTER TABLE status_event_cursor ENABLE ROW LEVEL SECURITY;
ALTER TABLE status_event_cursor FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON status_event_cursor TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY read_all ON status_event_cursor FOR SELECT TO herald_api, herald_admin USING (true);

-- +goose Down
ALTER TABLE status_events ADD COLUMN published_at timestamptz;
UPDATE status_events SET published_at = now()
    WHERE txid IS NULL OR (txid, seq) <= (SELECT txid, seq FROM status_event_cursor);
DROP TABLE status_event_cursor;
DROP INDEX status_events_by_txid;
ALTER TABLE status_events DROP COLUMN txid;
CREATE INDEX status_events_unpublished ON status_events (seq) WHERE published_at IS NULL;
ALTER TABLE status_events ADD CONSTRAINT status_events_event_id_key UNIQUE (event_id);
