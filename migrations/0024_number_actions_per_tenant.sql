-- An action's position in the feed (GET /v1/actions' seq and after, the
-- seq of a herald.actions message) counts its tenant's actions only (1, 2,
-- ...): the global sequence `seq` told every tenant how many actions all
-- the others took between two of its own (issue 24). `seq` stays, for the
-- publisher's order; tenant_seq is what tenants see.
--
-- A BEFORE INSERT trigger numbers each action max + 1 of its tenant under
-- a transaction-scoped advisory lock of the tenant, so a tenant's numbers
-- are given in commit order without gaps (two inserts of one tenant wait
-- for each other; other tenants do not). It runs as the inserting role:
-- herald_api's policy on notification_actions is the tenant's alone
-- (never narrowed to a project), so max sees every action of the tenant.
-- The unique index holds the numbering even so.

-- +goose Up
ALTER TABLE notification_actions ADD COLUMN tenant_seq bigint;
-- The owner sees the rows only while row-level security is not forced.
ALTER TABLE notification_actions NO FORCE ROW LEVEL SECURITY;
UPDATE notification_actions a SET tenant_seq = n.rn
FROM (SELECT action_id, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS rn FROM notification_actions) n
WHERE a.action_id = n.action_id;
ALTER TABLE notification_actions FORCE ROW LEVEL SECURITY;
ALTER TABLE notification_actions ALTER COLUMN tenant_seq SET NOT NULL;
CREATE UNIQUE INDEX notification_actions_tenant_seq ON notification_actions (tenant_id, tenant_seq);
DROP INDEX notification_actions_feed;

-- +goose StatementBegin
CREATE FUNCTION herald_number_action() RETURNS trigger
    LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('herald.notification_actions:' || NEW.tenant_id, 0));
    SELECT coalesce(max(a.tenant_seq), 0) + 1 INTO NEW.tenant_seq
    FROM public.notification_actions a WHERE a.tenant_id = NEW.tenant_id;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER notification_actions_number BEFORE INSERT ON notification_actions
    FOR EACH ROW EXECUTE FUNCTION herald_number_action();

-- +goose Down
DROP TRIGGER notification_actions_number ON notification_actions;
DROP FUNCTION herald_number_action();
CREATE INDEX notification_actions_feed ON notification_actions (tenant_id, seq);
DROP INDEX notification_actions_tenant_seq;
ALTER TABLE notification_actions DROP COLUMN tenant_seq;
