-- +goose Up
CREATE TABLE tenants (
    tenant_id  text PRIMARY KEY,
    name       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    key_id     text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants(tenant_id),
    name       text NOT NULL DEFAULT '',
    key_hash   bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- event_outbox is the transactional outbox producers write to.
CREATE TABLE event_outbox (
    id             bigserial PRIMARY KEY,
    tenant_id      text NOT NULL,
    event_id       text NOT NULL,
    event_type     text NOT NULL,
    aggregate_type text NOT NULL DEFAULT '',
    aggregate_id   text NOT NULL DEFAULT '',
    payload        jsonb NOT NULL DEFAULT '{}',
    status         text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PROCESSED', 'FAILED')),
    attempts       int NOT NULL DEFAULT 0,
    last_error     text NOT NULL DEFAULT '',
    available_at   timestamptz NOT NULL DEFAULT now(),
    created_at     timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz,
    UNIQUE (tenant_id, event_id)
);
CREATE INDEX event_outbox_pending ON event_outbox (available_at, id) WHERE status = 'PENDING';

-- +goose StatementBegin
CREATE FUNCTION herald_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER event_outbox_notify AFTER INSERT ON event_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION herald_notify_event();

CREATE TABLE recipients (
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    user_type   text NOT NULL,
    email       text NOT NULL DEFAULT '',
    phone       text NOT NULL DEFAULT '',
    locale      text NOT NULL DEFAULT '',
    time_zone   text NOT NULL DEFAULT '',
    active      boolean NOT NULL DEFAULT true,
    quiet_start text NOT NULL DEFAULT '',
    quiet_end   text NOT NULL DEFAULT '',
    attributes  jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);
CREATE INDEX recipients_by_type ON recipients (tenant_id, user_type) WHERE active;

CREATE TABLE recipient_devices (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    token      text NOT NULL,
    platform   text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, token)
);

CREATE TABLE groups (
    tenant_id      text NOT NULL,
    group_key      text NOT NULL,
    group_type     text NOT NULL,
    max_recipients int NOT NULL DEFAULT 0,
    quiet_start    text NOT NULL DEFAULT '',
    quiet_end      text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, group_key)
);

CREATE TABLE group_members (
    tenant_id text NOT NULL,
    group_key text NOT NULL,
    user_id   text NOT NULL,
    role      text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, group_key, user_id)
);

-- event_type '' means every event type; a row for the event type wins.
CREATE TABLE user_preferences (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    event_type text NOT NULL DEFAULT '',
    channel    text NOT NULL,
    enabled    boolean NOT NULL,
    PRIMARY KEY (tenant_id, user_id, event_type, channel)
);

CREATE TABLE group_settings (
    tenant_id  text NOT NULL,
    group_key  text NOT NULL,
    event_type text NOT NULL DEFAULT '',
    channel    text NOT NULL,
    enabled    boolean NOT NULL,
    PRIMARY KEY (tenant_id, group_key, event_type, channel)
);

-- notifications are inbox rows: one per event and user.
CREATE TABLE notifications (
    notification_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    event_id        text NOT NULL,
    user_id         text NOT NULL,
    event_type      text NOT NULL,
    title           text NOT NULL DEFAULT '',
    body            text NOT NULL DEFAULT '',
    data            jsonb NOT NULL DEFAULT '{}',
    severity        text NOT NULL DEFAULT 'info',
    share_key       text,
    read_at         timestamptz,
    archived_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, event_id, user_id)
);
CREATE INDEX notifications_inbox ON notifications (tenant_id, user_id, created_at DESC, notification_id DESC);

CREATE TABLE notification_counters (
    tenant_id text NOT NULL,
    user_id   text NOT NULL,
    unread    int NOT NULL DEFAULT 0 CHECK (unread >= 0),
    PRIMARY KEY (tenant_id, user_id)
);

CREATE TABLE notification_actions (
    tenant_id       text NOT NULL,
    share_key       text NOT NULL,
    notification_id uuid NOT NULL,
    user_id         text NOT NULL,
    action          text NOT NULL,
    acted_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, share_key)
);

-- deliveries is the notification outbox: one row per event, user and channel.
-- Status moves only forward: PENDING -> PUBLISHED -> SENDING -> SENT | RETRY | FAILED,
-- RETRY -> PUBLISHED, DEFERRED -> PENDING.
CREATE TABLE deliveries (
    delivery_id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id           text NOT NULL,
    notification_id     uuid NOT NULL REFERENCES notifications(notification_id),
    event_id            text NOT NULL,
    event_type          text NOT NULL,
    user_id             text NOT NULL,
    user_type           text NOT NULL,
    channel             text NOT NULL,
    severity            text NOT NULL DEFAULT 'info',
    status              text NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('DEFERRED', 'PENDING', 'PUBLISHED', 'SENDING', 'SENT', 'RETRY', 'FAILED')),
    best_effort         boolean NOT NULL DEFAULT false,
    attempts            int NOT NULL DEFAULT 0,
    max_attempts        int NOT NULL DEFAULT 1,
    next_attempt_at     timestamptz NOT NULL DEFAULT now(),
    lease_until         timestamptz,
    recipient           jsonb NOT NULL DEFAULT '{}',
    content             jsonb NOT NULL DEFAULT '{}',
    provider            text NOT NULL DEFAULT '',
    provider_message_id text NOT NULL DEFAULT '',
    last_error          text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    UNIQUE (tenant_id, event_id, user_id, channel)
);
CREATE INDEX deliveries_pending ON deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status IN ('RETRY', 'DEFERRED');
CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE status = 'SENDING';
CREATE INDEX deliveries_by_event ON deliveries (tenant_id, event_id);

-- +goose StatementBegin
CREATE FUNCTION herald_notify_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_deliveries', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER deliveries_notify AFTER INSERT ON deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION herald_notify_delivery();

-- delivery_attempts is the audit log: one row per attempt of a delivery.
CREATE TABLE delivery_attempts (
    tenant_id           text NOT NULL,
    delivery_id         uuid NOT NULL REFERENCES deliveries(delivery_id),
    attempt             int NOT NULL,
    outcome             text NOT NULL,
    provider            text NOT NULL DEFAULT '',
    provider_message_id text NOT NULL DEFAULT '',
    error               text NOT NULL DEFAULT '',
    retry_after_ms      bigint NOT NULL DEFAULT 0,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (delivery_id, attempt)
);

-- +goose Down
DROP TABLE delivery_attempts;
DROP TRIGGER deliveries_notify ON deliveries;
DROP FUNCTION herald_notify_delivery();
DROP TABLE deliveries;
DROP TABLE notification_actions;
DROP TABLE notification_counters;
DROP TABLE notifications;
DROP TABLE group_settings;
DROP TABLE user_preferences;
DROP TABLE group_members;
DROP TABLE groups;
DROP TABLE recipient_devices;
DROP TABLE recipients;
DROP TRIGGER event_outbox_notify ON event_outbox;
DROP FUNCTION herald_notify_event();
DROP TABLE event_outbox;
DROP TABLE api_keys;
DROP TABLE tenants;
