-- The status-event gauges read status_events every 5 seconds: what the
-- broker still owes (past the publisher's cursor) and what the webhooks
-- still owe (the partial index status_events_webhook_due). Without
-- statistics the planner takes a third of the table for the first and
-- nearly all of it for the second, and reads the whole table, which holds
-- every status event of the replay window (half a gigabyte per million
-- deliveries): measured in the soak at 5 M deliveries, 2.4 s per reading
-- and half a core by the end. A server with autovacuum off never analyzes
-- it, so the daemon's own analyze (store.AnalyzeStale, herald_analyze)
-- now covers it, as it covers the other hot tables; its event data is
-- left out of the statistics like the other tables' wide columns (0006).

-- +goose Up
ALTER TABLE status_events ALTER COLUMN data SET STATISTICS 0;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_analyze(p_table text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_table NOT IN ('event_outbox', 'notifications', 'notification_counters', 'deliveries', 'delivery_attempts',
                       'delivery_handoffs', 'status_events', 'recipients', 'recipient_devices', 'groups', 'group_members',
                       'user_preferences', 'group_settings')
       AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                       WHERE c.relname = p_table AND c.relnamespace = 'public'::regnamespace
                         AND i.inhparent IN ('public.delivery_attempts'::regclass, 'public.notifications'::regclass,
                                                'public.deliveries'::regclass)) THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE status_events ALTER COLUMN data SET STATISTICS -1;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_analyze(p_table text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_table NOT IN ('event_outbox', 'notifications', 'notification_counters', 'deliveries', 'delivery_attempts',
                       'delivery_handoffs', 'recipients', 'recipient_devices', 'groups', 'group_members',
                       'user_preferences', 'group_settings')
       AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                       WHERE c.relname = p_table AND c.relnamespace = 'public'::regnamespace
                         AND i.inhparent IN ('public.delivery_attempts'::regclass, 'public.notifications'::regclass,
                                                'public.deliveries'::regclass)) THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd
