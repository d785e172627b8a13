package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestDeclareQueueTypeMismatchNamesSettingAndQueue declares a queue with
// one type and then the topology with the other, both ways: the error
// names the setting, the queue and what to do.
func TestDeclareQueueTypeMismatchNamesSettingAndQueue(t *testing.T) {
	b := testenv.RabbitMQ(t)
	tests := map[string]struct {
		existing amqp.Table
		queue    broker.Queue
		want     []string
	}{
		"classic declared as quorum (amqp.queue_type)": {
			existing: nil,
			queue:    broker.Queue{Name: "herald.email", Bindings: []string{"*.EMAIL"}, Quorum: true},
			want:     []string{"amqp.queue_type: queue \"herald.email\" exists on the broker as a classic queue and cannot be declared as quorum", "rabbitmqctl delete_queue herald.email", "PRECONDITION_FAILED"},
		},
		"quorum declared as classic": {
			existing: amqp.Table{"x-queue-type": "quorum"},
			queue:    broker.Queue{Name: "herald.push", Bindings: []string{"*.PUSH"}},
			want:     []string{"amqp.queue_type: queue \"herald.push\" exists on the broker as a quorum queue and cannot be declared as classic"},
		},
		"classic declared as quorum (per-queue setting)": {
			existing: nil,
			queue:    broker.Queue{Name: "orders", Bindings: []string{"*.SMS"}, Quorum: true, Setting: "amqp.queue.orders.quorum"},
			want:     []string{"amqp.queue.orders.quorum: queue \"orders\""},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ch := testenv.AMQPChannel(t, b.URL)
			if _, err := ch.QueueDeclare(tc.queue.Name, true, false, false, false, tc.existing); err != nil {
				t.Fatal(err)
			}
			err := broker.Topology{Exchange: "herald.test", Queues: []broker.Queue{tc.queue}}.Declare(ch)
			var qte *broker.QueueTypeError
			if !errors.As(err, &qte) {
				t.Fatalf("Declare: %v, want a *broker.QueueTypeError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestDeclareSameTypeAgain shows that a topology declares again over
// itself: an existing classic queue (declared before queue types were an
// option) and an existing quorum queue both match.
func TestDeclareSameTypeAgain(t *testing.T) {
	b := testenv.RabbitMQ(t)
	ch := testenv.AMQPChannel(t, b.URL)
	topo := broker.Topology{Exchange: "herald.test", Queues: []broker.Queue{
		{Name: "herald.email", Bindings: []string{"*.EMAIL"}},
		{Name: "herald.push", Bindings: []string{"*.PUSH"}, Quorum: true},
	}}
	for i := range 2 {
		if err := topo.Declare(ch); err != nil {
			t.Fatalf("declare #%d: %v", i+1, err)
		}
	}
	for q, typ := range map[string]amqp.Table{"herald.email": nil, "herald.push": {"x-queue-type": "quorum"}} {
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, typ); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestConnLogsQueueTypeMismatch runs a Conn against a vhost whose queue
// has the other type: it stays unconnected (deliveries wait in the
// database) and logs the error naming the setting and the queue.
func TestConnLogsQueueTypeMismatch(t *testing.T) {
	b := testenv.RabbitMQ(t)
	ch := testenv.AMQPChannel(t, b.URL)
	if _, err := ch.QueueDeclare("herald.email", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	conn := broker.Dial(b.URL, broker.Topology{Exchange: "herald.test", Queues: []broker.Queue{{Name: "herald.email", Bindings: []string{"*.EMAIL"}, Quorum: true}}}, log)
	defer conn.Close()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), `[ERROR] broker: broker queue type mismatch`) &&
			strings.Contains(logs.String(), `amqp.queue_type: queue \"herald.email\" exists on the broker as a classic queue`)
	}, "queue type error logged; log:\n%s", logs)
	if conn.Connected() {
		t.Fatal("connected although the topology could not be declared")
	}
	if qte := conn.QueueTypeMismatch(); qte == nil || qte.Queue != "herald.email" || qte.Setting != "amqp.queue_type" || qte.Want != "quorum" {
		t.Fatalf("QueueTypeMismatch() = %+v", qte)
	}
}

// TestDialNodesSkipsDeadNode gives the Conn a dead node first: it connects
// to the next one without waiting for a backoff, and names the nodes (not
// the credentials) in its log.
func TestDialNodesSkipsDeadNode(t *testing.T) {
	b := testenv.RabbitMQ(t)
	dead := fmt.Sprintf("amqp://guest:secretpw@127.0.0.1:%d/", testenv.FreePort(t))
	logs := &testenv.LogBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	conn := broker.DialNodes([]string{dead, b.URL}, nil, broker.Topology{Exchange: "herald.test"}, log)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := conn.Connection(ctx)
	if err != nil {
		t.Fatalf("no connection: %v\n%s", err, logs)
	}
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RemoteAddr().String(); got != u.Host {
		t.Fatalf("connected to %s, want the live node %s", got, u.Host)
	}
	// The connection is handed out before its log line is written.
	testenv.Eventually(t, 5*time.Second, func() bool {
		out := logs.String()
		return strings.Contains(out, "broker unavailable") && strings.Contains(out, "node="+u.Host) && strings.Contains(out, "broker connected: node="+u.Host)
	}, "log names the failed and the connected node:\n%s", logs)
	if out := logs.String(); strings.Contains(out, "secretpw") {
		t.Fatalf("log holds a password:\n%s", out)
	}
}
