-- A per_digest inbox (inbox = "per_digest") collects its items as
-- deliveries on the pseudo-channel @inbox: bookkeeping of the inbox, not
-- deliveries anyone sends. Their end (DIGESTED into the digest's inbox row,
-- or CANCELLED with their event) is no delivery-status event: a tenant's
-- broker consumers and webhook see the row's notification.read instead,
-- and no delivery.digested or delivery.cancelled for a channel they never
-- configured. The function is migration 0080's otherwise.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_status_events_deliveries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public
    AS $$
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
            AND n.channel <> '@inbox'
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
        WHERE n.status IN ('SENT', 'FAILED', 'SKIPPED', 'CANCELLED', 'DIGESTED') AND n.channel <> '@inbox'
        ORDER BY n.tenant_id, n.delivery_id;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_status_events_deliveries() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public
    AS $$
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
