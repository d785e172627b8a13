package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Herald's connections to PostgreSQL detect a dead network path in
// seconds, not minutes. Without these bounds a query in flight when the
// path goes silent (a partition, a server host that vanished) waits on
// TCP's retransmission backoff: measured in the chaos suite
// (core/integration/chaos_netem_test.go), herald then stayed silent
// through a 30 s partition and its backlog was SENT only 25 s after the
// network came back, when the connection's next retransmission happened to
// go out.
const (
	// TCPUserTimeout is how long data sent to PostgreSQL may stay
	// unacknowledged before the kernel closes the connection (Linux's
	// TCP_USER_TIMEOUT): the statement fails, the error is logged, and the
	// pool dials again. A healthy server acknowledges within a round trip
	// even while it works on a long query.
	TCPUserTimeout = 10 * time.Second
	// ConnectTimeout bounds a connection attempt (TCP, TLS, startup and
	// authentication) when the URL sets no connect_timeout, so a dial into
	// a partition is retried instead of waiting on SYN backoff.
	ConnectTimeout = 10 * time.Second
	// keepAlive is pgconn's own default keep-alive period.
	keepAlive = 5 * time.Minute
)

// boundDial sets the dial bounds above on pc.
func boundDial(pc *pgxpool.Config) {
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	pc.ConnConfig.DialFunc = dialer().DialContext
}
