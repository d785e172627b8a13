package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The private servers below are whole PostgreSQL and RabbitMQ servers of
// one test, for what a database or vhost on the shared servers cannot
// show (TLS listeners, say). They run from the Debian packages' binaries
// on free loopback ports, with their own data, socket, log and pid files
// and (RabbitMQ) their own node name, Erlang cookie, distribution port and
// epmd, so nothing of the machine's servers is touched; each is stopped
// when the test ends, pass or fail.

// FreePort returns a TCP port free on every one of addrs (default
// 127.0.0.1) at the time of the call.
func FreePort(t testing.TB, addrs ...string) int {
	t.Helper()
	if len(addrs) == 0 {
		addrs = []string{"127.0.0.1"}
	}
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		for _, a := range addrs[1:] {
			l2, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l2.Close()
		}
		l.Close()
		if ok {
			return port
		}
	}
	t.Fatalf("no port free on all of %v", addrs)
	return 0
}

// missing fails (or, with -short, skips) a test whose server binaries are
// not installed.
func missing(t testing.TB, what, pkg string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s not installed (Debian package %s); skipped in -short mode", what, pkg)
	}
	t.Fatalf("%s not installed: install the Debian package %s (apt-get install %s)", what, pkg, pkg)
}

// PGOptions configures PrivatePostgres.
type PGOptions struct {
	// Listen are the loopback addresses to listen on (default 127.0.0.1).
	Listen []string
	// Netns, when set, runs the server inside this network namespace
	// (`ip netns exec`), on port 5432 of the Listen addresses, which
	// then are addresses of that namespace. The Unix socket is still
	// reachable from the test (sockets live in the file system).
	Netns string
	// Clients are the networks (CIDR) whose TCP connections the server
	// takes with a password (default: each Listen address, /32).
	Clients []string
	// CertFile and KeyFile, when set, turn on TLS (ssl = on) with this
	// server certificate and key (PEM), and the server then refuses TCP
	// connections that do not use TLS.
	CertFile, KeyFile string
}

// PGServer is a private PostgreSQL server.
type PGServer struct {
	// Port is the TCP port, on every Listen address.
	Port int
	// SocketDir holds the Unix socket; the superuser "postgres" connects
	// there without a password (SuperuserDSN).
	SocketDir string
	// Dir holds the data directory, the socket, the log and the certificate.
	Dir string
}

// SuperuserDSN connects to database db as the superuser over the socket.
func (s *PGServer) SuperuserDSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", s.SocketDir, s.Port, db)
}

// PostgresBinDir returns the newest /usr/lib/postgresql/<version>/bin, or
// $HERALD_PG_BINDIR.
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("HERALD_PG_BINDIR"); d != "" {
		return d
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		missing(t, "PostgreSQL server (/usr/lib/postgresql/*/bin/initdb)", "postgresql")
	}
	sort.Slice(m, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(m[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(m[j]))))
		return vi < vj
	})
	return filepath.Dir(m[len(m)-1])
}

