package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRetentionOfDeliveriesThroughTheCommands: retention.deliveries in
// the config file shows in `herald retention status` beside the months of
// deliveries, and `herald retention apply` drops a month of deliveries
// past it.
func TestRetentionOfDeliveriesThroughTheCommands(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	old := time.Now().UTC().AddDate(0, -5, 0)
	if _, err := db.Pool.Exec(ctx, `SELECT herald_ensure_partitions('deliveries', $1, $1)`, old); err != nil {
		t.Fatal(err)
	}
	oldMonth := "deliveries_y" + old.Format("2006") + "m" + old.Format("01")
	cfg := filepath.Join(t.TempDir(), "herald.hcl")
	if err := os.WriteFile(cfg, []byte("database { url = \""+db.URL+"\" }\nretention { deliveries = \"2160h\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		var out bytes.Buffer
		root := NewRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--config", cfg))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, &out)
		}
		return out.String()
	}
	status := run("retention", "status")
	for _, want := range []string{"deliveries: kept 2160h0m0s", oldMonth, "(due: next round)"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}
	if applied := run("retention", "apply"); !strings.Contains(applied, "dropped "+oldMonth) {
		t.Errorf("apply did not drop %s:\n%s", oldMonth, applied)
	}
	if status := run("retention", "status"); strings.Contains(status, oldMonth) {
		t.Errorf("%s still listed after apply:\n%s", oldMonth, status)
	}
}
