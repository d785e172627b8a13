package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestEventsCancelRetriesALostDeadlock: `herald events cancel` whose
// transaction PostgreSQL aborts as a deadlock's victim (as with a digest
// flush before it locked in delivery_id order) runs it again and cancels
// the event's deliveries instead of failing.
func TestEventsCancelRetriesALostDeadlock(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	low, high := testenv.EventToCancel(t, db, "t", "e")
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var err error
	testenv.CancelLosesDeadlock(t, db, low, high, func() {
		root := NewRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"events", "cancel", "e", "--tenant", "t", "--config", cfg})
		err = root.ExecuteContext(context.Background())
	})
	if err != nil || !strings.Contains(out.String(), "deliveries: 2 cancelled, 0 in flight") {
		t.Fatalf("cancel that lost a deadlock once: %v\n%s", err, &out)
	}
}
