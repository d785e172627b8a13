-- Tenant isolation by PostgreSQL row-level security, forced so that the
-- table owner is no exception, plus projects (an optional scope under the
-- tenant), superadmin credentials and per-tenant producer roles.
--
-- Roles (cluster-wide, NOLOGIN; `herald db roles` creates them when the
-- role running the migrations may not):
--   herald_api      the HTTP API. Sees and writes only the rows of the tenant
--                   set for the transaction (SET LOCAL herald.tenant), and of
--                   its project when herald.project is set.
--   herald_worker   relay, publisher, listeners, retry poller: every tenant.
--   herald_admin    the superadmin API: reads every tenant, writes nothing.
--   herald_producer services that share the database: members are login
--                   roles bound to one tenant (herald_producer_roles); they
--                   may insert and read events of that tenant only, with
--                   herald.tenant set to it.
-- The role running the migrations (the tables' owner) becomes a member of
-- the first three, so a daemon logging in as it can SET ROLE to each.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['herald_api', 'herald_worker', 'herald_admin', 'herald_producer'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL; -- another migration made it meanwhile
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'role % does not exist and % may not create it', r, current_user
                        USING HINT = 'run `herald db roles --admin-url <superuser url>` once, or grant CREATEROLE to ' || current_user;
            END;
        END IF;
    END LOOP;
    FOREACH r IN ARRAY ARRAY['herald_api', 'herald_worker', 'herald_admin'] LOOP
        IF NOT pg_has_role(current_user, r, 'MEMBER') THEN
            BEGIN
                EXECUTE format('GRANT %I TO %I', r, current_user);
            EXCEPTION
                WHEN unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION '% is not a member of role % and may not grant it to itself', current_user, r
                        USING HINT = 'run `herald db roles --admin-url <superuser url> --owner ' || current_user || '` once';
            END;
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE tenants ADD CONSTRAINT tenants_id_not_empty CHECK (tenant_id <> '');

-- projects are an optional scope under a tenant; every tenant has "default".
CREATE TABLE projects (
    tenant_id  text NOT NULL REFERENCES tenants(tenant_id),
    project_id text NOT NULL CHECK (project_id <> ''),
    name       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, project_id)
);
INSERT INTO projects (tenant_id, project_id, name) SELECT tenant_id, 'default', 'default' FROM tenants;

ALTER TABLE event_outbox ADD COLUMN project_id text NOT NULL DEFAULT 'default';
ALTER TABLE notifications ADD COLUMN project_id text NOT NULL DEFAULT 'default';
ALTER TABLE notification_counters ADD COLUMN project_id text NOT NULL DEFAULT 'default';
ALTER TABLE notification_counters DROP CONSTRAINT notification_counters_pkey;
ALTER TABLE notification_counters ADD PRIMARY KEY (tenant_id, user_id, project_id);
-- An API key limited to one project (NULL: every project of its tenant).
ALTER TABLE api_keys ADD COLUMN project_id text;

-- The superadmin's notification filters: newest first across tenants, or
-- within one tenant (tenant and user: notifications_inbox).
CREATE INDEX notifications_recent ON notifications (created_at DESC, notification_id DESC);
CREATE INDEX notifications_tenant_recent ON notifications (tenant_id, created_at DESC, notification_id DESC);

-- superadmins hold the hashes of superadmin credentials (`herald admins
-- create`). Only the owner reads it, through herald_authenticate_admin.
CREATE TABLE superadmins (
    admin_id   text PRIMARY KEY,
    name       text NOT NULL DEFAULT '',
    key_hash   bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- herald_producer_roles binds a producer login role to its one tenant.
CREATE TABLE herald_producer_roles (
    role_name  text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants(tenant_id),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- herald_secrets holds keys every daemon of the database shares: "cursor"
-- signs pagination cursors, so that a cursor one daemon made is good on
-- every other and a tampered one is refused. Only the pipeline's role reads it.
CREATE TABLE herald_secrets (
    name   text PRIMARY KEY,
    secret bytea NOT NULL
);
INSERT INTO herald_secrets (name, secret)
    VALUES ('cursor', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- herald_authenticate returns the tenant and project of an unrevoked API
-- key. It reads across tenants (the tenant is what it finds out), so it
-- runs as the owner; the API role may call it but not read api_keys of
-- other tenants.
-- +goose StatementBegin
CREATE FUNCTION herald_authenticate(p_hash bytea)
RETURNS TABLE (key_id text, tenant_id text, project_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT k.key_id, k.tenant_id, k.project_id FROM public.api_keys k
    WHERE k.key_hash = p_hash AND k.revoked_at IS NULL
$$;
-- +goose StatementEnd

-- herald_authenticate_admin returns the id of an unrevoked superadmin
-- credential.
-- +goose StatementBegin
CREATE FUNCTION herald_authenticate_admin(p_hash bytea)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.admin_id FROM public.superadmins a WHERE a.key_hash = p_hash AND a.revoked_at IS NULL
$$;
-- +goose StatementEnd

-- herald_producer_tenant returns the tenant the producer role p_role is
-- bound to (NULL: none). Policies call it with current_user.
-- +goose StatementBegin
CREATE FUNCTION herald_producer_tenant(p_role text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT b.tenant_id FROM public.herald_producer_roles b WHERE b.role_name = p_role
$$;
-- +goose StatementEnd

-- herald_analyze runs ANALYZE on one of Herald's tables as their owner, for
-- daemons that run as herald_worker (store.AnalyzeStale).
-- +goose StatementBegin
CREATE FUNCTION herald_analyze(p_table text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF p_table NOT IN ('event_outbox', 'notifications', 'notification_counters', 'deliveries', 'delivery_attempts',
                       'delivery_handoffs', 'recipients', 'recipient_devices', 'groups', 'group_members',
                       'user_preferences', 'group_settings') THEN
        RAISE EXCEPTION 'herald_analyze: % is not one of Herald''s hot tables', p_table;
    END IF;
    EXECUTE format('ANALYZE public.%I', p_table);
END;
$$;
-- +goose StatementEnd

-- The event trigger looks at every tenant's pending events (whichever role
-- inserted), so it runs as the owner.
ALTER FUNCTION herald_notify_event() SECURITY DEFINER;
ALTER FUNCTION herald_notify_event() SET search_path = pg_catalog, public;

REVOKE ALL ON FUNCTION herald_authenticate(bytea), herald_authenticate_admin(bytea),
    herald_producer_tenant(text), herald_analyze(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_authenticate(bytea) TO herald_api, herald_worker;
GRANT EXECUTE ON FUNCTION herald_authenticate_admin(bytea) TO herald_api, herald_admin;
GRANT EXECUTE ON FUNCTION herald_producer_tenant(text) TO herald_producer;
GRANT EXECUTE ON FUNCTION herald_analyze(text) TO herald_worker;

-- Privileges. Row-level security decides which rows; these decide which
-- tables and statements.
GRANT USAGE ON SCHEMA public TO herald_api, herald_worker, herald_admin, herald_producer;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    tenants, projects, api_keys, event_outbox, recipients, recipient_devices, groups, group_members,
    user_preferences, group_settings, notifications, notification_counters, notification_actions,
    deliveries, delivery_attempts
    TO herald_api, herald_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON delivery_handoffs TO herald_worker;
GRANT SELECT ON herald_secrets TO herald_worker;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO herald_api, herald_worker, herald_producer;
GRANT SELECT ON
    tenants, projects, event_outbox, notifications, notification_counters, notification_actions,
    deliveries, delivery_attempts
    TO herald_admin;
GRANT SELECT, INSERT ON event_outbox TO herald_producer;
GRANT SELECT ON projects TO herald_producer;

-- Row-level security, forced, on every table. Policies name their roles;
-- a role with no policy on a table sees no row of it.
-- +goose StatementBegin
DO $$
DECLARE
    t text;
    -- The tenant (and project, when set) of the transaction.
    tenant_only constant text := 'tenant_id = current_setting(''herald.tenant'', true)';
    with_project constant text := tenant_only || ' AND (coalesce(current_setting(''herald.project'', true), '''') = '''''
        || ' OR project_id = current_setting(''herald.project'', true))';
BEGIN
    FOREACH t IN ARRAY ARRAY['tenants', 'projects', 'api_keys', 'event_outbox', 'recipients', 'recipient_devices',
        'groups', 'group_members', 'user_preferences', 'group_settings', 'notifications', 'notification_counters',
        'notification_actions', 'deliveries', 'delivery_attempts', 'delivery_handoffs', 'superadmins',
        'herald_producer_roles', 'herald_secrets'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        -- superadmins and herald_producer_roles: herald_worker has no
        -- privilege on them; the policy lets their owner, a member, in.
        EXECUTE format('CREATE POLICY worker_all ON %I TO herald_worker USING (true) WITH CHECK (true)', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['tenants', 'projects', 'api_keys', 'recipients', 'recipient_devices', 'groups',
        'group_members', 'user_preferences', 'group_settings', 'notification_actions', 'deliveries',
        'delivery_attempts'] LOOP
        EXECUTE format('CREATE POLICY api_tenant ON %I TO herald_api USING (%s) WITH CHECK (%s)', t, tenant_only, tenant_only);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['event_outbox', 'notifications', 'notification_counters'] LOOP
        EXECUTE format('CREATE POLICY api_tenant ON %I TO herald_api USING (%s) WITH CHECK (%s)', t, with_project, with_project);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['tenants', 'projects', 'event_outbox', 'notifications', 'notification_counters',
        'notification_actions', 'deliveries', 'delivery_attempts'] LOOP
        EXECUTE format('CREATE POLICY admin_read ON %I FOR SELECT TO herald_admin USING (true)', t);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- A producer role writes and reads the events of its own tenant, in a
-- project of that tenant, with herald.tenant set to it.
CREATE POLICY producer_own_tenant ON event_outbox TO herald_producer
    USING (tenant_id = current_setting('herald.tenant', true) AND tenant_id = herald_producer_tenant(current_user::text))
    WITH CHECK (tenant_id = current_setting('herald.tenant', true) AND tenant_id = herald_producer_tenant(current_user::text)
        AND EXISTS (SELECT 1 FROM projects p WHERE p.tenant_id = event_outbox.tenant_id AND p.project_id = event_outbox.project_id));
CREATE POLICY producer_own_tenant ON projects FOR SELECT TO herald_producer
    USING (tenant_id = current_setting('herald.tenant', true) AND tenant_id = herald_producer_tenant(current_user::text));

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['tenants', 'api_keys', 'event_outbox', 'recipients', 'recipient_devices',
        'groups', 'group_members', 'user_preferences', 'group_settings', 'notifications', 'notification_counters',
        'notification_actions', 'deliveries', 'delivery_attempts', 'delivery_handoffs'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS worker_all ON %I', t);
        EXECUTE format('DROP POLICY IF EXISTS api_tenant ON %I', t);
        EXECUTE format('DROP POLICY IF EXISTS admin_read ON %I', t);
        EXECUTE format('DROP POLICY IF EXISTS producer_own_tenant ON %I', t);
        EXECUTE format('ALTER TABLE %I NO FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY', t);
        EXECUTE format('REVOKE ALL ON %I FROM herald_api, herald_worker, herald_admin, herald_producer', t);
    END LOOP;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM herald_api, herald_worker, herald_producer;
REVOKE USAGE ON SCHEMA public FROM herald_api, herald_worker, herald_admin, herald_producer;
ALTER FUNCTION herald_notify_event() SECURITY INVOKER;
ALTER FUNCTION herald_notify_event() RESET search_path;
DROP FUNCTION herald_analyze(text);
DROP FUNCTION herald_producer_tenant(text);
DROP FUNCTION herald_authenticate_admin(bytea);
DROP FUNCTION herald_authenticate(bytea);
DROP TABLE herald_secrets;
DROP TABLE herald_producer_roles;
DROP TABLE superadmins;
DROP INDEX notifications_tenant_recent;
DROP INDEX notifications_recent;
ALTER TABLE api_keys DROP COLUMN project_id;
ALTER TABLE notification_counters DROP CONSTRAINT notification_counters_pkey;
ALTER TABLE notification_counters DROP COLUMN project_id;
ALTER TABLE notification_counters ADD PRIMARY KEY (tenant_id, user_id);
ALTER TABLE notifications DROP COLUMN project_id;
ALTER TABLE event_outbox DROP COLUMN project_id;
DROP TABLE projects;
ALTER TABLE tenants DROP CONSTRAINT tenants_id_not_empty;
