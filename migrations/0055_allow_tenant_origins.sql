-- A tenant lists the browser origins its own front ends run on
-- (tenant_origins): the public API answers CORS for them on the end-user
-- endpoints (the inbox, live tickets, /v1/me), the live gateway accepts
-- WebSockets from them, and those marked frame may embed the hosted inbox
-- page (its frame-ancestors). An origin is stored as browsers serialise it
-- (origins.Normalize): scheme://host[:port], lower case, the host in
-- punycode, no default port, no path; https, or http for a loopback host.
-- A tenant lists at most 50 (the trigger counts under a per-tenant lock, so
-- two concurrent writers cannot both take the last place).

-- +goose Up
CREATE TABLE tenant_origins (
    tenant_id  text NOT NULL REFERENCES tenants(tenant_id),
    origin     text NOT NULL CONSTRAINT tenant_origins_origin CHECK (
        octet_length(origin) <= 300
        AND origin ~ '^(https://([a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])|http://(localhost|127\.[0-9.]+|\[::1\]))(:[1-9][0-9]{0,4})?$'),
    -- frame: the origin may also embed the hosted /inbox page.
    frame      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, origin)
);
CREATE INDEX tenant_origins_by_origin ON tenant_origins (origin);

-- +goose StatementBegin
CREATE FUNCTION herald_tenant_origins_cap() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('herald.tenant_origins:' || NEW.tenant_id, 0));
    IF (SELECT count(*) FROM tenant_origins WHERE tenant_id = NEW.tenant_id) >= 50 THEN
        RAISE EXCEPTION 'tenant_origins.origin: tenant % already lists 50 origins, the most it may', NEW.tenant_id
            USING ERRCODE = '23514', CONSTRAINT = 'tenant_origins_cap', COLUMN = 'origin', TABLE = 'tenant_origins';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER tenant_origins_cap BEFORE INSERT ON tenant_origins
    FOR EACH ROW EXECUTE FUNCTION herald_tenant_origins_cap();

-- herald_origin_listed says whether any tenant lists the origin: a CORS
-- preflight carries no credentials, so it is answered for an origin some
-- tenant allows (the actual request is granted only for the token's own
-- tenant). It answers yes or no, never which tenant; it reads across
-- tenants, so it runs as the owner.
-- +goose StatementBegin
CREATE FUNCTION herald_origin_listed(p_origin text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT EXISTS (SELECT 1 FROM public.tenant_origins o WHERE o.origin = p_origin)
$$;
-- +goose StatementEnd

-- herald_frame_origins is the origins tenant p_tenant lets embed the
-- hosted inbox page (none for an unknown tenant): the page is public and
-- so is its frame-ancestors.
-- +goose StatementBegin
CREATE FUNCTION herald_frame_origins(p_tenant text) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT o.origin FROM public.tenant_origins o WHERE o.tenant_id = p_tenant AND o.frame ORDER BY o.origin
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION herald_origin_listed(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION herald_frame_origins(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_origin_listed(text), herald_frame_origins(text) TO herald_api;

GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_origins TO herald_api;
GRANT SELECT ON tenant_origins TO herald_admin;
ALTER TABLE tenant_origins ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_origins FORCE ROW LEVEL SECURITY;
-- The owner (a member of herald_worker, as in 0007) writes through the CLI
-- and reads through the functions above; herald_worker itself holds no
-- privilege on the table.
CREATE POLICY worker_all ON tenant_origins TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON tenant_origins TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON tenant_origins FOR SELECT TO herald_admin USING (true);

-- +goose Down
DROP TABLE tenant_origins;
DROP FUNCTION herald_tenant_origins_cap();
DROP FUNCTION herald_frame_origins(text);
DROP FUNCTION herald_origin_listed(text);
