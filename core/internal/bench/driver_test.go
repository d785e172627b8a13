package bench

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestRunSmallScenario runs the whole benchmark path at a tiny size: a
// database of its own, a real herald serve with the sink plugin, producers
// through sdk/producer, and the exactly-once check.
func TestRunSmallScenario(t *testing.T) {
	broker := testenv.RabbitMQ(t)
	pluginDir := testenv.PluginBinaries(t, "sink")
	herald := testenv.BuildHerald(t, t.TempDir())
	env := Env{
		AdminDatabaseURL: testenv.Env("HERALD_PG_ADMIN_URL", testenv.DefaultPGAdminURL),
		AMQPURL:          broker.URL,
		Herald:           herald,
		PluginDir:        pluginDir,
		Log:              t.Logf,
	}
	sc := Scenario{Name: "small", Events: 40, Recipients: 3, Channels: 2, Producers: 3, Serve: 1, Duration: 2 * time.Minute}
	res, err := Run(context.Background(), env, sc)
	if err != nil {
		t.Fatal(err)
	}
	const want = 40 * 3 * 2
	if !res.Check.OK || res.Expected != want || res.Check.Sent != want || res.Check.SinkRecords != want {
		t.Fatalf("check: %+v (expected %d)", res.Check, res.Expected)
	}
	if res.EventsEnqueued != 40 || res.Latency.Count != want || res.DeliveriesPerS <= 0 || res.DaemonPeakBytes <= 0 {
		t.Fatalf("result: %d events, %d latencies, %.0f deliveries/s, daemon RSS %d",
			res.EventsEnqueued, res.Latency.Count, res.DeliveriesPerS, res.DaemonPeakBytes)
	}
	if res.ToFanout.Count != want || res.ToRecord.Count != want {
		t.Fatalf("stage latencies: %+v %+v", res.ToFanout, res.ToRecord)
	}
	rep := Report{Runs: []Result{res}}
	rep.Evaluate()
	if !rep.OK {
		t.Fatalf("report not OK: %+v", rep)
	}
}
