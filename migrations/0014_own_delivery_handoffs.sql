-- A handoff row names the daemon that wrote it. Each daemon holds a
-- session-level advisory lock on its id (class 'hrld', see
-- delivery.Liveness) for as long as it runs; PostgreSQL drops the lock
-- the moment the daemon's session ends, which for a killed process is
-- when the kernel closes its socket. A handoff whose owner no longer holds
-- its lock is taken over at once (store.ClaimHandoffs) instead of after
-- due_at, the grace period (30 s + 10 s) that is left for rows without an
-- owner (written by older daemons) and for owners that live but never got
-- their confirms.

-- +goose Up
ALTER TABLE delivery_handoffs ADD COLUMN owner integer;

-- +goose Down
ALTER TABLE delivery_handoffs DROP COLUMN owner;
