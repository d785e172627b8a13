-- payload_sha256 is the SHA-256 of an event's payload as jsonb prints it,
-- written by sdk/producer's INSERT. The API answers 409 when an event_id is
-- reused with another type or payload, and 200 with the original event when
-- the same event is posted again. Events written before this migration have
-- NULL and are compared by type only.

-- +goose Up
ALTER TABLE event_outbox ADD COLUMN payload_sha256 bytea;

-- +goose Down
ALTER TABLE event_outbox DROP COLUMN payload_sha256;