// PrivatePostgres creates a cluster with initdb (as the postgres OS user;
// the test must run as root) and starts it on a free port. It is stopped
// and removed when the test ends.
func PrivatePostgres(t testing.TB, opts PGOptions) *PGServer {
	t.Helper()
	bin := PostgresBinDir(t)
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("a private PostgreSQL needs root (initdb and pg_ctl run as the postgres user); skipped in -short mode")
		}
		t.Fatal("a private PostgreSQL needs root: initdb and pg_ctl run as the postgres user through runuser")
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		missing(t, "runuser", "util-linux")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		missing(t, "the postgres OS user", "postgresql")
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	if len(opts.Listen) == 0 {
		opts.Listen = []string{"127.0.0.1"}
	}
	dir, err := os.MkdirTemp("", "herald-private-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &PGServer{Port: 5432, SocketDir: filepath.Join(dir, "sock"), Dir: dir}
	if opts.Netns == "" {
		s.Port = FreePort(t, opts.Listen...)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(s.SocketDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, s.SocketDir} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	asPostgres := func(timeout time.Duration, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		if opts.Netns != "" {
			cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", opts.Netns}, cmd.Args...)...)
		}
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := asPostgres(60*time.Second, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	conf := []string{
		fmt.Sprintf("port = %d", s.Port),
		fmt.Sprintf("listen_addresses = '%s'", strings.Join(opts.Listen, ",")),
		fmt.Sprintf("unix_socket_directories = '%s'", s.SocketDir),
		"fsync = off", "synchronous_commit = off", "full_page_writes = off",
		"shared_buffers = 16MB", "max_connections = 60",
	}
	hba := []string{"local all all trust"}
	method := "host"
	if opts.CertFile != "" {
		for src, dst := range map[string]string{opts.CertFile: "server.crt", opts.KeyFile: "server.key"} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, dst)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		conf = append(conf, "ssl = on", fmt.Sprintf("ssl_cert_file = '%s/server.crt'", dir), fmt.Sprintf("ssl_key_file = '%s/server.key'", dir))
		method = "hostssl" // and no "host" line: plain TCP is refused
	}
	if len(opts.Clients) == 0 {
		for _, a := range opts.Listen {
			opts.Clients = append(opts.Clients, a+"/32")
		}
	}
	for _, c := range opts.Clients {
		hba = append(hba, fmt.Sprintf("%s all all %s scram-sha-256", method, c))
	}
	appendFile := func(p string, lines []string) {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	appendFile(filepath.Join(data, "postgresql.conf"), conf)
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(strings.Join(hba, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "postgres.log")
	t.Cleanup(func() {
		if out, err := asPostgres(60*time.Second, "pg_ctl", "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"); err != nil {
			t.Logf("stop private PostgreSQL: %v\n%s", err, out)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("private PostgreSQL log:\n%s", tailString(string(b), 40))
		}
	})
	if out, err := asPostgres(90*time.Second, "pg_ctl", "-D", data, "-l", logFile, "-w", "-t", "60", "start"); err != nil {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("start private PostgreSQL: %v\n%s\n%s", err, out, b)
	}
	return s
}

// RabbitOptions configures PrivateRabbitMQ.
type RabbitOptions struct {
	// Listen are the loopback addresses to listen on (default 127.0.0.1).
	Listen []string
	// CertFile, KeyFile and CAFile, when set, make the listeners TLS only
	// (amqps), with this server certificate, key and CA bundle (PEM).
	CertFile, KeyFile, CAFile string
	// Boot bounds the wait for the node (default 90s).
	Boot time.Duration
	// Netns, when set, runs the node, its epmd and rabbitmqctl inside this
	// network namespace (`ip netns exec`), with AMQP on port 5672 of the
	// Listen addresses, which then are addresses of that namespace.
	Netns string
}

// RabbitServer is a private RabbitMQ node.
type RabbitServer struct {
	// Port is the AMQP (or AMQPS) port, on every Listen address.
	Port int
	// Node is the node name (herald-<random>@localhost).
	Node string
	// Dir holds the node's config, data, logs and Erlang cookie.
	Dir   string
	env   []string
	bin   string
	netns string
}

// command is name with args, run inside netns when it is set.
func command(ctx context.Context, netns, name string, args ...string) *exec.Cmd {
	if netns == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns, name}, args...)...)
}

// Ctl runs rabbitmqctl against the node.
func (s *RabbitServer) Ctl(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := command(ctx, s.netns, filepath.Join(s.bin, "rabbitmqctl"), append([]string{"-n", s.Node}, args...)...)
	cmd.Env = s.env
	cmd.Dir = s.Dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// PrivateRabbitMQ starts a RabbitMQ node of the test's own, with an epmd
// of its own, and waits (polling rabbitmqctl await_startup) until it
// serves. The user guest/guest may connect. It is stopped when the test
// ends.
func PrivateRabbitMQ(t testing.TB, opts RabbitOptions) *RabbitServer {
	t.Helper()
	bin, epmd := rabbitTools(t)
	if len(opts.Listen) == 0 {
		opts.Listen = []string{"127.0.0.1"}
	}
	if opts.Boot <= 0 {
		opts.Boot = 90 * time.Second
	}
	dir, err := os.MkdirTemp("", "herald-private-rabbitmq-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &RabbitServer{Port: 5672, Node: RandomName("herald-") + "@localhost", Dir: dir, bin: bin, netns: opts.Netns}
	if opts.Netns == "" {
		s.Port = FreePort(t, opts.Listen...)
	}
	distPort, epmdPort := FreePort(t), FreePort(t)
	for _, d := range []string{"home", "mnesia", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var conf []string
	scheme := "tcp"
	if opts.CertFile != "" {
		scheme = "ssl"
		conf = append(conf, "listeners.tcp = none",
			"ssl_options.cacertfile = "+opts.CAFile, "ssl_options.certfile = "+opts.CertFile, "ssl_options.keyfile = "+opts.KeyFile,
			"ssl_options.verify = verify_none", "ssl_options.fail_if_no_peer_cert = false")
	}
	for i, a := range opts.Listen {
		conf = append(conf, fmt.Sprintf("listeners.%s.%d = %s:%d", scheme, i+1, a, s.Port))
	}
	conf = append(conf, "loopback_users = none", "disk_free_limit.absolute = 10MB", "log.console = false", "log.file.level = info")
	files := map[string]string{
		"rabbitmq.conf":   strings.Join(conf, "\n") + "\n",
		"enabled_plugins": "[].\n",
		"env.conf":        "", // instead of /etc/rabbitmq/rabbitmq-env.conf
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.env = append(os.Environ(),
		"HOME="+filepath.Join(dir, "home"), // the Erlang cookie
		"RABBITMQ_NODENAME="+s.Node,
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "env.conf"),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)

	// An epmd of the node's own, in the foreground, so that it ends with
	// the test (a broker that finds none starts a daemon that outlives it).
	epmdCmd := command(context.Background(), opts.Netns, epmd, "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
	epmdCmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := epmdCmd.Start(); err != nil {
		t.Fatalf("start epmd: %v", err)
	}
	epmdDone := make(chan struct{})
	go func() { _ = epmdCmd.Wait(); close(epmdDone) }()
	t.Cleanup(func() { stopGroup(epmdCmd, epmdDone, 5*time.Second) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if opts.Netns == "" {
			var c net.Conn
			if c, err = net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(epmdPort)), time.Second); err == nil {
				c.Close()
			}
		} else {
			// Ask the epmd itself, from inside the namespace.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = command(ctx, opts.Netns, epmd, "-port", strconv.Itoa(epmdPort), "-names").Run()
			cancel()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("epmd on port %d: %v", epmdPort, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	out := &LogBuffer{}
	server := command(context.Background(), opts.Netns, filepath.Join(bin, "rabbitmq-server"))
	server.Env, server.Dir = s.env, dir
	server.Stdout, server.Stderr = out, out
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := server.Start(); err != nil {
		t.Fatalf("start rabbitmq-server: %v", err)
	}
	serverDone := make(chan struct{})
	go func() { _ = server.Wait(); close(serverDone) }()
	t.Cleanup(func() {
		if _, err := s.Ctl(30*time.Second, "stop"); err != nil {
			t.Logf("rabbitmqctl stop %s: %v", s.Node, err)
		}
		stopGroup(server, serverDone, 30*time.Second)
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("private RabbitMQ log %s:\n%s", filepath.Base(l), tailString(string(b), 40))
			}
		}
	})
	start := time.Now()
	for {
		if _, err := s.Ctl(15*time.Second, "await_startup", "--timeout", "5"); err == nil {
			break
		}
		select {
		case <-serverDone:
			t.Fatalf("rabbitmq-server %s exited while booting:\n%s", s.Node, tailString(out.String(), 40))
		default:
		}
		if time.Since(start) > opts.Boot {
			t.Fatalf("rabbitmq-server %s did not boot within %s:\n%s", s.Node, opts.Boot, tailString(out.String(), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("private RabbitMQ %s up on port %d after %s", s.Node, s.Port, time.Since(start).Round(100*time.Millisecond))
	return s
}

// stopGroup stops the process group cmd leads (cmd was started with
// Setpgid): SIGTERM, then SIGKILL after grace; it waits for cmd, then kills
// what is left of the group (children that outlived it).
func stopGroup(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	pgid := cmd.Process.Pid
	select {
	case <-done:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
	}
	if syscall.Kill(-pgid, 0) == nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// LogBuffer is a bytes.Buffer written by several goroutines (a process's
// output, a logger's sink) and read by the test while they write.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// rabbitTools finds the RabbitMQ server's bin directory
// (HERALD_RABBITMQ_BINDIR, else Debian's) and epmd, or fails the test
// naming the Debian package to install.
func rabbitTools(t testing.TB) (bin, epmd string) {
	t.Helper()
	bin = "/usr/lib/rabbitmq/bin"
	if d := os.Getenv("HERALD_RABBITMQ_BINDIR"); d != "" {
		bin = d
	}
	if _, err := os.Stat(filepath.Join(bin, "rabbitmq-server")); err != nil {
		missing(t, "RabbitMQ server ("+bin+"/rabbitmq-server)", "rabbitmq-server")
	}
	epmd, err := exec.LookPath("epmd")
	if err != nil {
		missing(t, "epmd (Erlang)", "erlang-base")
	}
	return bin, epmd
}
