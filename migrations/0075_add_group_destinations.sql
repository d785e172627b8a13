-- One post per shared destination (issue 28): a place channel (a Slack
-- channel, a webhook, a Teams room) is posted to once per event, at the
-- destination the group named by the rule's post block holds for the
-- channel. A group's destinations map a channel name to the address the
-- channel's plugin posts to (a webhook's name in the channel's config, a
-- Slack channel id), so "the restaurant's Slack channel" lives with the
-- restaurant's group and its version. The directory parser checks the
-- names and addresses; the database only keeps the value an object of
-- strings, so a writer that bypasses the parser cannot store a shape the
-- relay cannot read.

-- +goose Up
ALTER TABLE groups ADD COLUMN destinations jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE groups ADD CONSTRAINT groups_destinations_object CHECK (jsonb_typeof(destinations) = 'object');

-- +goose Down
ALTER TABLE groups DROP CONSTRAINT groups_destinations_object;
ALTER TABLE groups DROP COLUMN destinations;
