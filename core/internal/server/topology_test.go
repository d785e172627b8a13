package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/testenv"
)

func TestTopologyQueueType(t *testing.T) {
	t.Parallel()
	rs, err := rules.New(rules.Spec{Channels: []channel.Config{
		{Name: "EMAIL", Providers: []channel.Provider{{Plugin: "email"}}},
		{Name: "PUSH", Providers: []channel.Provider{{Plugin: "push"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		amqp broker.Config
		want []broker.Queue
	}{
		"default: classic queues per channel": {
			amqp: broker.Config{QueueType: broker.QueueClassic},
			want: []broker.Queue{{Name: "herald.email", Bindings: []string{"*.EMAIL"}}, {Name: "herald.push", Bindings: []string{"*.PUSH"}}},
		},
		"queue_type quorum: quorum queues per channel": {
			amqp: broker.Config{QueueType: broker.QueueQuorum},
			want: []broker.Queue{{Name: "herald.email", Bindings: []string{"*.EMAIL"}, Quorum: true}, {Name: "herald.push", Bindings: []string{"*.PUSH"}, Quorum: true}},
		},
		"configured queues: queue_type, or one queue's quorum": {
			amqp: broker.Config{QueueType: broker.QueueClassic, Queues: map[string]broker.QueueConfig{
				"a": {Bindings: []string{"*.EMAIL"}, Quorum: true},
				"b": {Bindings: []string{"*.PUSH"}},
			}},
			want: []broker.Queue{
				{Name: "a", Bindings: []string{"*.EMAIL"}, Quorum: true, Setting: "amqp.queue.a.quorum"},
				{Name: "b", Bindings: []string{"*.PUSH"}},
			},
		},
		"configured queues under queue_type quorum": {
			amqp: broker.Config{QueueType: broker.QueueQuorum, Queues: map[string]broker.QueueConfig{"b": {Bindings: []string{"*.PUSH"}}}},
			want: []broker.Queue{{Name: "b", Bindings: []string{"*.PUSH"}, Quorum: true}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := config.DefaultDaemon()
			tc.amqp.Exchange = "herald.deliveries"
			d.AMQP = tc.amqp
			got := server.Topology(d, rs)
			if diff := cmp.Diff(tc.want, got.Queues); diff != "" {
				t.Errorf("queues (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadinessNamesQueueTypeMismatch: a delivery queue the broker holds
// as classic while the config asks for quorum keeps the broker connection
// down; the admin readiness reason names the setting and the queue.
func TestReadinessNamesQueueTypeMismatch(t *testing.T) {
	t.Parallel()
	b := testenv.RabbitMQ(t)
	ch := testenv.AMQPChannel(t, b.URL)
	if _, err := ch.QueueDeclare("herald.email", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conn := broker.Dial(b.URL, broker.Topology{Exchange: "herald.test", Queues: []broker.Queue{{Name: "herald.email", Bindings: []string{"*.EMAIL"}, Quorum: true}}}, hclog.NewNullLogger())
	t.Cleanup(conn.Close)
	check := server.Readiness(nil, conn)
	want := []string{"broker: amqp.queue_type: queue herald.email exists with another type"}
	var got []string
	testenv.Eventually(t, 10*time.Second, func() bool {
		got = check(context.Background())
		return cmp.Equal(got, want)
	}, "readiness reasons %q, want %q", got, want)
}
