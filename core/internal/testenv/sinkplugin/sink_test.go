package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/plugintest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testenv.PluginBinaries(t, "sink"), "herald-plugin-sink")
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec.jsonl")
	down := filepath.Join(dir, "down")
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plugintest.Run(t, bin, plugintest.Features{
		Config:      map[string]any{"record_file": rec},
		ChannelType: sdk.AnyChannel,
		BadConfigs: []plugintest.BadConfig{
			{Name: "negative delay", Config: map[string]any{"delay": "-1s"}, Field: "delay"},
		},
		FailingConfig: map[string]any{"record_file": rec, "fail_file": down},
		ProviderSeen: func(t testing.TB) map[string]string {
			f, err := os.Open(rec)
			if err != nil {
				t.Fatalf("record file: %v", err)
			}
			defer f.Close()
			seen := map[string]string{}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var r Record
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatalf("record %q: %v", sc.Text(), err)
				}
				if r.Outcome == "sent" {
					seen[r.DeliveryID] = r.IdempotencyKey
				}
			}
			return seen
		},
	})
}
