-- Delivery-status events (issue 28, item 7): every final delivery outcome
-- (SENT, FAILED, SKIPPED, CANCELLED, DIGESTED) and every inbox read and
-- action is recorded in status_events in the transaction that made it, by
-- statement-level triggers with transition tables on deliveries (the
-- partitioned parent: one trigger sees the rows of every partition),
-- notifications and notification_actions. Whatever path sets a final
-- status (the listeners, cancel, escalation, digest, retention) records
-- its event without knowing about it: a rollback takes the event back
-- with the change, a commit keeps both. A stage of `herald serve` drains
-- the table to the broker (published_at) and to the tenant's webhook
-- (webhook_due_at), at least once, each event with its stable event_id.
--
-- Triggers fire on statements that name the parent tables, as every one
-- of Herald's does; a statement aimed at one partition directly records
-- nothing.
--
-- tenant_webhooks holds each tenant's webhook (at most one): the URL, the
-- event kinds it wants, its signing secret (Standard Webhooks,
-- "whsec_<base64>") and, for an overlap after a rotation, the previous
-- secret until previous_until. The secret must be readable to sign with,
-- so it is kept as is, behind row-level security, and shown once.
-- A tenant's events are owed to its webhook (webhook_due_at set) only when
-- its webhook is enabled and wants the kind when the event is recorded.

-- +goose Up
CREATE TABLE tenant_webhooks (
    tenant_id      text PRIMARY KEY REFERENCES tenants(tenant_id),
    url            text NOT NULL CONSTRAINT tenant_webhooks_url CHECK (
        octet_length(url) <= 2000 AND url ~ '^https?://[^[:space:][:cntrl:]]+$'),
    kinds          text[] NOT NULL CONSTRAINT tenant_webhooks_kinds CHECK (
        cardinality(kinds) BETWEEN 1 AND 7 AND kinds <@ ARRAY['delivery.sent', 'delivery.failed', 'delivery.skipped',
            'delivery.cancelled', 'delivery.digested', 'notification.read', 'notification.acted']),
    enabled        boolean NOT NULL DEFAULT true,
    secret         text NOT NULL CONSTRAINT tenant_webhooks_secret CHECK (secret ~ '^whsec_[A-Za-z0-9+/=]{32,88}$'),
    previous_secret text CONSTRAINT tenant_webhooks_previous_secret CHECK (previous_secret ~ '^whsec_[A-Za-z0-9+/=]{32,88}$'),
    previous_until timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE status_events (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- event_id is the stable id consumers deduplicate on: the AMQP
    -- message id and the webhook-id header of every copy of the event.
    event_id       uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    tenant_id      text NOT NULL,
    kind           text NOT NULL CONSTRAINT status_events_kind CHECK (kind IN ('delivery.sent', 'delivery.failed',
        'delivery.skipped', 'delivery.cancelled', 'delivery.digested', 'notification.read', 'notification.acted')),
    occurred_at    timestamptz NOT NULL DEFAULT now(),
    data           jsonb NOT NULL,
    published_at   timestamptz,
    -- webhook_due_at: owed to the tenant's webhook from then on; NULL:
    -- nothing owed (delivered, given up, or no webhook wanted it).
    webhook_due_at     timestamptz,
    webhook_attempts   integer NOT NULL DEFAULT 0,
    webhook_lease_until timestamptz,
    webhook_delivered_at timestamptz,
    webhook_last_error text NOT NULL DEFAULT ''
);
CREATE INDEX status_events_unpublished ON status_events (seq) WHERE published_at IS NULL;
CREATE INDEX status_events_webhook_due ON status_events (tenant_id, webhook_due_at) WHERE webhook_due_at IS NOT NULL;
CREATE INDEX status_events_by_time ON status_events (tenant_id, occurred_at);
ALTER TABLE status_events SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);

