//go:build chaos

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestChaosClusterNodeLoss runs herald serve against a three-node RabbitMQ
// cluster of the test's own (amqp.urls with the three nodes, queue_type
// quorum) under a steady load of 20 events/s (180 deliveries/s), and takes
// away the node herald is connected to twice: first with SIGKILL (a crash:
// the node also led every queue, since quorum queues are led from the node
// that declared them), then, once the first is back, the next node with
// rabbitmqctl stop (an orderly shutdown). Each time deliveries carry on
// through another node without a daemon restart; the stopped node is
// started again and rejoins the cluster, and the quorum queues count it as
// an online member again. At the end every expected delivery is SENT
// exactly once in the database; what the provider (the sink plugin)
// received twice is counted and reported.
func TestChaosClusterNodeLoss(t *testing.T) {
	cluster := testenv.PrivateRabbitCluster(t, 3)
	e := newClusterEnv(t, cluster)
	d := e.start()
	pid := d.cmd.Process.Pid

	first := e.connectedNode(d, cluster, 30*time.Second)
	if first != 0 {
		t.Fatalf("herald connected to node %d first, want node 1 (amqp.urls order)", first+1)
	}
	e.waitQuorumQueues(cluster, cluster.Nodes[1], 30*time.Second)

	// Traffic runs until halted below: two losses, each with up to a
	// minute for the node to rejoin, can outlast 2,000 events at this
	// pace on a loaded machine (it did: 2,000 were out before the second
	// rejoin's wait for 20 more). The cap only bounds a run gone wrong.
	tr := e.startTraffic("cl", 50*time.Millisecond, 8000)
	tr.waitFor(40, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`) >= 20*deliveriesPerEvent
	}, "deliveries flowing before the first node loss (now: %s)", e.statusSummary())

	type loss struct {
		how  string
		stop func(*testenv.ClusterNode)
	}
	losses := []loss{
		{"SIGKILL", (*testenv.ClusterNode).Kill},
		{"rabbitmqctl stop", (*testenv.ClusterNode).Stop},
	}
	for _, l := range losses {
		victim := e.connectedNode(d, cluster, 30*time.Second)
		node := cluster.Nodes[victim]
		connectsBefore := strings.Count(d.Log(), "broker connected")
		sentBefore := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`)
		emittedAt := tr.count()
		lostAt := time.Now()
		l.stop(node)
		t.Logf("%s of node %d (%s), herald's node, at %d events emitted, %d deliveries SENT", l.how, victim+1, node.Node, emittedAt, sentBefore)

		// herald moves to another node by itself ...
		testenv.Eventually(t, 60*time.Second, func() bool {
			return strings.Count(d.Log(), "broker connected") > connectsBefore
		}, "herald reconnects to another node after the %s of node %d", l.how, victim+1)
		now := e.connectedNode(d, cluster, time.Second)
		if now == victim {
			t.Fatalf("herald reconnected to node %d, the one that is down", victim+1)
		}
		reconnect := time.Since(lostAt)
		// ... and deliveries of events posted after the loss get SENT.
		tr.waitFor(emittedAt+20, 60*time.Second)
		var firstAfter time.Duration
		testenv.Eventually(t, 60*time.Second, func() bool {
			n := e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT' AND created_at > $1`, lostAt)
			if n > 0 && firstAfter == 0 {
				firstAfter = time.Since(lostAt)
			}
			return n >= 10*deliveriesPerEvent
		}, "deliveries of events posted after the %s of node %d SENT (now: %s)", l.how, victim+1, e.statusSummary())
		select {
		case <-d.done:
			t.Fatalf("herald exited after the %s of a node:\n%s", l.how, tail(d.Log(), 80))
		default:
		}
		t.Logf("%s: herald reconnected to node %d after %s; first delivery of a new event SENT %s after the loss; %d more SENT since",
			l.how, now+1, reconnect.Round(time.Millisecond), firstAfter.Round(time.Millisecond),
			e.count(`SELECT count(*) FROM deliveries WHERE status = 'SENT'`)-sentBefore)

		// The node comes back and rejoins: every node sees all three
		// running, and every quorum queue counts it online again.
		restartAt := time.Now()
		node.Start()
		for _, n := range cluster.Nodes {
			testenv.Eventually(t, 60*time.Second, func() bool {
				running, err := n.RunningNodes()
				return err == nil && len(running) == 3 && slices.Contains(running, node.Node)
			}, "node %s sees node %d running again", n.Node, victim+1)
		}
		e.waitQuorumQueues(cluster, node, 60*time.Second)
		t.Logf("node %d rejoined the cluster and its quorum queues %s after its start", victim+1, time.Since(restartAt).Round(time.Millisecond))
		tr.waitFor(tr.count()+20, 60*time.Second)
	}

	events := tr.halt()
	want := events * deliveriesPerEvent
	e.waitAllSent(want, 120*time.Second)
	e.assertExactlyOnce(want)
	if d.cmd.Process.Pid != pid || !processAlive(pid) {
		t.Fatal("the daemon was restarted or died")
	}
	dups := 0
	for _, n := range e.sinkRecords() {
		if n > 1 {
			dups += n - 1
		}
	}
	t.Logf("%d events, %d deliveries SENT exactly once in the database; %d resent to the provider across %d node losses",
		events, want, dups, len(losses))
	// What the losses hit in flight (each line is one batch, message or
	// consumer), and how many attempts the deliveries took.
	var hits []string
	for _, what := range []string{"handoff publish failed", "publish batch failed", "broker nacked messages",
		"published again", "consumer stopped; resubscribing", "ack failed", "skipping deliveries already handled",
		"skipping deliveries another listener is sending"} {
		hits = append(hits, fmt.Sprintf("%q ×%d", what, strings.Count(d.Log(), what)))
	}
	t.Logf("in flight at the losses: %s; %d attempts recorded for %d deliveries", strings.Join(hits, ", "),
		e.count(`SELECT count(*) FROM delivery_attempt_log`), want)
	// A channel that published to a quorum queue whose leader died kept
	// being nacked for 5-7 s after the new leader took over (every relay
	// round then: 206-260 failed handoffs in a run); the handoff and the
	// publisher now reopen a nacked channel (10-14 in a run).
	if n := strings.Count(d.Log(), "handoff publish failed"); n > 60*len(losses) {
		t.Errorf("%d handoff rounds failed across %d node losses, want at most %d: a nacked channel is not reopened", n, len(losses), 60*len(losses))
	}
	var brokerLines []string
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, "broker") && strings.Contains(line, "node=") {
			brokerLines = append(brokerLines, line)
		}
	}
	t.Logf("herald's broker log:\n%s", strings.Join(brokerLines, "\n"))
	if strings.Count(d.Log(), "broker connection lost") < len(losses) {
		t.Fatalf("herald logged %d lost connections, want %d", strings.Count(d.Log(), "broker connection lost"), len(losses))
	}
}

