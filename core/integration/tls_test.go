package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/testenv"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// pem is the path of the CA certificate (PEM).
	pem string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pem: filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".pem")}
	writePEM(t, ca.pem, "CERTIFICATE", der)
	return ca
}

// issue signs a server certificate for the names and addresses and
// returns the paths of the certificate and its key (PEM).
func (ca *testCA) issue(t *testing.T, dir, name string, dns []string, ips []net.IP) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dns[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "PRIVATE KEY", keyDER)
	return certPath, keyPath
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestServeOverTLSToPostgresAndRabbitMQ starts a private PostgreSQL that
// only takes TLS connections and a private RabbitMQ node with only a TLS
// listener, both with a server certificate for localhost and 127.0.0.1
// signed by a CA made here. herald db roles, herald migrate and herald
// serve connect with database.url ?sslmode=verify-full&sslrootcert=<CA>
// and an amqps:// amqp.url with amqp.tls_ca_file, and one event is
// delivered. Then a CA that did not sign the certificate, and a host the
// certificate does not name (127.0.0.2, where both servers also listen),
// are refused on both connections with errors that say so, as is
// PostgreSQL without TLS.
func TestServeOverTLSToPostgresAndRabbitMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("starts private PostgreSQL and RabbitMQ servers")
	}
	certDir := t.TempDir()
	ca := newTestCA(t, certDir, "herald test CA")
	other := newTestCA(t, certDir, "another CA")
	cert, key := ca.issue(t, certDir, "server", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	listen := []string{"127.0.0.1", "127.0.0.2"}
	pg := testenv.PrivatePostgres(t, testenv.PGOptions{Listen: listen, CertFile: cert, KeyFile: key})
	mq := testenv.PrivateRabbitMQ(t, testenv.RabbitOptions{Listen: listen, CertFile: cert, KeyFile: key, CAFile: ca.pem})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pgPass := testenv.RandomName("tls-")
	su, err := pgx.Connect(ctx, pg.SuperuserDSN("postgres"))
	if err != nil {
		t.Fatalf("connect to the private PostgreSQL over its socket: %v", err)
	}
	for _, q := range []string{
		fmt.Sprintf(`CREATE ROLE herald LOGIN CREATEROLE PASSWORD '%s'`, pgPass),
		`CREATE DATABASE herald OWNER herald`,
	} {
		if _, err := su.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	su.Close(ctx)
	pgURL := func(host, rootCert, mode string) string {
		return fmt.Sprintf("postgres://herald:%s@%s:%d/herald?sslmode=%s&sslrootcert=%s", pgPass, host, pg.Port, mode, url.QueryEscape(rootCert))
	}
	goodPG := pgURL("127.0.0.1", ca.pem, "verify-full")
	goodMQ := fmt.Sprintf("amqps://guest:guest@127.0.0.1:%d/", mq.Port)
	// The API's and the superadmin's logins, which herald db roles makes
	// from these URLs' users and passwords.
	apiPG := strings.Replace(goodPG, "//herald:", "//herald_api_login:", 1)
	adminPG := strings.Replace(goodPG, "//herald:", "//herald_admin_login:", 1)

	// The CLI connects over TLS too: roles (as the superuser, over the
	// socket) and migrations (as herald, over TLS).
	cliEnv := []string{"HERALD_CONFIG=", "HERALD_DATABASE_URL=" + goodPG, "HERALD_DATABASE_API_URL=" + apiPG, "HERALD_DATABASE_ADMIN_URL=" + adminPG}
	for _, args := range [][]string{{"db", "roles", "--admin-url", pg.SuperuserDSN("herald"), "--owner", "herald"}, {"migrate", "up"}} {
		cmd := exec.CommandContext(ctx, heraldBinary(t), args...)
		cmd.Env = append(os.Environ(), cliEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("herald %v over TLS: %v\n%s", args, err, out)
		}
	}
	pool, err := pgxpool.New(ctx, goodPG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	e := &env{t: t, dir: t.TempDir(), tenant: "acme", db: &testenv.DB{URL: goodPG, Name: "herald", Pool: pool, APIURL: apiPG, AdminURL: adminPG},
		broker: &testenv.Broker{URL: goodMQ}}
	e.extraEnv = []string{"HERALD_AMQP_TLS_CA_FILE=" + ca.pem}
	e.prepare("sent")
	d := e.start()
	if _, _, err := e.client().Emit(ctx, reservation("tls-1")); err != nil {
		t.Fatal(err)
	}
	e.waitAllSent(deliveriesPerEvent, 60*time.Second)

	// Every connection is TLS: PostgreSQL's view (its pg_hba.conf allows
	// nothing else) and RabbitMQ's.
	var plain, encrypted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT s.ssl), count(*) FILTER (WHERE s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'herald'`).Scan(&plain, &encrypted); err != nil {
		t.Fatal(err)
	}
	if plain != 0 || encrypted < 2 {
		t.Fatalf("PostgreSQL connections of herald: %d without TLS, %d with", plain, encrypted)
	}
	out, err := mq.Ctl(30*time.Second, "-q", "list_connections", "ssl", "client_properties")
	if err != nil || !strings.Contains(out, "true") || strings.Contains(out, "false") || !strings.Contains(out, "herald") {
		t.Fatalf("RabbitMQ connections (ssl, client properties): %v\n%s", err, out)
	}
	d.stop(syscall.SIGTERM)

	tests := map[string]struct {
		env   []string
		exits bool
		want  []string
	}{
		"PostgreSQL: a CA that did not sign the server's certificate": {
			env: []string{"HERALD_DATABASE_URL=" + pgURL("127.0.0.1", other.pem, "verify-full")}, exits: true,
			want: []string{"database.url", "tls: failed to verify certificate: x509: certificate signed by unknown authority", "check sslrootcert"},
		},
		"PostgreSQL: a host the certificate does not name": {
			env: []string{"HERALD_DATABASE_URL=" + pgURL("127.0.0.2", ca.pem, "verify-full")}, exits: true,
			want: []string{"database.url", "x509: certificate is valid for 127.0.0.1, not 127.0.0.2"},
		},
		"PostgreSQL: no TLS": {
			env: []string{"HERALD_DATABASE_URL=" + pgURL("127.0.0.1", ca.pem, "disable")}, exits: true,
			want: []string{"database.url", "no encryption"},
		},
		"RabbitMQ: a CA that did not sign the server's certificate": {
			env:  []string{"HERALD_AMQP_TLS_CA_FILE=" + other.pem},
			want: []string{"broker TLS certificate refused", "x509: certificate signed by unknown authority"},
		},
		"RabbitMQ: a host the certificate does not name": {
			env:  []string{fmt.Sprintf("HERALD_AMQP_URL=amqps://guest:guest@127.0.0.2:%d/", mq.Port)},
			want: []string{"broker TLS certificate refused", "x509: certificate is valid for 127.0.0.1, not 127.0.0.2"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, exited := e.serveUntil(tc.env, 60*time.Second, tc.want...)
			if exited != tc.exits {
				t.Errorf("herald serve exited: %v, want %v", exited, tc.exits)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("herald serve does not say %q:\n%s", w, tail(out, 40))
				}
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, tc.want[len(tc.want)-1]) {
					t.Logf("herald serve: %s", line)
					break
				}
			}
			if strings.Contains(out, pgPass) {
				t.Errorf("the database password is in the output")
			}
		})
	}
}

// serveUntil runs herald serve with the env's config and extra environment
// until its output holds every one of want, it exits, or deadline passes;
// it stops a daemon still running and returns the output and whether it
// exited on its own.
func (e *env) serveUntil(extraEnv []string, deadline time.Duration, want ...string) (string, bool) {
	e.t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	cmd := exec.Command(heraldBinary(e.t), "serve", "--config", e.cfgPath)
	cmd.Env = append(append(os.Environ(), e.extraEnv...), extraEnv...)
	cmd.Stdout, cmd.Stderr = lockedWriter{&mu, &buf}, lockedWriter{&mu, &buf}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		select {
		case <-done:
			return output(), true
		case <-time.After(100 * time.Millisecond):
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(output(), w)
		}
		if all {
			break
		}
	}
	select {
	case <-done:
		return output(), true
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return output(), false
}
