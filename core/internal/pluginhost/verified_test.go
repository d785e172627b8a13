package pluginhost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// assertRunsPrivateCopy checks that the process of a serving provider
// executes the host's private copy of its binary: a file other than the
// plugin's, with the checksum the status gives, mode 0500 in directories
// of mode 0700 owned by the host's user, and the very file the kernel
// says the process runs.
func assertRunsPrivateCopy(t *testing.T, st ProviderStatus) {
	t.Helper()
	if st.PID <= 0 || st.Executable == "" || st.Executable == st.Binary {
		t.Fatalf("status %+v: want a process running a private copy", st)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	if exe != st.Executable {
		t.Errorf("plugin pid %d executes %s, status says %s", st.PID, exe, st.Executable)
	}
	if got := sha256File(t, st.Executable); got != st.SHA256 {
		t.Errorf("private copy %s has sha256 %s, status says %s", st.Executable, got, st.SHA256)
	}
	for path, mode := range map[string]os.FileMode{
		st.Executable:                             0o500,
		filepath.Dir(st.Executable):               os.ModeDir | 0o700,
		filepath.Dir(filepath.Dir(st.Executable)): os.ModeDir | 0o700,
	} {
		info, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != mode {
			t.Errorf("%s has mode %s, want %s", path, info.Mode(), mode)
		}
		if uid, _ := fileOwner(info); uid != os.Geteuid() {
			t.Errorf("%s is owned by uid %d, want the host's uid %d", path, uid, os.Geteuid())
		}
	}
}

// TestRenameRaceRunsOnlyVerifiedBytes renames two binaries over the
// plugin's path as fast as it can, the pinned sink and an unpinned build of
// it that leaves a marker file as soon as it starts, while the provider is
// reloaded again and again. Every reload either runs the pinned bytes or
// is refused for a checksum mismatch, the unpinned build never runs, the
// pinned version serves throughout from a private copy, and the copies of
// the processes that stopped are removed.
func TestRenameRaceRunsOnlyVerifiedBytes(t *testing.T) {
	t.Parallel()
	const rounds = 40
	stage := t.TempDir()
	marker := filepath.Join(t.TempDir(), "unpinned-binary-ran")
	// Both files are in stage, on the plugin directory's filesystem, so
	// that the renamer can hard-link them.
	evil := installPlugin(t, sinkVariant(t, "version=6.6.6-unpinned", "ranFile="+marker), stage, "evil")
	good := installPlugin(t, sinkVariant(t), stage, "good")
	sum := sha256File(t, good)
	keep := filepath.Join(t.TempDir(), "keep")
	env := startHost(t, []channel.Config{{Name: "TEST", Providers: []channel.Provider{{Plugin: "sink", Checksum: sum}}}},
		func(c *Config) { c.KeepDir = keep })
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateServing {
		t.Fatalf("pinned sink not serving: %+v", st)
	}

	// The renamer: hard links of the two files take turns at the plugin's
	// path, each put there by one rename, as a deploy (or an attacker with
	// write access to the directory) would.
	dst := binaryPath(env.dir, "sink")
	stop := make(chan struct{})
	done := make(chan error, 1)
	var renames atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			src := good
			if i%2 == 1 {
				src = evil
			}
			tmp := filepath.Join(env.dir, ".swap-"+strconv.Itoa(i))
			if err := os.Link(src, tmp); err != nil {
				done <- err
				return
			}
			if err := os.Rename(tmp, dst); err != nil {
				done <- err
				return
			}
			renames.Add(1)
			time.Sleep(50 * time.Microsecond) // pace it: leave the CPU to the reloads
		}
	}()
	stopRenamer := func() {
		select {
		case <-stop:
			return
		default:
		}
		close(stop)
		if err := <-done; err != nil {
			t.Fatalf("renamer: %v", err)
		}
	}
	defer stopRenamer()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var swapped, mismatched int
	for round := range rounds {
		err := env.h.Reload(ctx, "sink")
		if _, serr := os.Stat(marker); serr == nil {
			t.Fatalf("round %d: the unpinned binary ran (reload: %v)", round, err)
		}
		switch {
		case err == nil:
			swapped++
		case strings.Contains(err.Error(), "checksum mismatch") && strings.Contains(err.Error(), "keeps serving"):
			mismatched++
		default:
			t.Fatalf("reload %d: %v", round, err)
		}
		st := statusOf(t, env.h, "TEST", "sink")
		if st.State != StateServing || st.SHA256 != sum {
			t.Fatalf("round %d: status %+v, want the pinned binary (sha256 %s) serving", round, st, sum)
		}
		assertRunsPrivateCopy(t, st)
		batch := deliveries(fmt.Sprintf("r%d", round), 2)
		results, _, err := env.h.Send(ctx, "TEST", batch)
		if err != nil {
			t.Fatalf("round %d: send: %v", round, err)
		}
		allSent(t, batch, results)
	}
	stopRenamer()
	t.Logf("%d reloads: %d swapped to the pinned binary, %d refused its checksum; %d renames", rounds, swapped, mismatched, renames.Load())
	if swapped == 0 || mismatched == 0 {
		t.Errorf("the reloads never met one of the two files (%d swapped, %d refused): the race was not run", swapped, mismatched)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the unpinned binary ran")
	}

	// Only the serving process's copy is left once the swapped-out ones
	// have drained and stopped, and Close removes it.
	st := statusOf(t, env.h, "TEST", "sink")
	want := []string{filepath.Base(filepath.Dir(st.Executable)) + "/" + filepath.Base(st.Executable)}
	var got []string
	testenv.Eventually(t, 20*time.Second, func() bool {
		got = listTree(t, keep)
		return cmp.Equal(want, got)
	}, "the private directory holds only the serving copy %v: %v", want, &got)
	if err := env.h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := listTree(t, keep); len(got) != 0 {
		t.Errorf("private copies left after Close: %v", got)
	}
}

