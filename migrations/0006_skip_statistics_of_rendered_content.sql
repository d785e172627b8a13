-- Herald refreshes the planner statistics of its hot tables itself when
-- they lag (store.AnalyzeStale), and autovacuum analyzes them too. No
-- query filters, joins or sorts on rendered content, recipients' JSON or
-- error texts, and analyzing them (large values, detoasted) was most of
-- the cost of an ANALYZE of deliveries. Statistics target 0 skips them.

-- +goose Up
ALTER TABLE deliveries
    ALTER COLUMN recipient SET STATISTICS 0,
    ALTER COLUMN content SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0,
    ALTER COLUMN provider_message_id SET STATISTICS 0;
ALTER TABLE notifications
    ALTER COLUMN title SET STATISTICS 0,
    ALTER COLUMN body SET STATISTICS 0,
    ALTER COLUMN data SET STATISTICS 0;
ALTER TABLE delivery_attempts
    ALTER COLUMN error SET STATISTICS 0,
    ALTER COLUMN provider_message_id SET STATISTICS 0;
ALTER TABLE event_outbox
    ALTER COLUMN payload SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0;
ALTER TABLE delivery_handoffs
    ALTER COLUMN delivery_ids SET STATISTICS 0;

-- +goose Down
ALTER TABLE deliveries
    ALTER COLUMN recipient SET STATISTICS -1,
    ALTER COLUMN content SET STATISTICS -1,
    ALTER COLUMN last_error SET STATISTICS -1,
    ALTER COLUMN provider_message_id SET STATISTICS -1;
ALTER TABLE notifications
    ALTER COLUMN title SET STATISTICS -1,
    ALTER COLUMN body SET STATISTICS -1,
    ALTER COLUMN data SET STATISTICS -1;
ALTER TABLE delivery_attempts
    ALTER COLUMN error SET STATISTICS -1,
    ALTER COLUMN provider_message_id SET STATISTICS -1;
ALTER TABLE event_outbox
    ALTER COLUMN payload SET STATISTICS -1,
    ALTER COLUMN last_error SET STATISTICS -1;
ALTER TABLE delivery_handoffs
    ALTER COLUMN delivery_ids SET STATISTICS -1;
