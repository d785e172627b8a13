-- The W3C trace context (traceparent and tracestate headers) an event came
-- with, from POST /v1/events or sdk/producer, is kept with the event; the
-- relay writes the context of its own span for the event onto each
-- delivery, so that a retry published later, or a message taken over by
-- another daemon, still continues the producer's trace into the plugin's
-- Send. NULL: the event came without one (and tracing was off).

-- +goose Up
ALTER TABLE event_outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text;
ALTER TABLE deliveries ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- +goose Down
ALTER TABLE deliveries DROP COLUMN traceparent, DROP COLUMN tracestate;
ALTER TABLE event_outbox DROP COLUMN traceparent, DROP COLUMN tracestate;
