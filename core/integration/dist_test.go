package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// distPlugins maps each bundled plugin to the channel it describes.
var distPlugins = map[string]string{
	"email":     "EMAIL",
	"push":      "PUSH",
	"sms":       "SMS",
	"slack":     "SLACK",
	"websocket": "WEBSOCKET",
}

// TestDistPackage builds the release artifacts as make dist does
// (scripts/dist.sh, with the test build's flags so that the build cache is
// reused), checks the .deb with dpkg-deb and dpkg, installs it into a
// throw-away root with dpkg-deb -x, and runs what it installed: herald
// version and doctor --help, every plugin through the real go-plugin
// handshake, the packaged config through the config loader, the
// maintainer scripts in a private mount namespace (the herald user, the
// admin token, purge), the unit through systemd-analyze verify when the
// machine has it. The tarball must hold the same files.
func TestDistPackage(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "dpkg", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (Debian's base system has it)", tool, err)
		}
	}
	repo := testenv.RepoRoot(t)
	out := t.TempDir()
	cmd := exec.Command("scripts/dist.sh")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "DIST_DIR="+out, "DIST_DEV=1", "VERSION=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/dist.sh: %v\n%s", err, stderr.String())
	}
	paths := strings.Fields(string(stdout))
	if len(paths) != 2 {
		t.Fatalf("scripts/dist.sh printed %q, want the tarball's and the package's paths", stdout)
	}
	tarball, deb := paths[0], paths[1]

	// The version: git describe, as herald reports it; the package's is
	// the same without a leading v (0.0.0+git.HASH for a bare hash that
	// starts with a letter, which Debian refuses).
	version := "0.0.0-dev"
	if b, err := distGit(repo, "describe", "--tags", "--match", "v[0-9]*", "--always", "--dirty"); err == nil {
		version = b
	}
	pkgVersion := strings.TrimPrefix(version, "v")
	if pkgVersion[0] < '0' || pkgVersion[0] > '9' {
		pkgVersion = "0.0.0+git." + pkgVersion
	}
	if want := filepath.Join(out, "herald_"+pkgVersion+"_amd64.deb"); deb != want {
		t.Errorf("package %s, want %s", deb, want)
	}
	if want := filepath.Join(out, "herald_"+pkgVersion+"_linux_amd64.tar.gz"); tarball != want {
		t.Errorf("tarball %s, want %s", tarball, want)
	}

	// The control fields and maintainer scripts.
	for field, want := range map[string]string{"Package": "herald", "Version": pkgVersion, "Architecture": "amd64"} {
		if got := distRun(t, "dpkg-deb", "--field", deb, field); strings.TrimSpace(got) != want {
			t.Errorf("dpkg-deb --field %s = %q, want %q", field, strings.TrimSpace(got), want)
		}
	}
	if info := distRun(t, "dpkg-deb", "--info", deb); !strings.Contains(info, " postinst") || !strings.Contains(info, " conffiles") {
		t.Errorf("dpkg-deb --info lists no postinst or conffiles:\n%s", info)
	}
	ctrl := t.TempDir()
	distRun(t, "dpkg-deb", "--control", deb, ctrl)
	conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff("/etc/herald/herald.env\n/etc/herald/herald.hcl\n/etc/herald/rules/herald.hcl\n", string(conffiles)); d != "" {
		t.Errorf("conffiles (-want +got):\n%s", d)
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		p := filepath.Join(ctrl, s)
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("maintainer script %s: %v, want mode 0755", s, err)
			continue
		}
		distRun(t, "sh", "-n", p)
	}

	// Every file root's, with the modes the layout needs.
	contents := debContents(t, deb)
	want := map[string]string{
		"./usr/bin/herald":                                  "-rwxr-xr-x",
		"./etc/herald/herald.hcl":                           "-rw-r--r--",
		"./etc/herald/herald.env":                           "-rw-r-----",
		"./etc/herald/rules/herald.hcl":                     "-rw-r-----",
		"./etc/herald/rules/":                               "drwxr-x---",
		"./etc/herald/keys/":                                "drwxr-x---",
		"./lib/systemd/system/herald.service":               "-rw-r--r--",
		"./usr/share/doc/herald/README.md":                  "-rw-r--r--",
		"./usr/share/doc/herald/docs/deploy.md":             "-rw-r--r--",
		"./usr/lib/herald/plugins/":                         "drwxr-xr-x",
		"./usr/share/doc/herald/examples/rules/herald.yaml": "-rw-r--r--",
	}
	for p := range distPlugins {
		want["./usr/lib/herald/plugins/herald-plugin-"+p] = "-rwxr-xr-x"
	}
	for path, mode := range want {
		got, ok := contents[path]
		if !ok {
			t.Errorf("the package has no %s", path)
		} else if got != mode+" root/root" {
			t.Errorf("%s is %s, want %s root/root", path, got, mode)
		}
	}
	for path, mo := range contents {
		if !strings.HasSuffix(mo, " root/root") {
			t.Errorf("%s is %s, want owner root/root", path, mo)
		}
	}
	// No private key: no key file anywhere, and no /etc file holds one
	// (read below, from the unpacked package).
	for path := range contents {
		if strings.HasSuffix(path, ".p8") || strings.HasSuffix(path, ".pem") || strings.HasSuffix(path, ".key") ||
			(strings.HasPrefix(path, "./etc/herald/keys/") && path != "./etc/herald/keys/") {
			t.Errorf("the package ships %s, a private key", path)
		}
	}
	if n := distCountPrefix(contents, "./usr/lib/herald/plugins/herald-plugin-"); n != len(distPlugins) {
		t.Errorf("the package holds %d plugins, want %d", n, len(distPlugins))
	}

	// dpkg itself unpacks it into a throw-away root and knows its files
	// and conffiles (configure would run postinst: users, systemctl).
	dpkgRoot := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(dpkgRoot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
		if err := os.WriteFile(filepath.Join(dpkgRoot, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dpkg := func(args ...string) string {
		return distRun(t, "dpkg", append([]string{"--root=" + dpkgRoot, "--force-not-root", "--force-script-chrootless", "--log=/dev/null"}, args...)...)
	}
	dpkg("--unpack", deb)
	status := dpkg("--status", "herald")
	for _, w := range []string{"Status: install ok unpacked", "Version: " + pkgVersion, " /etc/herald/herald.hcl "} {
		if !strings.Contains(status, w) {
			t.Errorf("dpkg --status herald lacks %q:\n%s", w, status)
		}
	}
	listed := dpkg("--listfiles", "herald")
	for path := range want {
		if p := strings.TrimSuffix(strings.TrimPrefix(path, "."), "/"); !slices.Contains(strings.Split(listed, "\n"), p) {
			t.Errorf("dpkg --listfiles herald lacks %s", p)
		}
	}

	// The files as dpkg-deb -x lays them out, and the same bytes in the
	// tarball.
	root := t.TempDir()
	distRun(t, "dpkg-deb", "-x", deb, root)
	tarRoot := t.TempDir()
	distRun(t, "tar", "-xzf", tarball, "-C", tarRoot)
	tarTop := filepath.Join(tarRoot, "herald_"+pkgVersion+"_linux_amd64")
	for path := range want {
		if strings.HasSuffix(path, "/") {
			continue
		}
		if a, b := distFileSum(t, filepath.Join(root, path)), distFileSum(t, filepath.Join(tarTop, path)); a != b {
			t.Errorf("%s differs between the package and the tarball", path)
		}
	}
	if fi, err := os.Stat(filepath.Join(tarTop, "postinst")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("the tarball's postinst: %v, want an executable", err)
	}

	if err := filepath.WalkDir(filepath.Join(root, "etc"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, k := range []string{"PRIVATE KEY", "private_key", "apns_key "} {
			if strings.Contains(string(b), k) {
				t.Errorf("%s holds %q: the package installs no private key", p, k)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	herald := filepath.Join(root, "usr/bin/herald")
	t.Run("version", func(t *testing.T) {
		var got struct {
			Version          string `json:"version"`
			Commit           string `json:"commit"`
			BuildDate        string `json:"build_date"`
			GoVersion        string `json:"go_version"`
			Platform         string `json:"platform"`
			SDKVersion       string `json:"sdk_version"`
			ProtocolVersions []int  `json:"protocol_versions"`
		}
		if err := json.Unmarshal([]byte(distRun(t, herald, "version", "--json")), &got); err != nil {
			t.Fatalf("herald version --json: %v", err)
		}
		commit, err := distGit(repo, "rev-parse", "HEAD")
		if err != nil {
			commit = "unknown"
		}
		if got.Version != version || !strings.HasPrefix(got.Commit, commit) || got.GoVersion != runtime.Version() ||
			got.Platform != "linux/amd64" || got.SDKVersion != sdk.Version || !slices.Equal(got.ProtocolVersions, sdkhost.ProtocolVersions) {
			t.Errorf("herald version --json = %+v, want version %s, commit %s, %s, linux/amd64, sdk %s, protocols %v",
				got, version, commit, runtime.Version(), sdk.Version, sdkhost.ProtocolVersions)
		}
		if _, err := time.Parse(time.RFC3339, got.BuildDate); err != nil {
			t.Errorf("build_date %q: %v", got.BuildDate, err)
		}
		if text := distRun(t, herald, "version"); !strings.HasPrefix(text, "herald "+version+"\n") {
			t.Errorf("herald version printed %q", text)
		}
	})
	t.Run("doctor help", func(t *testing.T) {
		help := distRun(t, herald, "doctor", "--help")
		if !strings.Contains(help, "Usage:\n  herald doctor") || !strings.Contains(help, "--config") {
			t.Errorf("herald doctor --help printed:\n%s", help)
		}
	})
	t.Run("plugins", func(t *testing.T) {
		for name, channel := range distPlugins {
			bin := filepath.Join(root, "usr/lib/herald/plugins/herald-plugin-"+name)
			fi, err := os.Stat(bin)
			if err != nil {
				t.Error(err)
				continue
			}
			if m := fi.Mode().Perm(); m&0o111 != 0o111 || m&0o022 != 0 {
				t.Errorf("%s has mode %04o, want executable by all and writable by its owner only", bin, m)
			}
			d := distDescribe(t, bin)
			if d.ChannelType != channel || d.PluginVersion != version {
				t.Errorf("%s describes channel %q version %q, want %q version %q", bin, d.ChannelType, d.PluginVersion, channel, version)
			}
		}
	})
	t.Run("config", func(t *testing.T) {
		cfg := filepath.Join(root, "etc/herald/herald.hcl")
		// postinst writes the admin token the config names.
		token := filepath.Join(root, "etc/herald/admin.token")
		if err := os.WriteFile(token, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(token) })
		for _, k := range []string{"HERALD_PLUGINS_DIR", "HERALD_RULES", "HERALD_HTTP_ADMIN_TOKEN_FILE"} {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
		d, err := config.LoadDaemon(cfg)
		if err != nil {
			t.Fatalf("the packaged config: %v", err)
		}
		if d.Plugins.Dir != "/usr/lib/herald/plugins" {
			t.Errorf("plugins.dir = %q, want /usr/lib/herald/plugins", d.Plugins.Dir)
		}
		if want := []string{filepath.Join(root, "etc/herald/rules/herald.hcl")}; !slices.Equal(d.Rules, want) {
			t.Errorf("rules = %q, want %q", d.Rules, want)
		}
		if want := filepath.Join(root, "etc/herald/admin.token"); d.HTTP.AdminTokenFile != want {
			t.Errorf("http.admin_token_file = %q, want %q", d.HTTP.AdminTokenFile, want)
		}
		distRun(t, herald, "rules", "check", filepath.Join(root, "etc/herald/rules/herald.hcl"))
		// doctor's config check, as an operator runs it; the database and
		// broker are pointed at a closed port.
		doctor := exec.Command(herald, "doctor", "--config", cfg, "--json", "--timeout", "3s")
		doctor.Env = append(os.Environ(), "HERALD_DATABASE_URL=postgres://herald@127.0.0.1:1/herald?sslmode=disable", "HERALD_AMQP_URL=amqp://guest:guest@127.0.0.1:1/")
		b, _ := doctor.Output()
		var checks []struct{ Status, Check, Detail string }
		if err := json.Unmarshal(b, &checks); err != nil || len(checks) == 0 {
			t.Fatalf("herald doctor --json: %v: %s", err, b)
		}
		if checks[0].Check != "config" || checks[0].Status != "ok" {
			t.Errorf("herald doctor's config check: %+v", checks[0])
		}
	})
	t.Run("maintainer scripts", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the maintainer scripts run as root, in a private mount namespace: not root")
		}
		if out, err := exec.Command("unshare", "--mount", "true").CombinedOutput(); err != nil {
			t.Skipf("the maintainer scripts run in a private mount namespace, which this machine refuses: unshare --mount: %v: %s", err, out)
		}
		variants := []string{"useradd"}
		if _, err := os.Stat("/usr/sbin/adduser"); err == nil {
			variants = append(variants, "adduser")
		}
		for _, v := range variants {
			t.Run(v, func(t *testing.T) { distMaintainerScripts(t, ctrl, filepath.Join(root, "etc/herald"), v) })
		}
	})
	t.Run("unit", func(t *testing.T) {
		unit := filepath.Join(root, "lib/systemd/system/herald.service")
		directives := unitDirectives(t, unit)
		for key, want := range map[string]string{
			"User":                    "herald",
			"ExecStart":               "/usr/bin/herald serve --config /etc/herald/herald.hcl",
			"EnvironmentFile":         "-/etc/herald/herald.env",
			"Restart":                 "on-failure",
			"ProtectSystem":           "strict",
			"ProtectHome":             "yes",
			"PrivateTmp":              "yes",
			"NoNewPrivileges":         "yes",
			"CapabilityBoundingSet":   "",
			"ReadWritePaths":          "/var/lib/herald",
			"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
			"KillMode":                "mixed",
			// The last of the filter's lines: Landlock's calls for the
			// plugins' sandbox, on top of @system-service.
			"SystemCallFilter": "landlock_create_ruleset landlock_add_rule landlock_restrict_self",
		} {
			if got, ok := directives[key]; !ok || got != want {
				t.Errorf("%s=%q (set: %v), want %q", key, got, ok, want)
			}
		}
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze is not installed: the unit's directives are checked, systemd does not verify it")
		}
		// verify checks that ExecStart's binary exists: a copy of the unit
		// names the extracted herald instead. (--root would need the
		// systemd units it depends on inside the throw-away root.)
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(t.TempDir(), "herald.service")
		b = bytes.ReplaceAll(b, []byte("ExecStart=/usr/bin/herald "), []byte("ExecStart="+herald+" "))
		if err := os.WriteFile(cp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// It exits 0 on a directive it cannot parse, but says so.
		out, err := exec.Command(analyze, "verify", "--man=no", cp).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", cp, err, out)
		}
	})
}

// distRun runs name with args and returns its standard output; a failure
// fails the test with the standard error.
func distRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func distGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	return strings.TrimSpace(string(b)), err
}

// debContents maps each path of dpkg-deb --contents to "MODE OWNER".
func debContents(t *testing.T, deb string) map[string]string {
	t.Helper()
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(distRun(t, "dpkg-deb", "--contents", deb)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents line %q", sc.Text())
		}
		m[f[5]] = f[0] + " " + f[1]
	}
	return m
}

func distCountPrefix(m map[string]string, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

func distFileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// distDescribe launches bin through go-plugin as the plugin host does
// and returns its Description.
func distDescribe(t *testing.T, bin string) sdk.Description {
	t.Helper()
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sdkhost.PluginSet(),
		Cmd:              exec.Command(bin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		Logger:           hclog.NewNullLogger(),
		StartTimeout:     30 * time.Second,
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("launch %s: %v", bin, err)
	}
	ch, err := sdkhost.Dispense(rpc)
	if err != nil {
		t.Fatalf("dispense %s: %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := ch.Describe(ctx, sdk.DescribeRequest{})
	if err != nil {
		t.Fatalf("describe %s: %v", bin, err)
	}
	if ch.ProtocolVersion() != sdk.ProtocolVersion {
		t.Errorf("%s negotiated protocol %d, want %d", bin, ch.ProtocolVersion(), sdk.ProtocolVersion)
	}
	return resp.Description
}

// unitDirectives reads the KEY=VALUE lines of a unit file; a key set twice
// keeps its last value.
func unitDirectives(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: line %q is not KEY=VALUE", path, line)
			continue
		}
		m[k] = v
	}
	return m
}

// distMaintainerScriptsSh runs the package's maintainer scripts as dpkg
// would on install, upgrade, remove and purge, in a mount namespace of its
// own where /etc is a copy and /var/lib and /run are empty: the herald user
// they create, the files they write and remove never reach the machine.
// With VARIANT=useradd, adduser is hidden so that postinst falls back to
// useradd.
const distMaintainerScriptsSh = `set -eu
mount --make-rprivate /
mount --bind "$ETC" /etc
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /run
if [ "$VARIANT" = useradd ] && [ -e /usr/sbin/adduser ]; then
	mount --bind /dev/null /usr/sbin/adduser
fi
cp -a "$PKGETC" /etc/herald
"$CTRL/postinst" configure
echo "user $(getent passwd herald | cut -d: -f1,6,7)"
echo "group $(getent group herald | cut -d: -f1)"
stat -c 'mode %n %a %U:%G' /etc/herald/admin.token /etc/herald/herald.env /var/lib/herald \
	/etc/herald/rules /etc/herald/rules/herald.hcl /etc/herald/keys
echo "token $(cat /etc/herald/admin.token)"
"$CTRL/postinst" configure 0.0.1
echo "kept $(cat /etc/herald/admin.token)"
"$CTRL/prerm" remove
"$CTRL/postrm" purge
[ -e /etc/herald/admin.token ] || echo "purged token"
[ -e /var/lib/herald ] || echo "purged state"
echo "user after purge $(getent passwd herald | cut -d: -f1)"
`

// distMaintainerScripts runs distMaintainerScriptsSh with the control files
// in ctrl and the package's /etc/herald in pkgEtc, and checks what the
// scripts did.
func distMaintainerScripts(t *testing.T, ctrl, pkgEtc, variant string) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	distRun(t, "cp", "-a", "/etc", etc)
	if _, err := os.Stat(filepath.Join(etc, "herald")); err == nil {
		t.Fatalf("this machine has /etc/herald: the scripts would meet its files")
	}
	cmd := exec.Command("unshare", "--mount", "sh", "-c", distMaintainerScriptsSh)
	cmd.Env = append(os.Environ(), "ETC="+etc, "PKGETC="+pkgEtc, "CTRL="+ctrl, "VARIANT="+variant)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("maintainer scripts (%s): %v\n%s", variant, err, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(l, "mode "):
			f := strings.Fields(l)
			lines[f[1]] = strings.Join(f[2:], " ")
		case strings.HasPrefix(l, "token "), strings.HasPrefix(l, "kept "), strings.HasPrefix(l, "user after purge "):
			k, v, _ := strings.Cut(l, " ")
			if strings.HasPrefix(l, "user after purge ") {
				k, v = "user after purge", strings.TrimPrefix(l, "user after purge ")
			}
			lines[k] = v
		default:
			lines[l] = "seen"
		}
	}
	for k, want := range map[string]string{
		"user herald:/var/lib/herald:/usr/sbin/nologin": "seen",
		"group herald":                 "seen",
		"/etc/herald/admin.token":      "600 herald:herald",
		"/etc/herald/herald.env":       "640 root:herald",
		"/var/lib/herald":              "750 herald:herald",
		"/etc/herald/rules":            "750 root:herald",
		"/etc/herald/rules/herald.hcl": "640 root:herald",
		"/etc/herald/keys":             "750 root:herald",
		"purged token":                 "seen",
		"purged state":                 "seen",
		"user after purge":             "herald",
	} {
		if lines[k] != want {
			t.Errorf("%s: %q, want %q; the scripts printed\n%s", k, lines[k], want, out)
		}
	}
	tok := lines["token"]
	if len(tok) != 64 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Errorf("admin token %q, want 64 hex digits", tok)
	}
	if lines["kept"] != tok {
		t.Errorf("an upgrade's postinst replaced the admin token %q with %q", tok, lines["kept"])
	}
}
