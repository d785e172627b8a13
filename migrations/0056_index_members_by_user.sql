-- group_members is keyed (tenant_id, group_key, user_id): the relay reads a
-- group's members by that key, but a user's own memberships (the end
-- user's GET /v1/me/preferences, which names the groups that keep a channel
-- off; removing or erasing a recipient, which deletes them) had only the
-- tenant's prefix of it, and read every membership of the tenant. With
-- 100,000 members, GET /v1/me/preferences answered 102 requests/s under 50
-- readers (docs/performance/2026-11-26.md); this index makes each lookup a
-- few index entries.

-- +goose Up
CREATE INDEX group_members_by_user ON group_members (tenant_id, user_id);

-- +goose Down
DROP INDEX group_members_by_user;
