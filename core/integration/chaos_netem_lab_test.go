//go:build chaos

package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netLab is two network namespaces of one test joined by a veth pair:
// herald runs in heraldNS, PostgreSQL and RabbitMQ in serverNS, and the
// only way between them is the veth, where faults are injected. The test
// process itself stays in the host's namespace and reaches PostgreSQL over
// its Unix socket (sockets live in the file system, not in a namespace)
// and herald's HTTP API through dialInNetns.
type netLab struct {
	t *testing.T
	// heraldNS and serverNS are the namespaces' names (hrld-h-<pid>-<id>
	// and hrld-s-<pid>-<id>: <pid> is the test binary's, so a later run can
	// tell a dead run's leftovers; <id> is random per test, so concurrent
	// runs never meet).
	heraldNS, serverNS string
	// heraldIP and serverIP are the two ends of the veth, in a /30 of
	// 10.200.0.0/13 derived from <id>.
	heraldIP, serverIP string
	// heraldVeth is herald's end of the pair.
	heraldVeth string
}

// newNetLab creates the namespaces and the veth and removes both when the
// test ends, pass or fail (a test binary killed outright, by go test's
// -timeout say, runs no cleanup: the next lab removes what it left, see
// sweepDeadLabs). Where namespaces cannot be created (not root,
// no CAP_SYS_ADMIN, a kernel without network namespaces) the test is
// skipped with the reason; missing tools (iproute2, iptables) fail it,
// since scripts/test-chaos.sh installs them.
func newNetLab(t *testing.T) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chaos: creating network namespaces needs root (ip netns add); run scripts/test-chaos.sh as root")
	}
	for tool, pkg := range map[string]string{"ip": "iproute2", "iptables": "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("chaos: %s not installed: install the Debian package %s (scripts/test-chaos.sh does)", tool, pkg)
		}
	}
	sweepDeadLabs(t)
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(b)
	pid := fmt.Sprint(os.Getpid())
	l := &netLab{t: t, heraldNS: "hrld-h-" + pid + "-" + id, serverNS: "hrld-s-" + pid + "-" + id, heraldVeth: "hv" + id}
	// A /30 inside 10.200.0.0/13 from the id: addresses only have to
	// differ from the host's own, since each lab's veth joins only its
	// two namespaces.
	n := (uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])) & (1<<17 - 1)
	base := 10<<24 | 200<<16 | n<<2
	ip := func(v uint32) string { return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&255, v>>8&255, v&255) }
	l.heraldIP, l.serverIP = ip(base+1), ip(base+2)

	if out, err := exec.Command("ip", "netns", "add", l.heraldNS).CombinedOutput(); err != nil {
		t.Skipf("chaos: cannot create a network namespace here (ip netns add: %v: %s); the network fault tests need root on Linux with network namespaces", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { l.remove(l.heraldNS) })
	l.run("ip", "netns", "add", l.serverNS)
	t.Cleanup(func() { l.remove(l.serverNS) })
	l.run("ip", "link", "add", l.heraldVeth, "netns", l.heraldNS, "type", "veth", "peer", "name", "sv"+id, "netns", l.serverNS)
	for _, c := range [][]string{
		{l.heraldNS, "addr", "add", l.heraldIP + "/30", "dev", l.heraldVeth},
		{l.serverNS, "addr", "add", l.serverIP + "/30", "dev", "sv" + id},
		{l.heraldNS, "link", "set", l.heraldVeth, "up"},
		{l.serverNS, "link", "set", "sv" + id, "up"},
		{l.heraldNS, "link", "set", "lo", "up"},
		{l.serverNS, "link", "set", "lo", "up"},
	} {
		l.run(append([]string{"ip", "-n", c[0]}, c[1:]...)...)
	}
	t.Logf("chaos: herald in %s (%s), servers in %s (%s), joined by veth %s", l.heraldNS, l.heraldIP, l.serverNS, l.serverIP, l.heraldVeth)
	return l
}

// sweepDeadLabs removes the namespaces of labs whose test binary is gone
// (killed by go test's -timeout, say, so its cleanups never ran), after
// killing what still runs inside them (a herald, a PostgreSQL). A lab whose
// process still exists is left alone, whoever it is.
func sweepDeadLabs(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		ns, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		var role, id string
		var pid int
		if n, _ := fmt.Sscanf(strings.ReplaceAll(ns, "-", " "), "hrld %s %d %s", &role, &pid, &id); n != 3 || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		if pids, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, p := range strings.Fields(string(pids)) {
				if n, err := strconv.Atoi(p); err == nil {
					_ = unix.Kill(n, unix.SIGKILL)
				}
			}
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Logf("chaos: removing %s, left by dead test binary %d: %v: %s", ns, pid, err, out)
		} else {
			t.Logf("chaos: removed %s, left by dead test binary %d", ns, pid)
		}
	}
}

