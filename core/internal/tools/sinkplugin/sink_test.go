package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func TestHoldFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holdFile := filepath.Join(dir, "hold")
	if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := New()
	descResp, err := s.Describe(context.Background(), sdk.DescribeRequest{})
	desc := descResp.Description
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sdk.CheckConfig(desc.Config, map[string]any{"hold_file": holdFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Configure(context.Background(), sdk.ConfigureRequest{Config: cfg}); err != nil {
		t.Fatal(err)
	}
	batch := []sdk.Delivery{{DeliveryID: "d1"}, {DeliveryID: "d2"}}
	type answer struct {
		res []sdk.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		resResp, err := s.Send(context.Background(), sdk.SendRequest{Deliveries: batch})
		res := resResp.Results
		done <- answer{res, err}
	}()
	var held HeldBatch
	testenv.Eventually(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(holdFile + ".held")
		return err == nil && json.Unmarshal(b, &held) == nil
	}, "the batch is announced as held")
	if held.PID != os.Getpid() || strings.Join(held.DeliveryIDs, ",") != "d1,d2" {
		t.Fatalf("held = %+v", held)
	}
	select {
	case a := <-done:
		t.Fatalf("Send returned while the hold file exists: %+v", a)
	default:
	}
	if err := os.Remove(holdFile); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || len(a.res) != 2 || a.res[0].Outcome != sdk.OutcomeSent {
		t.Fatalf("Send after release = %+v", a)
	}

	// A held call whose context ends is retryable and sends nothing.
	if err := os.WriteFile(holdFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if res, err := s.Send(ctx, sdk.SendRequest{Deliveries: batch}); !sdk.IsRetryable(err) || res.Results != nil {
		t.Fatalf("held Send past its deadline = %+v, %v; want a retryable error", res, err)
	}
}
