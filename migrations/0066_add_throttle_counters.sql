-- Throttles (issue 28): an event rule may let at most `limit`
-- notifications per `per` reach a recipient on a channel (per throttle
-- key); what goes over is written SKIPPED with last_error "throttled: N per
-- W". throttle_counters counts them per fixed window (window_start is the
-- time truncated to the window's length, so every daemon agrees on it),
-- updated in the relay's own transaction: the row lock orders concurrent
-- relays, so two daemons never let more than the limit through. Rows of
-- windows that ended are deleted by the digest flusher's stage.

-- +goose Up
CREATE TABLE throttle_counters (
    tenant_id    text NOT NULL,
    user_id      text NOT NULL,
    channel      text NOT NULL,
    event_type   text NOT NULL,
    throttle_key text NOT NULL CONSTRAINT throttle_counters_key CHECK (throttle_key <> '' AND octet_length(throttle_key) <= 1000),
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    sent         integer NOT NULL CHECK (sent >= 0),
    PRIMARY KEY (tenant_id, user_id, channel, event_type, throttle_key, window_start)
);
CREATE INDEX throttle_counters_end ON throttle_counters (window_end);

GRANT SELECT, INSERT, UPDATE, DELETE ON throttle_counters TO herald_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON throttle_counters TO herald_api;
GRANT SELECT ON throttle_counters TO herald_admin;
ALTER TABLE throttle_counters ENABLE ROW LEVEL SECURITY;
ALTER TABLE throttle_counters FORCE ROW LEVEL SECURITY;
CREATE POLICY worker_all ON throttle_counters TO herald_worker USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON throttle_counters TO herald_api
    USING (tenant_id = current_setting('herald.tenant', true)) WITH CHECK (tenant_id = current_setting('herald.tenant', true));
CREATE POLICY admin_read ON throttle_counters FOR SELECT TO herald_admin USING (true);

-- +goose Down
DROP TABLE throttle_counters;
