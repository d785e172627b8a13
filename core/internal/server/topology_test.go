package server_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/server"
)

func TestTopologyQueueType(t *testing.T) {
	t.Parallel()
	rs, err := rules.New(rules.Spec{Channels: []rules.ChannelConfig{
		{Name: "EMAIL", Providers: []rules.Provider{{Plugin: "email"}}},
		{Name: "PUSH", Providers: []rules.Provider{{Plugin: "push"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		amqp config.AMQPConfig
		want []broker.Queue
	}{
		"default: classic queues per channel": {
			amqp: config.AMQPConfig{QueueType: config.QueueClassic},
			want: []broker.Queue{{Name: "herald.email", Bindings: []string{"*.EMAIL"}}, {Name: "herald.push", Bindings: []string{"*.PUSH"}}},
		},
		"queue_type quorum: quorum queues per channel": {
			amqp: config.AMQPConfig{QueueType: config.QueueQuorum},
			want: []broker.Queue{{Name: "herald.email", Bindings: []string{"*.EMAIL"}, Quorum: true}, {Name: "herald.push", Bindings: []string{"*.PUSH"}, Quorum: true}},
		},
		"configured queues: queue_type, or one queue's quorum": {
			amqp: config.AMQPConfig{QueueType: config.QueueClassic, Queues: map[string]config.QueueConfig{
				"a": {Bindings: []string{"*.EMAIL"}, Quorum: true},
				"b": {Bindings: []string{"*.PUSH"}},
			}},
			want: []broker.Queue{
				{Name: "a", Bindings: []string{"*.EMAIL"}, Quorum: true, Setting: "amqp.queue.a.quorum"},
				{Name: "b", Bindings: []string{"*.PUSH"}},
			},
		},
		"configured queues under queue_type quorum": {
			amqp: config.AMQPConfig{QueueType: config.QueueQuorum, Queues: map[string]config.QueueConfig{"b": {Bindings: []string{"*.PUSH"}}}},
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
