-- The soak benchmark (`herald bench --scenario soak`) wrote millions of
-- deliveries into one database and found what made the rate fall as the
-- tables grew (README, "Soak"):
--
-- Every delivery row is written twice on the hot path (the relay's insert,
-- the outcome's update), and no update of deliveries was HOT: the partial
-- indexes of the waiting rows named status in their predicates, and the
-- outcome rewrote next_attempt_at, an indexed column. So every outcome
-- added a second entry to the primary key and to the (tenant, event, user,
-- channel) unique key, whose inserts land all over the index, and left a
-- dead row that only VACUUM clears (never, with autovacuum off).
--
-- queue is status for the rows that wait for something (PENDING, RETRY,
-- DEFERRED, SENDING) and NULL for the rest, computed by PostgreSQL. The
-- partial indexes of the waiting rows now name queue instead of status, so
-- PUBLISHED -> SENT | FAILED leaves every indexed column as it was
-- (store.RecordOutcomes keeps next_attempt_at of a final row) and is a HOT
-- update: no index entry, and the old version is pruned from its page by
-- the next access to the page, vacuum or not. fillfactor leaves each
-- page room for the new version of the rows inserted into it.
--
-- The unread counters (one row per user, bumped by every fan-out) got only
-- about half of their updates HOT: full pages. fillfactor keeps room.
--
-- Autovacuum, where it runs, visits the hot tables long before its default
-- 20 % of dead rows; the small queue tables are vacuumed after a thousand
-- changes whatever their size.
--
-- The publisher's stale reclaim (PUBLISHED rows older than
-- publisher.reclaim_after) read the whole table every reclaim_after / 4.
-- An index that tells PUBLISHED rows from SENT ones would change with the
-- outcome and make it non-HOT again, so there is none: between hourly full
-- rounds the reclaim reads only the deliveries created since its last
-- round, a range of the primary key (UUIDv7 ids; store.ClaimStaleSince).

-- +goose Up
ALTER TABLE deliveries ADD COLUMN queue text GENERATED ALWAYS AS (
    CASE WHEN status IN ('PENDING', 'RETRY', 'DEFERRED', 'SENDING') THEN status END) STORED;
DROP INDEX deliveries_pending;
DROP INDEX deliveries_due;
DROP INDEX deliveries_leased;
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE queue = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE queue IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE queue = 'SENDING';
ALTER TABLE deliveries SET (fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE notification_counters SET (fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE event_outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE delivery_handoffs SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE notifications SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE delivery_attempts SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);

-- +goose Down
ALTER TABLE delivery_attempts RESET (autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE notifications RESET (autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE delivery_handoffs RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
ALTER TABLE event_outbox RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor);
ALTER TABLE notification_counters RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
ALTER TABLE deliveries RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor,
    autovacuum_analyze_scale_factor);
DROP INDEX deliveries_leased;
DROP INDEX deliveries_due;
DROP INDEX deliveries_pending;
ALTER TABLE deliveries DROP COLUMN queue;
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE status = 'SENDING';
