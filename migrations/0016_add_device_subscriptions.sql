-- recipient_devices gains what a web push subscription needs beside its
-- endpoint (kept in token, the row's key): the browser's public key and
-- authentication secret (RFC 8291), both base64url. platform holds the
-- device's kind: fcm, apns, webpush, or '' for tokens imported as
-- device_tokens before kinds existed. Devices the provider reports gone
-- are deleted (store.RemoveDevices).

-- +goose Up
ALTER TABLE recipient_devices ADD COLUMN p256dh text NOT NULL DEFAULT '',
                              ADD COLUMN auth   text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE recipient_devices DROP COLUMN p256dh, DROP COLUMN auth;
