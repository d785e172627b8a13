-- roles limits an enabled group setting to members reached with one of
-- these roles (seed 001: SMS on for a restaurant's managers only). Empty:
-- every member, as before.

-- +goose Up
ALTER TABLE group_settings ADD COLUMN roles text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE group_settings DROP COLUMN roles;
