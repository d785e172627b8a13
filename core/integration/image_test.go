package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/core/internal/tools/devpeer"
	"github.com/heraldhq/herald/sdk/producer"
)

// imageUID is the image's user (scripts/image.sh).
const imageUID = 65532

// imageRules sends through three of the bundled plugins (email, sms,
// slack) to the dev peers on loopback, which the containers reach on the
// host's network.
const imageRules = `
defaults {
  time_zone = "UTC"
  retry {
    max_attempts = 5
    initial      = "200ms"
    max          = "1s"
  }
}
channel "EMAIL" {
  providers = [{ plugin = "email", config = { host = "127.0.0.1", port = %[1]s, tls = "none", from = "Herald <noreply@herald.example>", timeout = "5s" } }]
}
channel "SMS" {
  providers = [{ plugin = "sms", config = { base_url = %[2]q, account_sid = "AC00000000000000000000000000000000", auth_token = "env:HERALD_TEST_SMS_TOKEN", from = "+15005550006", timeout = "5s" } }]
}
channel "SLACK" {
  providers = [{ plugin = "slack", config = { mode = "webhook", webhooks = { ops = "env:HERALD_TEST_SLACK_OPS" }, default_webhook = "ops", timeout = "5s" } }]
}
event "RESERVATION_REQUESTED" {
  audience {
    group = "restaurant:{{ .payload.restaurant_id }}"
    roles = ["MANAGER", "CHEF", "WAITER"]
  }
  mandatory   = ["EMAIL", "SMS", "SLACK"]
  quiet_hours = "ignore"
  inbox {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
  template "EMAIL" {
    subject = "New reservation: {{ .payload.customer_name }}"
    body    = "{{ .payload.customer_name }} asked for {{ .payload.pax }}."
  }
  template "SMS" {
    body = "New reservation: {{ .payload.customer_name }}"
  }
  template "SLACK" {
    title = "New reservation"
    body  = "{{ .payload.customer_name }}, {{ .payload.pax }} people"
  }
}
`

