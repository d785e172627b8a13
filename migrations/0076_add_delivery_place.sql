-- One post per shared destination (issue 28): a delivery to a place (a
-- Slack channel, a webhook) is one row per (event, place, channel). It
-- keeps the deliveries' unique key (tenant_id, event_id, user_id, channel,
-- created_at) with user_id holding the place's group key, so a retried
-- fan-out writes it once; place marks the row as a place's, for the audit
-- trail (GET /v1/events/{id} shows it as "place", not as a user) and for
-- readers of the table. Its user_type is empty, and its notification_id
-- names the post alone: a place has no inbox row.
-- A constant default: PostgreSQL adds the column to every partition
-- without rewriting them.

-- +goose Up
ALTER TABLE deliveries ADD COLUMN place boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE deliveries DROP COLUMN place;
