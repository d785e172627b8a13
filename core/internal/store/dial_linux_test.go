package store_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestPoolConnectionsBoundADeadPath checks the bounds that let herald
// notice a silent network path in seconds (the chaos suite's partitions
// measure the effect): every TCP connection of a pool has
// TCP_USER_TIMEOUT set, and a URL without connect_timeout gets
// store.ConnectTimeout while one with it keeps its own.
func TestPoolConnectionsBoundADeadPath(t *testing.T) {
	db := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	tests := map[string]struct {
		url         string
		wantConnect time.Duration
	}{
		"no connect_timeout in the URL": {db.URL, store.ConnectTimeout},
		"connect_timeout=3":             {db.URL + sep + "connect_timeout=3", 3 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pool, err := store.NewPoolWith(ctx, tc.url, store.PoolOptions{MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if got := pool.Config().ConnConfig.ConnectTimeout; got != tc.wantConnect {
				t.Errorf("ConnectTimeout = %s, want %s", got, tc.wantConnect)
			}
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			tcp, ok := c.Conn().PgConn().Conn().(*net.TCPConn)
			if !ok {
				t.Fatalf("the pool's connection is a %T, want a TCP connection (HERALD_PG_ADMIN_URL must name a TCP host)", c.Conn().PgConn().Conn())
			}
			raw, err := tcp.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var got int
			var gerr error
			if err := raw.Control(func(fd uintptr) {
				got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
			}); err != nil {
				t.Fatal(err)
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			if want := int(store.TCPUserTimeout.Milliseconds()); got != want {
				t.Errorf("TCP_USER_TIMEOUT = %d ms, want %d ms", got, want)
			}
		})
	}
}
