-- Every delivery row and every attempt row ran a foreign-key check (a
-- per-row lookup and key-share lock on the parent) on the hot path. Both
-- parents are guaranteed by construction: the relay writes a delivery in
-- the same transaction as its notification, and an attempt row is written
-- by the same statement that updates its delivery (RecordOutcomes joins
-- the insert to the updated rows). Without the constraints, old rows can
-- also be dropped by partition or in batches without cascading checks.

-- +goose Up
ALTER TABLE deliveries DROP CONSTRAINT deliveries_notification_id_fkey;
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_delivery_id_fkey;

-- +goose Down
ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (delivery_id);
ALTER TABLE deliveries ADD CONSTRAINT deliveries_notification_id_fkey
    FOREIGN KEY (notification_id) REFERENCES notifications (notification_id);