-- The triggers' functions run as the owner (SECURITY DEFINER): the API's
-- role marks notifications read and inserts actions, and may not write
-- status_events itself.
-- +goose StatementBegin
CREATE FUNCTION herald_status_events_deliveries() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO public.status_events (tenant_id, kind, data, webhook_due_at)
        SELECT n.tenant_id, 'delivery.' || lower(n.status), jsonb_build_object(
                'delivery_id', n.delivery_id, 'notification_id', n.notification_id, 'event_id', n.event_id,
                'event_type', n.event_type, 'user_id', n.user_id, 'channel', n.channel, 'status', n.status,
                'attempts', n.attempts, 'provider', n.provider, 'provider_message_id', n.provider_message_id,
                'reason', n.last_error),
            CASE WHEN 'delivery.' || lower(n.status) = ANY (w.kinds) THEN now() END
        FROM new_rows n JOIN old_rows o ON o.delivery_id = n.delivery_id
        LEFT JOIN public.tenant_webhooks w ON w.tenant_id = n.tenant_id AND w.enabled
        WHERE n.status IN ('SENT', 'FAILED', 'SKIPPED', 'CANCELLED', 'DIGESTED') AND o.status IS DISTINCT FROM n.status
        ORDER BY n.tenant_id, n.delivery_id;
    ELSE
        INSERT INTO public.status_events (tenant_id, kind, data, webhook_due_at)
        SELECT n.tenant_id, 'delivery.' || lower(n.status), jsonb_build_object(
                'delivery_id', n.delivery_id, 'notification_id', n.notification_id, 'event_id', n.event_id,
                'event_type', n.event_type, 'user_id', n.user_id, 'channel', n.channel, 'status', n.status,
                'attempts', n.attempts, 'provider', n.provider, 'provider_message_id', n.provider_message_id,
                'reason', n.last_error),
            CASE WHEN 'delivery.' || lower(n.status) = ANY (w.kinds) THEN now() END
        FROM new_rows n LEFT JOIN public.tenant_webhooks w ON w.tenant_id = n.tenant_id AND w.enabled
        WHERE n.status IN ('SENT', 'FAILED', 'SKIPPED', 'CANCELLED', 'DIGESTED')
        ORDER BY n.tenant_id, n.delivery_id;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER deliveries_status_events AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_status_events_deliveries();
-- A delivery written final at once (a workflow that skips or cancels as
-- it decides) is recorded too.
CREATE TRIGGER deliveries_status_events_insert AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_status_events_deliveries();

-- +goose StatementBegin
CREATE FUNCTION herald_status_events_reads() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO public.status_events (tenant_id, kind, data, webhook_due_at)
    SELECT n.tenant_id, 'notification.read', jsonb_build_object(
            'notification_id', n.notification_id, 'event_id', n.event_id, 'event_type', n.event_type,
            'user_id', n.user_id, 'project_id', n.project_id, 'read_at', n.read_at),
        CASE WHEN 'notification.read' = ANY (w.kinds) THEN now() END
    FROM new_rows n JOIN old_rows o ON o.notification_id = n.notification_id
    LEFT JOIN public.tenant_webhooks w ON w.tenant_id = n.tenant_id AND w.enabled
    WHERE n.read_at IS NOT NULL AND o.read_at IS NULL
    ORDER BY n.tenant_id, n.notification_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER notifications_status_events AFTER UPDATE ON notifications
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_status_events_reads();

-- +goose StatementBegin
CREATE FUNCTION herald_status_events_actions() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO public.status_events (tenant_id, kind, data, webhook_due_at)
    SELECT n.tenant_id, 'notification.acted', jsonb_build_object(
            'action_id', n.action_id, 'notification_id', n.notification_id, 'event_id', n.event_id,
            'event_type', n.event_type, 'user_id', n.user_id, 'project_id', n.project_id,
            'action', n.action, 'data', n.data, 'acted_at', n.acted_at),
        CASE WHEN 'notification.acted' = ANY (w.kinds) THEN now() END
    FROM new_rows n LEFT JOIN public.tenant_webhooks w ON w.tenant_id = n.tenant_id AND w.enabled
    ORDER BY n.tenant_id, n.seq;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER notification_actions_status_events AFTER INSERT ON notification_actions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_status_events_actions();

REVOKE ALL ON FUNCTION herald_status_events_deliveries(), herald_status_events_reads(),
    herald_status_events_actions() FROM PUBLIC;

GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_webhooks TO herald_api, herald_worker;
GRANT SELECT ON tenant_webhooks TO herald_admin;
GRANT SELECT, UPDATE, DELETE ON status_events TO herald_worker;
-- The API reads its tenant's events and marks them owed again (replay).
GRANT SELECT, UPDATE ON status_events TO herald_api;
GRANT SELECT ON status_events TO herald_admin;
ALTER TABLE tenant_webhooks ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_webhooks FORCE ROW LEVEL SECURITY;
ALTER TABLE status_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE status_events FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON tenant_webhooks TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON tenant_webhooks TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON tenant_webhooks FOR SELECT TO herald_admin USING (true);
CREATE POLICY worker_all ON status_events TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON status_events TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON status_events FOR SELECT TO herald_admin USING (true);

-- +goose Down
DROP TRIGGER notification_actions_status_events ON notification_actions;
DROP TRIGGER notifications_status_events ON notifications;
DROP TRIGGER deliveries_status_events_insert ON deliveries;
DROP TRIGGER deliveries_status_events ON deliveries;
DROP FUNCTION herald_status_events_actions();
DROP FUNCTION herald_status_events_reads();
DROP FUNCTION herald_status_events_deliveries();
DROP TABLE status_events;
DROP TABLE tenant_webhooks;