// remove deletes namespace ns (and with it its end of the veth, which
// takes the other end along). Processes still inside would keep it alive:
// every server and daemon of the test is stopped by cleanups registered
// after the lab's, which therefore run before this one.
func (l *netLab) remove(ns string) {
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		l.t.Errorf("chaos: ip netns del %s: %v: %s", ns, err, out)
	}
}

// run runs a command and fails the test when it fails.
func (l *netLab) run(args ...string) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("chaos: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// iptables runs iptables inside herald's namespace.
func (l *netLab) iptables(args ...string) {
	l.t.Helper()
	l.run(append([]string{"ip", "netns", "exec", l.heraldNS, "iptables", "-w", "5"}, args...)...)
}

// fault is one kind of network fault between herald and one server port.
type fault struct {
	// name is what the test and docs/reliability.md call it.
	name string
	// match is the iptables target (and matches before it) applied to
	// every packet between herald and the port, both ways.
	match []string
	// hold is how long the fault lasts.
	hold time.Duration
	// delay, when set, runs a packet delayer on NFQUEUE queue 1 for the
	// fault's duration (match sends the packets there).
	delay time.Duration
}

// inject applies f to every TCP packet between herald and the server's
// port, in both directions (herald's OUTPUT to the port, herald's INPUT
// from it), and returns the function that heals it.
func (l *netLab) inject(f fault, port int) (heal func()) {
	l.t.Helper()
	p := fmt.Sprint(port)
	rules := [][]string{
		append([]string{"OUTPUT", "-p", "tcp", "-d", l.serverIP, "--dport", p}, f.match...),
		append([]string{"INPUT", "-p", "tcp", "-s", l.serverIP, "--sport", p}, f.match...),
	}
	var d *delayer
	if f.delay > 0 {
		var err error
		if d, err = startDelayer(l.heraldNS, 1, f.delay); err != nil {
			l.t.Fatalf("chaos: packet delayer: %v", err)
		}
	}
	for _, r := range rules {
		l.iptables(append([]string{"-A"}, r...)...)
	}
	return func() {
		l.t.Helper()
		for _, r := range rules {
			l.iptables(append([]string{"-D"}, r...)...)
		}
		if d != nil {
			st := d.stop()
			l.t.Logf("chaos: delayer held %d packets for %s each (kernel queue: number portid total copy_mode copy_range queue_dropped user_dropped id_seq 1 = %s)", st.delayed, f.delay, st.overflow)
			if st.err != nil {
				l.t.Errorf("chaos: packet delayer: %v", st.err)
			}
			if st.delayed == 0 {
				l.t.Errorf("chaos: the delay fault delayed no packet: the NFQUEUE rules did not catch herald's traffic")
			}
		}
	}
}

// packets reads the packet counters of the fault's rules (herald's OUTPUT
// and INPUT chains): how many packets the fault matched so far.
func (l *netLab) packets() string {
	out, err := exec.Command("ip", "netns", "exec", l.heraldNS, "iptables", "-w", "5", "-L", "-v", "-n", "-x").CombinedOutput()
	if err != nil {
		return err.Error()
	}
	return string(out)
}

// dialInNetns dials addr from inside network namespace ns: the socket is
// made on a thread moved into ns (a socket keeps the namespace it was
// made in), and the thread goes back before it is released.
func dialInNetns(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer home.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if berr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); berr != nil {
			// The thread stays locked: Go ends it with the goroutine
			// rather than reuse a thread in the wrong namespace.
			if c != nil {
				c.Close()
			}
			ch <- result{err: errors.Join(err, fmt.Errorf("setns back: %w", berr))}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// netnsHTTP is an HTTP client whose connections are made in ns.
func netnsHTTP(ns string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, ns, network, addr)
		},
	}}
}

// TestChaosLabSweepsDeadRuns leaves a namespace named as a lab of a test
// binary that has exited, with a process inside, and shows the next lab
// removes both.
func TestChaosLabSweepsDeadRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chaos: creating network namespaces needs root")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("hrld-s-%d-000000", dead.Process.Pid)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("chaos: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // when the sweep failed
	inside := exec.Command("ip", "netns", "exec", ns, "sleep", "600")
	if err := inside.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- inside.Wait() }()

	newNetLab(t)
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), ns) {
		t.Fatalf("%s (left by dead pid %d) is still there:\n%s", ns, dead.Process.Pid, out)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = inside.Process.Kill()
		t.Fatal("the process inside the dead run's namespace was not killed")
	}
}
