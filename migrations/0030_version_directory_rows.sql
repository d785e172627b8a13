-- The directory API (issue 25) writes recipients and groups one at a time,
-- so two writers can race: each row gains a version, bumped by every write
-- (the API's ETag; If-Match compares it), and updated_at, the time of the
-- last write (the list's updated_since filter, through the index). A
-- recipient's version also covers their preferences (user_preferences
-- rows), which the API writes as one document with the recipient's
-- locale, time zone and quiet hours.
--
-- recipient_devices gains device_id, the API's name for one device of a
-- user: md5 of its address (the token, or a web push endpoint), so the same
-- device registered twice keeps its id, and a URL never carries the token.

-- +goose Up
ALTER TABLE recipients ADD COLUMN version    bigint      NOT NULL DEFAULT 1,
                       ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE groups ADD COLUMN version    bigint      NOT NULL DEFAULT 1,
                   ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE recipient_devices ADD COLUMN device_id text GENERATED ALWAYS AS (md5(token)) STORED;
CREATE INDEX recipients_by_update ON recipients (tenant_id, updated_at, user_id);

-- +goose Down
DROP INDEX recipients_by_update;
ALTER TABLE recipient_devices DROP COLUMN device_id;
ALTER TABLE groups DROP COLUMN version, DROP COLUMN updated_at;
ALTER TABLE recipients DROP COLUMN version, DROP COLUMN updated_at;
