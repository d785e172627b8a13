#!/usr/bin/env python3
"""A reservation and its Herald event in one transaction (psycopg 3).

Environment: DATABASE_URL (postgres://user:password@host:port/db),
HERALD_TENANT (demo), RESERVATION_ID (42), HERALD_ENQUEUE (herald_enqueue;
schema.name for a function in another schema).
Debian: apt-get install python3-psycopg
"""
import json
import os
import re

import psycopg

DATABASE_URL = os.environ["DATABASE_URL"]
TENANT = os.environ.get("HERALD_TENANT", "demo")
RESERVATION_ID = int(os.environ.get("RESERVATION_ID", "42"))
FUNCTION = os.environ.get("HERALD_ENQUEUE", "herald_enqueue")
if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?", FUNCTION):
    raise SystemExit(f"HERALD_ENQUEUE: {FUNCTION!r} is not a function name")

ENQUEUE = f"""SELECT outcome, id FROM {FUNCTION}(
    tenant_id => %s, event_id => %s, event_type => %s, payload => %s::jsonb,
    aggregate_type => 'reservation', aggregate_id => %s)"""

EVENT_ID = f"reservation-{RESERVATION_ID}-requested"
PAYLOAD = {"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}


def enqueue(conn):
    """Calls herald_enqueue in conn's transaction: ('new' | 'repeat' | 'conflict', id)."""
    return conn.execute(
        ENQUEUE,
        (TENANT, EVENT_ID, "RESERVATION_REQUESTED", json.dumps(PAYLOAD), str(RESERVATION_ID)),
    ).fetchone()


def reserve(conn, commit):
    """Writes the reservation and its event in one transaction."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO reservation (id, restaurant_id, customer_name, pax) VALUES (%s, %s, %s, %s)",
            (RESERVATION_ID, PAYLOAD["restaurant_id"], PAYLOAD["customer_name"], PAYLOAD["pax"]),
        )
        outcome, event = enqueue(conn)
        if not commit:
            raise psycopg.Rollback()  # leaves the block; nothing was written
    return outcome, event


with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
    outcome, _ = reserve(conn, commit=False)
    print(f"rollback: {outcome}")
    outcome, event = reserve(conn, commit=True)
    print(f"commit: {outcome} {event}")
    # The same event again (a retry after a lost COMMIT answer): a repeat.
    with conn.transaction():
        outcome, event = enqueue(conn)
    print(f"again: {outcome} {event}")