// TestContainerImage builds the image with `make image`'s script twice
// (the same archive and digest both times), loads it into podman and runs
// two containers of it with the host's network, a read-only root and the
// image's non-root user against the test database and vhost: every
// delivery of the events posted to the first reaches the dev peers through
// the bundled email, sms and slack plugins exactly once, and both
// containers sent some. Without podman it skips, unless
// HERALD_REQUIRE_PODMAN=1 (.ci/run) makes that a failure.
func TestContainerImage(t *testing.T) {
	podman := podmanOrSkip(t)
	root := testenv.RepoRoot(t)

	// Two builds of one commit: the same bytes.
	first := buildImage(t, root)
	second := buildImage(t, root)
	if first.sum != second.sum || first.digest != second.digest {
		t.Fatalf("two builds of one tree differ: %s (%s) and %s (%s)", first.digest, first.sum, second.digest, second.sum)
	}
	t.Logf("image %s, digest %s, archive sha256 %s (built twice, identical)", first.id, first.digest, first.sum)

	if out, err := podman.run("load", "-i", first.path); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = podman.run("rmi", "-f", first.id) })
	var inspect []struct {
		Config struct {
			User    string
			Labels  map[string]string
			Volumes map[string]struct{}
		}
	}
	out, err := podman.run("image", "inspect", first.id)
	if err != nil || json.Unmarshal([]byte(out), &inspect) != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v\n%s", err, out)
	}
	ic := inspect[0].Config
	if ic.User != fmt.Sprintf("%d:%d", imageUID, imageUID) {
		t.Errorf("image user %q, want %d:%d", ic.User, imageUID, imageUID)
	}
	if _, ok := ic.Volumes["/tmp"]; !ok {
		t.Errorf("image declares volumes %v, want /tmp among them", ic.Volumes)
	}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		if ic.Labels[k] == "" {
			t.Errorf("label %s missing: %v", k, ic.Labels)
		}
	}
	if head := strings.TrimSpace(gitOutput(t, root, "rev-parse", "HEAD")); !strings.HasPrefix(ic.Labels["org.opencontainers.image.revision"], head) {
		t.Errorf("revision label %q, want the commit %s", ic.Labels["org.opencontainers.image.revision"], head)
	}

	// The test's world: database, vhost, tenant, directory, dev peers.
	e := &env{t: t, db: testenv.Postgres(t), broker: testenv.RabbitMQ(t), dir: t.TempDir(), tenant: "acme"}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	peerLog := &lockedLog{}
	peers, err := devpeer.Start(ctx, devpeer.Config{SMTPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Log: peerLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peers.Close() })
	if err := store.EnsureTenant(ctx, e.db.Pool, e.tenant, "Acme"); err != nil {
		t.Fatal(err)
	}
	if e.apiKey, err = store.CreateAPIKey(ctx, e.db.Pool, e.tenant, "test", ""); err != nil {
		t.Fatal(err)
	}
	dir := staff
	dir.Recipients = append([]directory.Recipient(nil), staff.Recipients...)
	for i := range dir.Recipients {
		dir.Recipients[i].Phone = fmt.Sprintf("+3906000000%02d", i+1)
	}
	if err := store.ImportDirectory(ctx, e.db.Pool, e.tenant, &dir); err != nil {
		t.Fatal(err)
	}
	// The rules, readable by the image's user through a read-only mount.
	rulesDir := filepath.Join(e.dir, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, smtpPort, _ := strings.Cut(peers.SMTPAddr(), ":")
	if err := os.WriteFile(filepath.Join(rulesDir, "rules.hcl"), []byte(fmt.Sprintf(imageRules, smtpPort, peers.HTTPURL())), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.dir, rulesDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Two containers on the host's network, each on its own ports.
	var apis, admins []string
	for i := range 2 {
		api, admin := freePort(t), freePort(t)
		apis, admins = append(apis, "http://"+api), append(admins, "http://"+admin)
		name := testenv.RandomName(fmt.Sprintf("herald-test-%d-", i))
		args := append(podman.runArgs(), "--detach", "--name", name, "--network", "host", "--read-only",
			"--volume", rulesDir+":/etc/herald/rules:ro",
			"--env", "HERALD_DATABASE_URL="+e.db.URL,
			"--env", "HERALD_DATABASE_API_URL="+e.db.APIURL,
			"--env", "HERALD_DATABASE_ADMIN_URL="+e.db.AdminURL,
			"--env", "HERALD_AMQP_URL="+e.broker.URL,
			"--env", "HERALD_HTTP_LISTEN="+api,
			"--env", "HERALD_HTTP_ADMIN_LISTEN="+admin,
			"--env", "HERALD_RELAY_POLL_INTERVAL=200ms",
			"--env", "HERALD_RETRY_POLL_INTERVAL=200ms",
			"--env", "HERALD_TEST_SMS_TOKEN=devpeer-dummy-auth-token",
			"--env", "HERALD_TEST_SLACK_OPS="+peers.HTTPURL()+"/services/T0HERALDDEV/B0OPS/demo",
			first.id)
		if out, err := podman.run(args...); err != nil {
			t.Fatalf("podman run: %v\n%s", err, out)
		}
		t.Cleanup(func() {
			if t.Failed() {
				logs, _ := podman.run("logs", name)
				t.Logf("container %s log:\n%s", name, tail(logs, 80))
			}
			_, _ = podman.run("rm", "--force", "--volumes", "--time", "20", name)
		})
		checkContainerConfined(t, podman, name)
		testenv.Eventually(t, 90*time.Second, func() bool {
			if state, _ := podman.run("inspect", "--format", "{{.State.Status}}", name); strings.TrimSpace(state) == "exited" {
				logs, _ := podman.run("logs", name)
				t.Fatalf("container %s exited during start:\n%s", name, tail(logs, 80))
			}
			resp, err := http.Get("http://" + api + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, "container %s ready at %s", name, api)
	}

	// Events posted to the first container: 3 channels × 3 staff each.
	const events = 20
	client := &producer.Client{BaseURL: apis[0], APIKey: e.apiKey}
	for i := range events {
		if _, _, err := client.Emit(ctx, reservation(fmt.Sprintf("image-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	want := events * 9
	e.waitAllSent(want, 120*time.Second)
	e.assertExactlyOnce(want)
	// The peers saw each message once: one accepted line per delivery and
	// channel, no repeat.
	testenv.Eventually(t, 10*time.Second, func() bool {
		s := peerLog.String()
		return strings.Count(s, "smtp   accepted") == events*3 && strings.Count(s, "twilio accepted") == events*3 &&
			strings.Count(s, "webhook posted hook=T0HERALDDEV/B0OPS") == events*3
	}, "the dev peers accepted %d messages of each kind:\n%s", events*3, peerLog)
	// A repeated message is marked by the peer (smtp: repeat=true on a
	// Message-ID seen before; twilio: "repeat account=" for an idempotency
	// token seen before); the health checks' "(repeats are not logged)"
	// is not one.
	if repeated := regexp.MustCompile(`repeat=true|repeat account=`).FindString(peerLog.String()); repeated != "" {
		t.Errorf("a dev peer saw a repeated message (%s):\n%s", repeated, peerLog)
	}
	// The Slack stand-in marks no repeat: its posts carry distinct keys.
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile(`webhook posted .* idempotency_key=(\S+)`).FindAllStringSubmatch(peerLog.String(), -1) {
		keys[m[1]] = true
	}
	if len(keys) != events*3 {
		t.Errorf("%d distinct idempotency keys among the Slack posts, want %d", len(keys), events*3)
	}
	// Both containers sent, and their counts add up to the deliveries.
	total := 0
	for i, admin := range admins {
		n := sentCount(t, admin)
		t.Logf("container %d sent %d deliveries", i, n)
		if n == 0 {
			t.Errorf("container %d sent nothing: the two did not share the work", i)
		}
		total += n
	}
	if total != want {
		t.Errorf("the containers' sent counters add up to %d, want %d (no delivery sent twice)", total, want)
	}
}

// podmanCmd runs podman with the options this machine needs.
type podmanCmd struct {
	// extra are options of podman run: the OCI runtime and ulimits.
	extra []string
}

func (p podmanCmd) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	return string(out), err
}

func (p podmanCmd) runArgs() []string { return append([]string{"run"}, p.extra...) }

// podmanOrSkip finds podman, or skips the test with one line saying why
// (a failure with HERALD_REQUIRE_PODMAN=1). Where runc is installed it
// runs the containers (crun refuses hybrid cgroup hierarchies), and the
// containers get this process's own open-file and process limits: podman's
// defaults are higher, and raising a limit needs CAP_SYS_RESOURCE, which a
// VM's root may not have.
func podmanOrSkip(t *testing.T) podmanCmd {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("HERALD_REQUIRE_PODMAN") == "1" {
			t.Fatalf("%s, and HERALD_REQUIRE_PODMAN=1", why)
		}
		t.Skipf("%s: the container image test is skipped (scripts/tools.sh podman installs it)", why)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		skip("podman is not installed")
	}
	if os.Geteuid() != 0 {
		skip("not root (the test runs rootful podman)")
	}
	p := podmanCmd{}
	if out, err := p.run("info", "--format", "{{.Host.OCIRuntime.Name}}"); err != nil {
		skip("podman info fails: " + strings.TrimSpace(tail(out, 3)))
	}
	if _, err := exec.LookPath("runc"); err == nil {
		p.extra = append(p.extra, "--runtime", "runc")
	}
	p.extra = append(p.extra, "--ulimit", "nofile="+limitPair(t, "Max open files", 8192), "--ulimit", "nproc="+limitPair(t, "Max processes", 4096))
	return p
}

// limitPair is soft:hard of the named limit of this process, at most max.
func limitPair(t *testing.T, name string, max int) string {
	t.Helper()
	n := max
	if data, err := os.ReadFile("/proc/self/limits"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(strings.TrimPrefix(line, name)); strings.HasPrefix(line, name) && len(f) >= 2 {
				if soft, err := strconv.Atoi(f[0]); err == nil && soft < n {
					n = soft
				}
			}
		}
	}
	return fmt.Sprintf("%d:%d", n, n)
}

// checkContainerConfined checks, from the host, that the container's
// process runs as the image's user with a read-only root.
func checkContainerConfined(t *testing.T, p podmanCmd, name string) {
	t.Helper()
	out, err := p.run("inspect", "--format", "{{.State.Pid}} {{.HostConfig.ReadonlyRootfs}}", name)
	if err != nil {
		t.Fatalf("podman inspect: %v\n%s", err, out)
	}
	var pid int
	var ro bool
	if _, err := fmt.Sscan(out, &pid, &ro); err != nil || pid <= 0 {
		t.Fatalf("podman inspect: %q", out)
	}
	if !ro {
		t.Errorf("container %s: ReadonlyRootfs false", name)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)\s+(\d+)`).FindSubmatch(status)
	if m == nil || string(m[1]) != strconv.Itoa(imageUID) || string(m[2]) != strconv.Itoa(imageUID) {
		t.Errorf("container %s: process uids %q, want %d", name, m, imageUID)
	}
	// The root mount, as the process sees it: read-only.
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	rootRO, tmpRW := false, false
	sc := bufio.NewScanner(strings.NewReader(string(mounts)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		opts := "," + f[5] + ","
		switch f[4] {
		case "/":
			rootRO = strings.Contains(opts, ",ro,")
		case "/tmp":
			tmpRW = strings.Contains(opts, ",rw,")
		}
	}
	if !rootRO || !tmpRW {
		t.Errorf("container %s: root read-only %t, /tmp writable %t; want both:\n%s", name, rootRO, tmpRW, mounts)
	}
}

// builtImage is one run of scripts/image.sh.
type builtImage struct {
	path, digest, id, sum string
}

func buildImage(t *testing.T, root string) builtImage {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "scripts", "image.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DIST_DIR="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Fields(string(out))
	if len(lines) < 3 {
		t.Fatalf("scripts/image.sh printed %q, want the archive, the digest and the id", out)
	}
	b := builtImage{path: lines[len(lines)-3], digest: lines[len(lines)-2], id: lines[len(lines)-1]}
	f, err := os.Open(b.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	b.sum = hex.EncodeToString(h.Sum(nil))
	t.Logf("scripts/image.sh: %s in %s", b.path, time.Since(start).Round(time.Second))
	return b
}

// sentCount is the daemon's herald_deliveries_total{outcome="sent"}, summed.
func sentCount(t *testing.T, admin string) int {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "herald_deliveries_total{") && strings.Contains(line, `outcome="sent"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += int(v)
		}
	}
	return total
}

func gitOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}
