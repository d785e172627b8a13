package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RabbitCluster is a RabbitMQ cluster of the test's own: several private
// nodes on one machine, each with its own AMQP and distribution ports, node
// name, data and log directories, sharing one Erlang cookie and one epmd of
// the cluster's own (on a port of its own), so nothing of the machine's
// broker is touched. The nodes are stopped when the test ends, pass or fail.
type RabbitCluster struct {
	// Nodes are the cluster's nodes; Nodes[0] is the one the others joined.
	Nodes []*ClusterNode
}

// ClusterNode is one node of a RabbitCluster. Kill and Start stop it and
// bring it back with its data, as a crashed and restarted machine would.
type ClusterNode struct {
	// Port is the AMQP port (127.0.0.1).
	Port int
	// Node is the Erlang node name (herald-<random>-<i>@localhost).
	Node string
	// Dir holds the node's config, data and logs.
	Dir string

	t   testing.TB
	env []string
	bin string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *LogBuffer
}

// URL is the node's AMQP URL (guest, the default vhost).
func (n *ClusterNode) URL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port)
}

// URLs are the AMQP URLs of every node, in node order.
func (c *RabbitCluster) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return urls
}

// NodeNames are the Erlang node names, in node order.
func (c *RabbitCluster) NodeNames() []string {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Node
	}
	return names
}

// Ctl runs rabbitmqctl against the node.
func (n *ClusterNode) Ctl(timeout time.Duration, args ...string) (string, error) {
	return n.tool("rabbitmqctl", timeout, args...)
}

func (n *ClusterNode) tool(name string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, name), append([]string{"-n", n.Node}, args...)...)
	cmd.Env = n.env
	cmd.Dir = n.Dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// PrivateRabbitCluster starts size RabbitMQ nodes (at least 1) and joins
