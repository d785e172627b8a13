// A reservation and its Herald event in one transaction (node-postgres).
//
// Environment: DATABASE_URL (postgres://user:password@host:port/db),
// HERALD_TENANT (demo), RESERVATION_ID (42), HERALD_ENQUEUE (herald_enqueue;
// schema.name for a function in another schema).
// Debian: apt-get install nodejs node-pg
'use strict';
const { Client } = require('pg');

const tenant = process.env.HERALD_TENANT || 'demo';
const reservationID = Number(process.env.RESERVATION_ID || '42');
const fn = process.env.HERALD_ENQUEUE || 'herald_enqueue';
if (!/^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/.test(fn)) {
  throw new Error(`HERALD_ENQUEUE: ${JSON.stringify(fn)} is not a function name`);
}

const enqueueSQL = `SELECT outcome, id FROM ${fn}(
    tenant_id => $1, event_id => $2, event_type => $3, payload => $4::jsonb,
    aggregate_type => 'reservation', aggregate_id => $5)`;
const eventID = `reservation-${reservationID}-requested`;
const payload = { restaurant_id: 5, customer_name: 'Rossi', pax: 4 };

// enqueue calls herald_enqueue in the client's transaction:
// { outcome: 'new' | 'repeat' | 'conflict', id }.
async function enqueue(client) {
  const res = await client.query(enqueueSQL,
    [tenant, eventID, 'RESERVATION_REQUESTED', JSON.stringify(payload), String(reservationID)]);
  return res.rows[0];
}

// reserve writes the reservation and its event in one transaction.
async function reserve(client, commit) {
  await client.query('BEGIN');
  try {
    await client.query(
      'INSERT INTO reservation (id, restaurant_id, customer_name, pax) VALUES ($1, $2, $3, $4)',
      [reservationID, payload.restaurant_id, payload.customer_name, payload.pax]);
    const event = await enqueue(client);
    await client.query(commit ? 'COMMIT' : 'ROLLBACK');
    return event;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
}

async function main() {
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    let event = await reserve(client, false);
    console.log(`rollback: ${event.outcome}`);
    event = await reserve(client, true);
    console.log(`commit: ${event.outcome} ${event.id}`);
    // The same event again (a retry after a lost COMMIT answer): a repeat.
    await client.query('BEGIN');
    event = await enqueue(client);
    await client.query('COMMIT');
    console.log(`again: ${event.outcome} ${event.id}`);
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