// newClusterEnv is newEnv with herald given every node of cluster
// (amqp.urls, in node order) and quorum queues.
func newClusterEnv(t *testing.T, cluster *testenv.RabbitCluster) *env {
	t.Helper()
	e := &env{t: t, db: testenv.Postgres(t), broker: &testenv.Broker{URL: cluster.Nodes[0].URL(), VHost: "/"}, dir: t.TempDir(), tenant: "acme"}
	e.prepare("sent")
	e.useCluster(cluster)
	return e
}

// useCluster rewrites herald.hcl (as writeConfig wrote it) with the
// cluster's nodes as amqp.urls and quorum queues.
func (e *env) useCluster(cluster *testenv.RabbitCluster) {
	t := e.t
	t.Helper()
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("amqp { url = %q }", e.broker.URL)
	if !strings.Contains(string(b), old) {
		t.Fatalf("herald.hcl has no %s line to replace:\n%s", old, b)
	}
	block := fmt.Sprintf("amqp {\n  urls       = [%s]\n  queue_type = \"quorum\"\n}", quoteList(cluster.URLs()))
	if err := os.WriteFile(e.cfgPath, []byte(strings.Replace(string(b), old, block, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

var connectedRe = regexp.MustCompile(`broker connected: node=127\.0\.0\.1:(\d+)`)

// connectedNode is the index of the node herald last logged a connection
// to, waiting for a first one.
func (e *env) connectedNode(d *daemon, cluster *testenv.RabbitCluster, deadline time.Duration) int {
	e.t.Helper()
	idx := -1
	testenv.Eventually(e.t, deadline, func() bool {
		m := connectedRe.FindAllStringSubmatch(d.Log(), -1)
		if len(m) == 0 {
			return false
		}
		port, _ := strconv.Atoi(m[len(m)-1][1])
		for i, n := range cluster.Nodes {
			if n.Port == port {
				idx = i
				return true
			}
		}
		e.t.Fatalf("herald connected to port %d, no node of the cluster", port)
		return false
	}, "herald connected to a node of the cluster")
	return idx
}

// waitQuorumQueues waits until herald's delivery queues are quorum queues
// with every node of the cluster an online member, as node reports them.
func (e *env) waitQuorumQueues(cluster *testenv.RabbitCluster, via *testenv.ClusterNode, deadline time.Duration) {
	e.t.Helper()
	want := []string{"herald.email", "herald.push", "herald.websocket"}
	var last []testenv.QueueInfo
	testenv.Eventually(e.t, deadline, func() bool {
		qs, err := via.Queues()
		if err != nil {
			return false
		}
		last = qs
		ok := 0
		for _, q := range qs {
			if slices.Contains(want, q.Name) && q.Type == "quorum" && sameNodes(q.Members, cluster.NodeNames()) && sameNodes(q.Online, cluster.NodeNames()) {
				ok++
			}
		}
		return ok == len(want)
	}, "queues %v quorum with all of %v online (now: %+v)", want, cluster.NodeNames(), last)
}

func sameNodes(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestChaosClusterLiveSession holds a browser's live session on herald
// (the WEBSOCKET channel through the real websocket plugin, whose amqp_url
// lists the three nodes) while the node herald and the plugin are
// connected to is killed: the session stays open, the live gateway
// declares its queue again on another node with the session's binding,
// the plugin dials another node, and notifications of events posted after
// that reach the browser again, without a restart. (Frames published in
// the gap may be lost: live updates are best effort, the inbox keeps
// them.)
func TestChaosClusterLiveSession(t *testing.T) {
	cluster := testenv.PrivateRabbitCluster(t, 3)
	e := newClusterEnv(t, cluster)
	e.withLivePlugins()
	e.writeConfig()
	e.useCluster(cluster)
	e.writeRules(liveRules(e.record, strings.Join(cluster.URLs(), ",")))
	ctx := context.Background()
	secret, _ := auth.NewSecret()
	key := store.TokenKey{TenantID: e.tenant, Kid: "k1", Alg: "HS256", Issuer: "https://acme.example", Key: secret}
	if err := store.AddTokenKey(ctx, e.db.Pool, key); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	pid := d.cmd.Process.Pid
	if n := e.connectedNode(d, cluster, 30*time.Second); n != 0 {
		t.Fatalf("herald connected to node %d first, want node 1", n+1)
	}
	browser := e.openLive(t, key, "staff1")
	emit := func(name string) {
		t.Helper()
		ev := reservation("live-" + name)
		ev.Payload = json.RawMessage(fmt.Sprintf(`{"restaurant_id": 5, "customer_name": %q, "pax": 2}`, name))
		if _, _, err := e.client().Emit(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	got := func(name string) bool {
		for _, b := range browser.notifications() {
			if strings.Contains(b, name) {
				return true
			}
		}
		return false
	}
	emit("before")
	testenv.Eventually(t, 30*time.Second, func() bool { return got("before") }, "the browser gets the first notification (has %v)", browser.notifications())

	connects := strings.Count(d.Log(), "broker connected")
	lostAt := time.Now()
	cluster.Nodes[0].Kill()
	testenv.Eventually(t, 60*time.Second, func() bool { return strings.Count(d.Log(), "broker connected") > connects },
		"herald reconnects to another node")
	// Post one event a second until one reaches the browser: the first
	// may go out before the gateway's new queue is bound.
	i := 0
	var back time.Duration
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.Now().Add(60 * time.Second)
	for back == 0 {
		if countGot(got, "gap", i) > 0 {
			back = time.Since(lostAt)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no notification posted after the node loss reached the browser within 60s (%d posted; has %v)", i, browser.notifications())
		}
		emit(fmt.Sprintf("gap%d", i))
		i++
		<-tick.C
	}
	select {
	case <-browser.closed:
		t.Fatal("the node loss closed the browser's session")
	default:
	}
	for _, name := range []string{"after1", "after2", "after3"} {
		emit(name)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return got("after1") && got("after2") && got("after3") },
		"every notification posted once the session is back reaches the browser (has %v)", browser.notifications())
	if d.cmd.Process.Pid != pid || !processAlive(pid) {
		t.Fatal("the daemon was restarted or died")
	}
	t.Logf("live session kept open through the SIGKILL of herald's node; notifications reach it again %s after the kill (%d of %d gap events lost, best effort)",
		back.Round(time.Millisecond), i-countGot(got, "gap", i), i)
}

// countGot counts the events prefix0..prefix(n-1) the browser got.
func countGot(got func(string) bool, prefix string, n int) int {
	c := 0
	for j := range n {
		if got(fmt.Sprintf("%s%d", prefix, j)) {
			c++
		}
	}
	return c
}