// nodes 2..size to node 1 (rabbitmqctl stop_app, join_cluster, start_app).
// The user guest/guest may connect to every node from 127.0.0.1.
func PrivateRabbitCluster(t testing.TB, size int) *RabbitCluster {
	t.Helper()
	bin, epmd := rabbitTools(t)
	size = max(size, 1)
	dir, err := os.MkdirTemp("", "herald-rabbit-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// One HOME, so one Erlang cookie, for every node and rabbitmqctl.
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(strings.ToUpper(RandomName("COOKIE"))), 0o400); err != nil {
		t.Fatal(err)
	}
	epmdPort := FreePort(t)
	epmdCmd := exec.Command(epmd, "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
	epmdCmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := epmdCmd.Start(); err != nil {
		t.Fatalf("start epmd: %v", err)
	}
	epmdDone := make(chan struct{})
	go func() { _ = epmdCmd.Wait(); close(epmdDone) }()
	// Registered first, so it runs after every node's cleanup.
	t.Cleanup(func() { stopGroup(epmdCmd, epmdDone, 5*time.Second) })
	waitTCP(t, epmdPort, 10*time.Second, "epmd")

	base := RandomName("herald-")
	c := &RabbitCluster{}
	for i := range size {
		ndir := filepath.Join(dir, fmt.Sprintf("node%d", i+1))
		n := &ClusterNode{Port: FreePort(t), Node: fmt.Sprintf("%s-%d@localhost", base, i+1), Dir: ndir, t: t, bin: bin}
		distPort := FreePort(t)
		for _, d := range []string{"", "mnesia", "log"} {
			if err := os.Mkdir(filepath.Join(ndir, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		conf := []string{
			fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d", n.Port),
			"loopback_users = none", "disk_free_limit.absolute = 10MB", "log.console = false", "log.file.level = info",
		}
		files := map[string]string{
			"rabbitmq.conf":   strings.Join(conf, "\n") + "\n",
			"enabled_plugins": "[].\n",
			"env.conf":        "", // instead of /etc/rabbitmq/rabbitmq-env.conf
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(ndir, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		n.env = append(os.Environ(),
			"HOME="+home,
			"RABBITMQ_NODENAME="+n.Node,
			"RABBITMQ_MNESIA_BASE="+filepath.Join(ndir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(ndir, "log"),
			"RABBITMQ_PID_FILE="+filepath.Join(ndir, "rabbitmq.pid"),
			"RABBITMQ_CONFIG_FILE="+filepath.Join(ndir, "rabbitmq.conf"),
			"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(ndir, "advanced.config"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(ndir, "enabled_plugins"),
			"RABBITMQ_CONF_ENV_FILE="+filepath.Join(ndir, "env.conf"),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
			"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
			"ERL_EPMD_ADDRESS=127.0.0.1",
		)
		c.Nodes = append(c.Nodes, n)
		t.Cleanup(func() {
			if n.Running() {
				if _, err := n.Ctl(30*time.Second, "stop"); err != nil {
					t.Logf("rabbitmqctl stop %s: %v", n.Node, err)
				}
			}
			n.mu.Lock()
			cmd, done := n.cmd, n.done
			n.mu.Unlock()
			if cmd != nil {
				stopGroup(cmd, done, 30*time.Second)
			}
			if t.Failed() {
				logs, _ := filepath.Glob(filepath.Join(ndir, "log", "*.log"))
				for _, l := range logs {
					b, _ := os.ReadFile(l)
					t.Logf("cluster node %s log %s:\n%s", n.Node, filepath.Base(l), tailString(string(b), 30))
				}
			}
		})
	}
	// Boot every node at once (each takes ~10 s of mostly waiting), then
	// join them to the first one by one.
	start := time.Now()
	for _, n := range c.Nodes {
		n.spawn()
	}
	for _, n := range c.Nodes {
		n.awaitStartup(90 * time.Second)
	}
	for _, n := range c.Nodes[1:] {
		for _, step := range [][]string{{"stop_app"}, {"join_cluster", c.Nodes[0].Node}, {"start_app"}} {
			if out, err := n.Ctl(60*time.Second, step...); err != nil {
				t.Fatalf("rabbitmqctl -n %s %s: %v\n%s", n.Node, strings.Join(step, " "), err, out)
			}
		}
	}
	for _, n := range c.Nodes {
		n.awaitStartup(60 * time.Second)
	}
	want := c.NodeNames()
	Eventually(t, 30*time.Second, func() bool {
		got, err := c.Nodes[0].RunningNodes()
		return err == nil && sameSet(got, want)
	}, "cluster of %v running", want)
	t.Logf("private RabbitMQ cluster %v up on ports %v after %s", want, c.ports(), time.Since(start).Round(100*time.Millisecond))
	return c
}

func (c *RabbitCluster) ports() []int {
	var ps []int
	for _, n := range c.Nodes {
		ps = append(ps, n.Port)
	}
	return ps
}

func waitTCP(t testing.TB, port int, deadline time.Duration, what string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s on port %d: %v", what, port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// spawn starts the node's rabbitmq-server process (its own process group).
func (n *ClusterNode) spawn() {
	n.t.Helper()
	out := &LogBuffer{}
	cmd := exec.Command(filepath.Join(n.bin, "rabbitmq-server"))
	cmd.Env, cmd.Dir = n.env, n.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start rabbitmq-server %s: %v", n.Node, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done, n.out = cmd, done, out
	n.mu.Unlock()
}

// awaitStartup polls rabbitmqctl await_startup until the node serves.
func (n *ClusterNode) awaitStartup(deadline time.Duration) {
	n.t.Helper()
	start := time.Now()
	for {
		if _, err := n.Ctl(15*time.Second, "await_startup", "--timeout", "5"); err == nil {
			return
		}
		n.mu.Lock()
		done, out := n.done, n.out
		n.mu.Unlock()
		select {
		case <-done:
			n.t.Fatalf("rabbitmq-server %s exited while booting:\n%s", n.Node, tailString(out.String(), 40))
		default:
		}
		if time.Since(start) > deadline {
			n.t.Fatalf("rabbitmq-server %s did not boot within %s:\n%s", n.Node, deadline, tailString(out.String(), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Running reports whether the node's server process runs.
func (n *ClusterNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill kills the node's whole process group with SIGKILL (a crash: its
// connections drop, nothing is flushed) and waits for it to exit.
func (n *ClusterNode) Kill() {
	n.t.Helper()
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		n.t.Fatalf("rabbitmq-server %s did not exit after SIGKILL", n.Node)
	}
}

// Stop shuts the node down in order (rabbitmqctl stop: its clients get
// connection.close, CONNECTION_FORCED) and waits for its process to exit.
func (n *ClusterNode) Stop() {
	n.t.Helper()
	if out, err := n.Ctl(60*time.Second, "stop"); err != nil {
		n.t.Fatalf("rabbitmqctl -n %s stop: %v\n%s", n.Node, err, out)
	}
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		n.t.Fatalf("rabbitmq-server %s did not exit after rabbitmqctl stop", n.Node)
	}
}

// Start starts a killed or stopped node again with its data and waits
// until it serves; it rejoins its cluster by itself.
func (n *ClusterNode) Start() {
	n.t.Helper()
	if n.Running() {
		n.t.Fatalf("rabbitmq-server %s is running already", n.Node)
	}
	n.spawn()
	n.awaitStartup(90 * time.Second)
}

// RunningNodes returns the cluster's running nodes as the node sees them
// (rabbitmqctl cluster_status).
func (n *ClusterNode) RunningNodes() ([]string, error) {
	out, err := n.Ctl(30*time.Second, "cluster_status", "--formatter", "json")
	if err != nil {
		return nil, fmt.Errorf("cluster_status: %v: %s", err, out)
	}
	var st struct {
		RunningNodes []string `json:"running_nodes"`
	}
	if err := json.Unmarshal([]byte(jsonPart(out)), &st); err != nil {
		return nil, fmt.Errorf("cluster_status: %v: %s", err, out)
	}
	return st.RunningNodes, nil
}

// QueueInfo is one queue as rabbitmqctl list_queues reports it. Fields the
// node cannot tell (a classic queue on a node that is down) stay zero.
type QueueInfo struct {
	Name     string
	Type     string
	Messages int
	Leader   string
	Members  []string
	Online   []string
}

// Queues lists the default vhost's queues with their type, leader,
// members and online members (quorum queues) as the node sees them.
func (n *ClusterNode) Queues() ([]QueueInfo, error) {
	out, err := n.Ctl(30*time.Second, "list_queues", "-q", "name", "type", "messages", "leader", "members", "online", "--formatter", "json")
	if err != nil {
		return nil, fmt.Errorf("list_queues: %v: %s", err, out)
	}
	// rabbitmqctl prints "" for what it does not know, a list or a number
	// otherwise.
	var raw []struct {
		Name, Type, Leader string
		Messages           any
		Members, Online    any
	}
	if err := json.Unmarshal([]byte(jsonPart(out)), &raw); err != nil {
		return nil, fmt.Errorf("list_queues: %v: %s", err, out)
	}
	strs := func(v any) []string {
		l, _ := v.([]any)
		var s []string
		for _, x := range l {
			if str, ok := x.(string); ok {
				s = append(s, str)
			}
		}
		return s
	}
	qs := make([]QueueInfo, len(raw))
	for i, r := range raw {
		m, _ := r.Messages.(float64)
		qs[i] = QueueInfo{Name: r.Name, Type: r.Type, Leader: r.Leader, Messages: int(m), Members: strs(r.Members), Online: strs(r.Online)}
	}
	return qs, nil
}

// jsonPart drops the lines rabbitmqctl prints before its JSON.
func jsonPart(out string) string {
	if i := strings.IndexAny(out, "[{"); i >= 0 {
		return out[i:]
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