// listTree lists the files under dir, as paths relative to it, sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestPluginEnvironmentIsAllowListed starts the sink with the daemon's
// database URL, password included, in the host's environment: the plugin
// does not get it, nor any other variable outside the allow-list, but does
// get the allow-listed ones, the extra one the config names and the
// protocol's own.
func TestPluginEnvironmentIsAllowListed(t *testing.T) {
	// Not parallel: it sets this process's environment, the host's.
	const secret = "s3cret-db-password"
	t.Setenv("HERALD_DATABASE_URL", "postgres://herald:"+secret+"@db.example:5432/herald")
	t.Setenv("HERALD_TEST_UNLISTED", "not for plugins")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not for plugins either")
	t.Setenv("TZ", "Europe/Rome")
	t.Setenv("LC_TIME", "C.UTF-8")
	t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
	envFile := filepath.Join(t.TempDir(), "plugin.env")
	env := startHost(t, []channel.Config{sinkChannel("TEST", map[string]any{"env_file": envFile})},
		func(c *Config) { c.Env = []string{"HTTPS_PROXY"} })
	if st := statusOf(t, env.h, "TEST", "sink"); st.State != StateServing {
		t.Fatalf("sink not serving: %+v", st)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Fatalf("the plugin's environment holds the database password:\n%s", b)
	}
	var environ []string
	if err := json.Unmarshal(b, &environ); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		got[name] = val
	}
	want := map[string]string{
		"TZ":              "Europe/Rome",
		"LC_TIME":         "C.UTF-8",
		"HTTPS_PROXY":     "http://proxy.example:3128",
		"PATH":            os.Getenv("PATH"),
		sdk.EnvHostPID:    strconv.Itoa(os.Getpid()),
		sdk.EnvHostFD:     "3",
		sdk.EnvLogLevel:   "info",
		"PLUGIN_MIN_PORT": got["PLUGIN_MIN_PORT"],
	}
	for name, val := range want {
		if v, ok := got[name]; !ok || v != val {
			t.Errorf("plugin sees %s=%q (set: %v), want %q", name, v, ok, val)
		}
	}
	// Nothing else: every variable is allow-listed or go-plugin's own.
	allowed := map[string]bool{"HTTPS_PROXY": true, sdk.EnvHostPID: true, sdk.EnvHostFD: true, sdk.EnvLogLevel: true, sdk.Handshake.MagicCookieKey: true,
		"PLUGIN_MIN_PORT": true, "PLUGIN_MAX_PORT": true, "PLUGIN_PROTOCOL_VERSIONS": true, "PLUGIN_CLIENT_CERT": true}
	for _, n := range DefaultEnv {
		allowed[n] = true
	}
	for name := range got {
		if !allowed[name] && !strings.HasPrefix(name, "LC_") {
			t.Errorf("plugin sees %s, which is not allow-listed", name)
		}
	}
	for _, name := range []string{"HERALD_DATABASE_URL", "HERALD_TEST_UNLISTED", "AWS_SECRET_ACCESS_KEY"} {
		if _, ok := got[name]; ok {
			t.Errorf("plugin sees %s", name)
		}
	}
}

// TestEnvNamesValidated: Config.Env takes plain variable names, and never
// the daemon's HERALD_ variables or go-plugin's PLUGIN_ ones.
func TestEnvNamesValidated(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		name string
		want string // "" for valid
	}{
		"proxy":             {name: "HTTPS_PROXY"},
		"lower case":        {name: "no_proxy"},
		"database url":      {name: "HERALD_DATABASE_URL", want: "never passed to plugins"},
		"protocol":          {name: "PLUGIN_CLIENT_CERT", want: "go-plugin"},
		"empty":             {name: "", want: "empty"},
		"assignment":        {name: "A=B", want: "not a variable name"},
		"starts with digit": {name: "1A", want: "not a variable name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := New(Config{Dir: t.TempDir(), Env: []string{tc.name}})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("New with Env %q: %v", tc.name, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("New with Env %q: error %v, want one saying %q", tc.name, err, tc.want)
			}
		})
	}
}

