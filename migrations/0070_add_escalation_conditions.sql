-- Escalation when unread (issue 28): a channel of an event rule may wait
-- (`escalate "EMAIL" { after = "10m" unless = ["read", "acted"] }`). The
-- relay writes its delivery WAITING with hold = 'escalation' (0057) and
-- next_attempt_at = when it is due; escalate_unless records what calls it
-- off, so that the inbox (a read, an action) and the poller that releases
-- due escalations decide from the row alone, whatever the rules say by
-- then. It stays on the row once the delivery is released or cancelled:
-- it marks the delivery as an escalation in GET /v1/events/{id}. NULL for
-- every delivery that is not an escalation.

-- +goose Up
ALTER TABLE deliveries ADD COLUMN escalate_unless text[]
    CHECK (escalate_unless <@ ARRAY['read', 'acted']::text[] AND cardinality(escalate_unless) > 0);

-- +goose Down
ALTER TABLE deliveries DROP COLUMN escalate_unless;
