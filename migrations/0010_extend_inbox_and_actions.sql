-- The inbox side: reading notifications by user, first-to-act actions with
-- a stable id the business service receives at least once (an outbox row
-- published to the herald.actions exchange), and read state shared among
-- the recipients of a shared notification.

-- +goose Up
ALTER TABLE notification_actions
    ADD COLUMN action_id    uuid NOT NULL DEFAULT gen_random_uuid(),
    ADD COLUMN seq          bigserial,
    ADD COLUMN project_id   text NOT NULL DEFAULT 'default',
    ADD COLUMN event_id     text NOT NULL DEFAULT '',
    ADD COLUMN event_type   text NOT NULL DEFAULT '',
    ADD COLUMN data         jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN published_at timestamptz;
ALTER TABLE notification_actions ADD CONSTRAINT notification_actions_action_id_key UNIQUE (action_id);
ALTER TABLE notification_actions ADD CONSTRAINT notification_actions_type_check
    CHECK (action IN ('CONFIRMED', 'REJECTED', 'POSTPONED', 'DISMISSED', 'CUSTOM'));
CREATE INDEX notification_actions_feed ON notification_actions (tenant_id, seq);
CREATE INDEX notification_actions_unpublished ON notification_actions (seq) WHERE published_at IS NULL;
-- Sharers of a notification, found by its share key.
CREATE INDEX notifications_shared ON notifications (tenant_id, share_key) WHERE share_key IS NOT NULL;
GRANT USAGE, SELECT ON SEQUENCE notification_actions_seq_seq TO herald_api, herald_worker;

-- +goose Down
DROP INDEX notifications_shared;
DROP INDEX notification_actions_unpublished;
DROP INDEX notification_actions_feed;
ALTER TABLE notification_actions DROP CONSTRAINT notification_actions_type_check;
ALTER TABLE notification_actions DROP CONSTRAINT notification_actions_action_id_key;
ALTER TABLE notification_actions
    DROP COLUMN published_at, DROP COLUMN data, DROP COLUMN event_type, DROP COLUMN event_id,
    DROP COLUMN project_id, DROP COLUMN seq, DROP COLUMN action_id;
