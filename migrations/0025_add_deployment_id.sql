-- A deployment id, made once per database: the default token audience
-- (auth.audience, "herald:<id>") is derived from it, so that the web inbox
-- and the API of one deployment refuse user tokens minted for another,
-- even when the two share a tenant's signing key or its issuer (issue 24).
-- It is not secret (every token carries it) but, like the cursor key,
-- every daemon of the database shares it, so it lives in herald_secrets,
-- which only the pipeline's role reads.

-- +goose Up
-- The owner writes the table only while row-level security is not forced
-- (it need not be a member of herald_worker).
ALTER TABLE herald_secrets NO FORCE ROW LEVEL SECURITY;
INSERT INTO herald_secrets (name, secret)
    VALUES ('deployment_id', decode(replace(gen_random_uuid()::text, '-', ''), 'hex'))
    ON CONFLICT (name) DO NOTHING;
ALTER TABLE herald_secrets FORCE ROW LEVEL SECURITY;

-- +goose Down
ALTER TABLE herald_secrets NO FORCE ROW LEVEL SECURITY;
DELETE FROM herald_secrets WHERE name = 'deployment_id';
ALTER TABLE herald_secrets FORCE ROW LEVEL SECURITY;
