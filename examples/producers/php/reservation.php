<?php
// A reservation and its Herald event in one transaction (PDO).
//
// Environment: DATABASE_URL (postgres://user:password@host:port/db),
// HERALD_TENANT (demo), RESERVATION_ID (42), HERALD_ENQUEUE (herald_enqueue;
// schema.name for a function in another schema).
// Debian: apt-get install php-cli php-pgsql

$tenant = getenv('HERALD_TENANT') ?: 'demo';
$reservationId = (int) (getenv('RESERVATION_ID') ?: 42);
$function = getenv('HERALD_ENQUEUE') ?: 'herald_enqueue';
if (!preg_match('/^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/D', $function)) {
    throw new InvalidArgumentException("HERALD_ENQUEUE: \"$function\" is not a function name");
}
$eventId = "reservation-$reservationId-requested";
$payload = ['restaurant_id' => 5, 'customer_name' => 'Rossi', 'pax' => 4];

// enqueue calls herald_enqueue in $pdo's transaction:
// ['outcome' => 'new' | 'repeat' | 'conflict', 'id' => ...].
function enqueue(PDO $pdo): array
{
    global $tenant, $reservationId, $function, $eventId, $payload;
    $st = $pdo->prepare("SELECT outcome, id FROM $function(tenant_id => ?, event_id => ?, event_type => ?,
        payload => CAST(? AS jsonb), aggregate_type => 'reservation', aggregate_id => ?)");
    $st->execute([$tenant, $eventId, 'RESERVATION_REQUESTED', json_encode($payload), (string) $reservationId]);
    return $st->fetch(PDO::FETCH_ASSOC);
}

// reserve writes the reservation and its event in one transaction.
function reserve(PDO $pdo, bool $commit): array
{
    global $reservationId, $payload;
    $pdo->beginTransaction();
    try {
        $pdo->prepare('INSERT INTO reservation (id, restaurant_id, customer_name, pax) VALUES (?, ?, ?, ?)')
            ->execute([$reservationId, $payload['restaurant_id'], $payload['customer_name'], $payload['pax']]);
        $event = enqueue($pdo);
        $commit ? $pdo->commit() : $pdo->rollBack();
        return $event;
    } catch (Throwable $e) {
        $pdo->rollBack();
        throw $e;
    }
}

// connect turns postgres://user:password@host:port/db?sslmode=... into a PDO DSN.
function connect(string $url): PDO
{
    $u = parse_url($url);
    parse_str($u['query'] ?? '', $query);
    $dsn = sprintf('pgsql:host=%s;port=%d;dbname=%s', $u['host'], $u['port'] ?? 5432, ltrim($u['path'], '/'));
    if (isset($query['sslmode'])) {
        $dsn .= ';sslmode=' . $query['sslmode'];
    }
    return new PDO($dsn, urldecode($u['user'] ?? ''), urldecode($u['pass'] ?? ''),
        [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
}

$pdo = connect(getenv('DATABASE_URL'));
$event = reserve($pdo, false);
echo "rollback: {$event['outcome']}\n";
$event = reserve($pdo, true);
echo "commit: {$event['outcome']} {$event['id']}\n";
// The same event again (a retry after a lost COMMIT answer): a repeat.
$pdo->beginTransaction();
$event = enqueue($pdo);
$pdo->commit();
echo "again: {$event['outcome']} {$event['id']}\n";
