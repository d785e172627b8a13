-- End-user tokens are bound to their tenant: each tenant registers the keys
-- its backend signs users' JWTs with (selected by the token's kid), and a
-- token is accepted only under a key of the tenant it names. Browsers open
-- live sessions with one-time tickets (redeemed once, within seconds)
-- instead of carrying a token in the URL.

-- +goose Up
CREATE TABLE token_keys (
    tenant_id  text NOT NULL REFERENCES tenants(tenant_id),
    kid        text NOT NULL CHECK (kid <> ''),
    -- alg is the one algorithm the key verifies: HS256, RS256, ES256 or EdDSA.
    alg        text NOT NULL CHECK (alg IN ('HS256', 'RS256', 'ES256', 'EdDSA')),
    -- issuer is the iss claim tokens under this key must carry.
    issuer     text NOT NULL CHECK (issuer <> ''),
    -- key is the HS256 secret, or the public key in PKIX DER.
    key        bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, kid)
);
ALTER TABLE token_keys ALTER COLUMN key SET STATISTICS 0;

CREATE TABLE live_tickets (
    ticket_hash bytea PRIMARY KEY,
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    user_type   text NOT NULL DEFAULT '',
    project_id  text NOT NULL DEFAULT '',
    expires_at  timestamptz NOT NULL
);
CREATE INDEX live_tickets_expiry ON live_tickets (expires_at);

-- herald_redeem_ticket takes a ticket once: it deletes the row and returns
-- who it was for, or nothing when it is unknown, used or expired. It reads
-- across tenants (the ticket says which), so it runs as the owner.
-- +goose StatementBegin
CREATE FUNCTION herald_redeem_ticket(p_hash bytea)
RETURNS TABLE (tenant_id text, user_id text, user_type text, project_id text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    DELETE FROM public.live_tickets t WHERE t.ticket_hash = p_hash AND t.expires_at > now()
    RETURNING t.tenant_id, t.user_id, t.user_type, t.project_id
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION herald_redeem_ticket(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION herald_redeem_ticket(bytea) TO herald_api, herald_worker;

GRANT SELECT, INSERT, UPDATE, DELETE ON token_keys, live_tickets TO herald_api, herald_worker;
ALTER TABLE token_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE token_keys FORCE ROW LEVEL SECURITY;
ALTER TABLE live_tickets ENABLE ROW LEVEL SECURITY;
ALTER TABLE live_tickets FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON token_keys TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY worker_all ON live_tickets TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON token_keys TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY api_tenant ON live_tickets TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));

-- +goose Down
DROP FUNCTION herald_redeem_ticket(bytea);
DROP TABLE live_tickets;
DROP TABLE token_keys;
