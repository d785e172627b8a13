-- Fewer writes per delivery (issue 30, item 2): a delivery sent on its
-- first try logs no delivery_attempts row. Every fact of that attempt is
-- already on the delivery row the outcome updates (provider, provider
-- message id, attempts = 1, status SENT, sent_at = when it finished),
-- except when it started: attempt_started_at keeps that, and is set only
-- on such a delivery (store.RecordOutcomes), so it also marks the rows
-- whose first attempt is not in delivery_attempts. The column is not
-- indexed: the outcome's update stays HOT (migration 0017).
--
-- delivery_attempts stays complete for everything else: every retryable,
-- rate-limited, permanent, error or lost attempt, and the final success of
-- a delivery that needed more than one try (attempt 2 or later) is logged
-- as before, so a retried delivery's history is all in the table.
--
-- delivery_attempt_log is the attempt history every reader uses: the
-- logged attempts plus, for each delivery with attempt_started_at, its
-- first-try success rebuilt from the row (synthesized = true). It runs
-- with the caller's rights (security_invoker), so row-level security
-- applies to the API's role as on the tables.
--
-- Retention holds for the rebuilt attempts as for the logged ones:
-- attempt_log_floors keeps, per scope ('' for every tenant, else a tenant
-- id), the creation time of the oldest delivery whose attempts the log
-- still holds. Dropping months of delivery_attempts (store.ApplyRetention)
-- raises the '' floor to the end of the newest month dropped; a tenant's
-- own retention.tenant.T.delivery_attempts sweep raises T's to its cutoff
-- (store.ApplySweeps). The log rebuilds no attempt of a delivery created
-- before its floors, so no first-try success outlives the attempts that
-- retention deletes, while the delivery row itself lives on under
-- retention.deliveries as before.

-- +goose Up
ALTER TABLE deliveries ADD COLUMN attempt_started_at timestamptz;

CREATE TABLE attempt_log_floors (
    scope text PRIMARY KEY,
    since timestamptz NOT NULL
);
ALTER TABLE attempt_log_floors ENABLE ROW LEVEL SECURITY;
ALTER TABLE attempt_log_floors FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON attempt_log_floors TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON attempt_log_floors FOR SELECT TO herald_api
    USING (scope IN ('', current_setting('herald.tenant', true)));
CREATE POLICY admin_read ON attempt_log_floors FOR SELECT TO herald_admin USING (true);
GRANT SELECT, INSERT, UPDATE ON attempt_log_floors TO herald_worker;
GRANT SELECT ON attempt_log_floors TO herald_api, herald_admin;

CREATE VIEW delivery_attempt_log WITH (security_invoker = true) AS
    SELECT a.tenant_id, a.delivery_id, a.attempt, a.outcome, a.provider, a.provider_message_id, a.error,
        a.retry_after_ms, a.started_at, a.finished_at, a.delivery_created_at, false AS synthesized
    FROM delivery_attempts a
    UNION ALL
    SELECT d.tenant_id, d.delivery_id, 1, 'sent', d.provider, d.provider_message_id, '',
        0::bigint, d.attempt_started_at, d.sent_at, d.created_at, true
    FROM deliveries d
    WHERE d.attempt_started_at IS NOT NULL
        AND d.created_at >= coalesce((SELECT max(f.since) FROM attempt_log_floors f WHERE f.scope IN ('', d.tenant_id)), '-infinity');

GRANT SELECT ON delivery_attempt_log TO herald_api, herald_worker, herald_admin;

-- +goose Down
DROP VIEW delivery_attempt_log;
-- The first-try successes go back into the log before the column goes.
INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, outcome, provider, provider_message_id, started_at, finished_at,
    delivery_created_at)
SELECT tenant_id, delivery_id, 1, 'sent', provider, provider_message_id, attempt_started_at, coalesce(sent_at, attempt_started_at), created_at
FROM deliveries d WHERE attempt_started_at IS NOT NULL
    AND d.created_at >= coalesce((SELECT max(f.since) FROM attempt_log_floors f WHERE f.scope IN ('', d.tenant_id)), '-infinity')
ON CONFLICT (delivery_id, attempt, delivery_created_at) DO NOTHING;
DROP TABLE attempt_log_floors;
ALTER TABLE deliveries DROP COLUMN attempt_started_at;
