-- The hot path writes every delivery row three times (insert, PUBLISHED,
-- outcome); each of those writes touches every index of the table.
-- deliveries_by_event repeats the prefix of the (tenant_id, event_id,
-- user_id, channel) unique key, which serves the same lookups.

-- +goose Up
DROP INDEX deliveries_by_event;

-- +goose Down
CREATE INDEX deliveries_by_event ON deliveries (tenant_id, event_id);
