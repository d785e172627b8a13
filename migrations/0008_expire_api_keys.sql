-- API keys may expire (a rotated key keeps working for a grace period, a
-- key can be made for a limited time); herald_authenticate refuses an
-- expired key exactly as a revoked one.

-- +goose Up
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_authenticate(p_hash bytea)
RETURNS TABLE (key_id text, tenant_id text, project_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT k.key_id, k.tenant_id, k.project_id FROM public.api_keys k
    WHERE k.key_hash = p_hash AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION herald_authenticate(p_hash bytea)
RETURNS TABLE (key_id text, tenant_id text, project_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT k.key_id, k.tenant_id, k.project_id FROM public.api_keys k
    WHERE k.key_hash = p_hash AND k.revoked_at IS NULL
$$;
-- +goose StatementEnd
ALTER TABLE api_keys DROP COLUMN expires_at;
