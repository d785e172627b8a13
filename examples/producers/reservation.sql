-- The business table of the examples: a service's own table, in the same
-- database as herald_enqueue (Herald's, or the service's own database with
-- `herald outbox install`). The login the examples use needs INSERT and
-- SELECT on it, and EXECUTE on herald_enqueue.
CREATE TABLE reservation (
    id            bigint PRIMARY KEY,
    restaurant_id bigint NOT NULL,
    customer_name text   NOT NULL,
    pax           int    NOT NULL CHECK (pax > 0)
);