// TestPermissionChecks: a plugin directory or binary that another user
// could write (group- or world-writable, owned by someone other than the
// host's user or root, or reached through a symbolic link into such a
// directory) is refused, with an error naming the path and its mode or
// owner, and the binary is never run; plugins.insecure_permissions turns
// the checks off. A private copy directory that is not private stops the
// launch too.
func TestPermissionChecks(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	tests := map[string]struct {
		// setup changes the plugin directory dir holding the binary bin.
		setup    func(t *testing.T, c *Config, dir, bin string)
		insecure bool
		rootOnly bool
		state    State
		want     []string
	}{
		"group-writable directory": {
			setup: func(t *testing.T, _ *Config, dir, _ string) { chmod(t, dir, 0o775) },
			state: StateRefused, want: []string{"plugin directory is writable by its group", "drwxrwxr-x"},
		},
		"world-writable directory": {
			setup: func(t *testing.T, _ *Config, dir, _ string) { chmod(t, dir, 0o757) },
			state: StateRefused, want: []string{"plugin directory is writable by others", "drwxr-xrwx"},
		},
		"group-writable binary": {
			setup: func(t *testing.T, _ *Config, _, bin string) { chmod(t, bin, 0o775) },
			state: StateRefused, want: []string{"herald-plugin-sink: plugin binary is writable by its group", "-rwxrwxr-x"},
		},
		"world-writable binary": {
			setup: func(t *testing.T, _ *Config, _, bin string) { chmod(t, bin, 0o777) },
			state: StateRefused, want: []string{"plugin binary is writable by its group and others", "-rwxrwxrwx"},
		},
		"binary linked from a world-writable directory": {
			setup: func(t *testing.T, _ *Config, _, bin string) {
				other := t.TempDir()
				chmod(t, other, 0o777)
				target := installPlugin(t, bin, other, "sink")
				if err := os.Remove(bin); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, bin); err != nil {
					t.Fatal(err)
				}
			},
			state: StateRefused, want: []string{"links to", "directory of the file it links to is writable by its group and others", "drwxrwxrwx"},
		},
		"binary owned by another user": {
			rootOnly: true,
			setup:    func(t *testing.T, _ *Config, _, bin string) { chown(t, bin, 4242) },
			state:    StateRefused, want: []string{"herald-plugin-sink: plugin binary is owned by uid 4242, not by herald's user (uid 0) or root"},
		},
		"directory owned by another user": {
			rootOnly: true,
			setup:    func(t *testing.T, _ *Config, dir, _ string) { chown(t, dir, 4242) },
			state:    StateRefused, want: []string{"plugin directory is owned by uid 4242"},
		},
		"insecure permissions allowed for development": {
			setup: func(t *testing.T, _ *Config, dir, bin string) {
				chmod(t, dir, 0o777)
				chmod(t, bin, 0o777)
			},
			insecure: true,
			state:    StateServing,
		},
		"private copy directory writable by others": {
			setup: func(t *testing.T, c *Config, _, _ string) {
				c.KeepDir = t.TempDir()
				chmod(t, c.KeepDir, 0o777)
			},
			state: StateRestarting, want: []string{"private copy of", "writable by group or others (mode drwxrwxrwx)"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if tc.rootOnly && !root {
				t.Skip("changing a file's owner needs root")
			}
			env := startHost(t, []channel.Config{sinkChannel("TEST", nil)}, func(c *Config) {
				c.InsecurePermissions = tc.insecure
				tc.setup(t, c, c.Dir, binaryPath(c.Dir, "sink"))
			})
			st := statusOf(t, env.h, "TEST", "sink")
			if st.State != tc.state {
				t.Fatalf("state %s (%s), want %s", st.State, st.LastError, tc.state)
			}
			for _, w := range tc.want {
				if !strings.Contains(st.LastError, w) {
					t.Errorf("last error %q lacks %q", st.LastError, w)
				}
			}
			if tc.state == StateRefused {
				for _, w := range []string{env.dir, "plugins.insecure_permissions", "herald plugins reload sink"} {
					if !strings.Contains(st.LastError, w) {
						t.Errorf("last error %q lacks %q", st.LastError, w)
					}
				}
			}
			if tc.state != StateServing && strings.Contains(env.logs.String(), "sink plugin starting") {
				t.Errorf("the refused binary ran")
			}
			if tc.insecure && !strings.Contains(env.logs.String(), "plugin permission checks are off") {
				t.Errorf("log does not warn that the checks are off")
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}
