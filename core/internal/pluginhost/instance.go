package pluginhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/heraldhq/herald/sdk"
	sdkhost "github.com/heraldhq/herald/sdk/host"
)

// BinaryPrefix starts the file name of every plugin binary.
const BinaryPrefix = "herald-plugin-"

// Binary is a plugin binary found in the plugin directory.
type Binary struct {
	// Name is the plugin's short name ("email").
	Name string `json:"name"`
	// Path is the binary's path.
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// Discover lists the herald-plugin-* executables in dir, by name.
func Discover(dir string) ([]Binary, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pluginhost: discover: %w", err)
	}
	var out []Binary
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
		if !ok || name == "" || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			continue
		}
		out = append(out, Binary{Name: name, Path: filepath.Join(dir, e.Name()), Size: info.Size(), ModTime: info.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func binaryPath(dir, plugin string) string {
	return filepath.Join(dir, BinaryPrefix+plugin)
}

func validPluginName(name string) error {
	if name == "" {
		return errors.New("a provider names no plugin")
	}
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fmt.Errorf("plugin name %q must be a bare name such as \"email\"", name)
	}
	return nil
}

// fileStamp identifies one version of a binary.
type fileStamp struct {
	size    int64
	modTime time.Time
	sum     string
}

// stampFile stats path and hashes it unless size and mtime equal prev's.
func stampFile(path string, prev fileStamp) (fileStamp, error) {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	if prev.sum != "" && info.Size() == prev.size && info.ModTime().Equal(prev.modTime) {
		return prev, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fileStamp{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: info.Size(), modTime: info.ModTime(), sum: hex.EncodeToString(h.Sum(nil))}, nil
}

// instance is one running plugin process.
type instance struct {
	client  *plugin.Client
	ch      sdk.Channel
	desc    sdk.Description
	pid     int
	started time.Time
	// path is where the binary the process runs was copied from: the
	// plugin's path, or the kept copy of the last good version.
	path string
	// exe is the host's private copy that the process executes, which
	// has stamp.sum; kill releases it.
	exe   string
	stamp fileStamp
	// done is closed when the process has exited.
	done <-chan struct{}
	// releaseExe drops the instance's reference to exe.
	releaseExe func()
	// hostPipe is the write end of the pipe whose read end the plugin
	// watches (sdk.EnvHostFD): the host never writes to it, and the
	// kernel closes it when the host dies, so the plugin stops at once.
	hostPipe *os.File

	mu       sync.Mutex
	active   int
	draining bool
	idle     chan struct{}
}

// acquire registers an in-flight call; it fails once draining started.
func (i *instance) acquire() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.draining {
		return false
	}
	i.active++
	return true
}

func (i *instance) release() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.active--
	if i.draining && i.active == 0 && i.idle != nil {
		close(i.idle)
		i.idle = nil
	}
}

// drain refuses new calls and waits for in-flight ones, or ctx.
func (i *instance) drain(ctx context.Context) error {
	i.mu.Lock()
	i.draining = true
	if i.active == 0 {
		i.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	i.idle = idle
	i.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-i.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill stops the process (gracefully through go-plugin, then SIGKILL),
// waits for it, and releases the private copy it ran.
func (i *instance) kill() {
	i.client.Kill()
	if i.hostPipe != nil {
		_ = i.hostPipe.Close()
	}
	i.releaseExe()
}

// launch starts the provider's plugin binary, or kept (the kept copy of
// the last good version) when not nil, and walks it through the lifecycle
// up to a passing health check: permission checks, private copy,
// checksum, handshake, Describe, channel type check, CheckConfig,
// Configure, Health. It returns the stamp of the binary it tried (zero
// when it could not read it).
//
// The process never runs the file at the plugin's path: launch copies the
// binary into the keeper's private directory, hashing it in the same read,
// checks the pin against that hash and executes the copy, so a file
// renamed over the plugin's path at any moment cannot run unchecked.
func (p *provider) launch(ctx context.Context, kept *keptBinary) (*instance, fileStamp, error) {
	src := p.binaryPath()
	var cp binCopy
	var err error
	if kept != nil {
		src = kept.path
		cp, err = p.h.keeper.copy(src, p.cfg.Plugin, nil)
		if err == nil && cp.stamp.sum != kept.sum {
			p.h.keeper.release(cp.path)
			err = fmt.Errorf("sha256 %s, kept as %s", cp.stamp.sum, kept.sum)
		}
		if err != nil {
			return nil, fileStamp{}, fmt.Errorf("%s: %w: %v", src, errKeptCopyBad, err)
		}
	} else {
		cp, err = p.copyBinary(src)
		if err != nil {
			return nil, fileStamp{}, err
		}
		p.mu.Lock()
		p.lastSeen = cp.stamp
		p.mu.Unlock()
	}
	stamp := cp.stamp
	release := sync.OnceFunc(func() { p.h.keeper.release(cp.path) })
	var secure *plugin.SecureConfig
	if p.cfg.Checksum != "" {
		want, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(p.cfg.Checksum), "sha256:"))
		if err != nil || len(want) != sha256.Size {
			release()
			return nil, stamp, refused("checksum %q is not a hex SHA-256", p.cfg.Checksum)
		}
		if hex.EncodeToString(want) != stamp.sum {
			release()
			return nil, stamp, refused("checksum mismatch: %s has sha256 %s, config pins %s", src, stamp.sum, hex.EncodeToString(want))
		}
		// go-plugin hashes the private copy once more before it runs it.
		secure = &plugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	}
	level := p.h.log.GetLevel()
	if level == hclog.NoLevel || level == hclog.Off {
		level = hclog.Info
	}
	// The plugin inherits the read end of a pipe as fd 3 and exits the
	// moment it reads EOF: when this process dies, however it dies, the
	// kernel closes the write end, which no other process holds (os.Pipe
	// makes both ends close-on-exec; only ExtraFiles passes one on).
	hostR, hostW, err := os.Pipe()
	if err != nil {
		release()
		return nil, stamp, fmt.Errorf("launch %s: host pipe: %w", src, err)
	}
	cmd := exec.Command(cp.path)
	cmd.ExtraFiles = []*os.File{hostR}
	cmd.Env = pluginEnv(p.h.cfg.Env, level)
	checked, cleanup, err := p.h.confine(cmd, cp.path, stamp.sum)
	if err != nil {
		_ = hostR.Close()
		_ = hostW.Close()
		release()
		return nil, stamp, err
	}
	if checked {
		// The sandbox helper hashes the binary before it executes it;
		// go-plugin would hash the helper.
		secure = nil
	}
	releaseCopy := release
	release = sync.OnceFunc(func() { releaseCopy(); cleanup() })
	plog := newPluginLogger(p.log, p.logLim)
	stderr := newStderrLog(plog)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sdkhost.PluginSet(),
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		// The plugin gets cmd.Env and go-plugin's protocol variables,
		// never the rest of the host's environment.
		SkipHostEnv: true,
		// The plugin's own log lines, re-emitted under the provider's
		// names without repeating them (pluginLogger).
		Logger:       plog,
		StartTimeout: p.h.cfg.StartTimeout,
		// Stderr sees every line the plugin writes to stderr; go-plugin
		// re-emits only its JSON log lines above debug level, so what a
		// broken binary prints before it dies is logged from here.
		Stderr: stderr,
	})
	inst, err := p.handshake(ctx, client, src, stamp)
	_ = hostR.Close() // the child has its copy (or never started)
	if err != nil {
		client.Kill()
		_ = hostW.Close()
		release()
		if tail := stderr.tail(); tail != "" {
			err = fmt.Errorf("%w; plugin stderr: %s", err, tail)
		}
		return nil, stamp, err
	}
	inst.exe, inst.releaseExe, inst.hostPipe = cp.path, release, hostW
	return inst, stamp, nil
}

// copyBinary checks the plugin directory and the binary at src, in the
// plugin directory, and copies it into the keeper (see keeper.copy).
// Every failure but one of the keeper's own directory is refused: it
// waits for the operator.
func (p *provider) copyBinary(src string) (binCopy, error) {
	check := checkBinary
	if p.h.cfg.InsecurePermissions {
		check = nil
	} else if err := checkDir(p.h.cfg.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return binCopy{}, p.refusedPermission(err)
	}
	cp, err := p.h.keeper.copy(src, p.cfg.Plugin, check)
	var pe *permissionError
	var ce *copyError
	switch {
	case err == nil:
		return cp, nil
	case errors.As(err, &ce), errors.Is(err, ErrClosed):
		return binCopy{}, err
	case errors.As(err, &pe):
		return binCopy{}, p.refusedPermission(err)
	case errors.Is(err, os.ErrNotExist):
		return binCopy{}, refused("plugin binary %s not found (plugin directory %s)", src, p.h.cfg.Dir)
	}
	return binCopy{}, refused("plugin binary %s: %v", src, err)
}

// refusedPermission refuses a binary or directory that fails the
// permission checks.
func (p *provider) refusedPermission(err error) error {
	return refused("not running plugin %s: %w; fix the owner or mode and run `herald plugins reload %s`, or set plugins.insecure_permissions = true (development only)",
		p.cfg.Plugin, err, p.cfg.Plugin)
}

func (p *provider) handshake(ctx context.Context, client *plugin.Client, path string, stamp fileStamp) (*instance, error) {
	rpc, err := client.Client()
	if err != nil {
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return nil, refused("checksum mismatch: %s changed before it was run: %v", path, err)
		}
		return nil, fmt.Errorf("launch %s: %w", path, err)
	}
	if v := client.NegotiatedVersion(); !slices.Contains(sdkhost.ProtocolVersions, v) {
		return nil, refused("plugin speaks protocol version %d, host serves %v", v, sdkhost.ProtocolVersions)
	}
	ch, err := sdkhost.Dispense(rpc)
	if err != nil {
		return nil, err
	}
	pid, _ := strconv.Atoi(client.ID())
	inst := &instance{client: client, ch: ch, pid: pid, started: time.Now(), path: path, stamp: stamp}
	inst.done = ch.Done()

	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, p.h.cfg.CallTimeout) }
	cctx, cancel := call()
	described, err := ch.Describe(cctx, sdk.DescribeRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("describe: %w", err)
	}
	desc := described.Description
	inst.desc = desc
	// From here on the plugin may see (and log, or echo in an error) its
	// secrets: register them first.
	p.h.cfg.Redactor.Add(secretValues(desc.Config, p.cfg.Config)...)
	if desc.ChannelType != sdk.AnyChannel && !strings.EqualFold(desc.ChannelType, p.channel) {
		return nil, refused("plugin %s provides channel %q, configured for channel %q", p.cfg.Plugin, desc.ChannelType, p.channel)
	}
	checked, err := sdk.CheckConfig(desc.Config, p.cfg.Config)
	if err != nil {
		return nil, refused("channel %q provider %q: %w", p.channel, p.name, err)
	}
	cctx, cancel = call()
	_, err = ch.Configure(cctx, sdk.ConfigureRequest{ProviderName: p.name, Config: checked, HostCapabilities: hostCapabilities(p.h.cfg.HostCapabilities)})
	cancel()
	var ce *sdk.ConfigError
	if errors.As(err, &ce) {
		return nil, refused("channel %q provider %q: %w", p.channel, p.name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("configure: %w", err)
	}
	cctx, cancel = call()
	rep, err := ch.Health(cctx, sdk.HealthRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	if !rep.Healthy {
		return nil, fmt.Errorf("health check failed: %s", rep.Message)
	}
	inst.started = time.Now()
	return inst, nil
}

// secretValues returns the values cfg gives the fields specs marks Secret,
// as text (each item of a list).
func secretValues(specs []sdk.FieldSpec, cfg map[string]any) []string {
	var out []string
	for _, s := range specs {
		if !s.Secret {
			continue
		}
		switch v := cfg[s.Name].(type) {
		case nil:
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		case map[string]string:
			for _, x := range v {
				out = append(out, x)
			}
		case map[string]any:
			for _, x := range v {
				out = append(out, fmt.Sprint(x))
			}
		case []any:
			for _, x := range v {
				out = append(out, fmt.Sprint(x))
			}
		default:
			out = append(out, fmt.Sprint(v))
		}
	}
	return out
}

// stderrLog receives the raw stderr of a plugin process from go-plugin
// (ClientConfig.Stderr), which writes each line and then its newline. It
// logs, under the provider's logger (plugin=<name>), the lines go-plugin
// itself only logs at debug level: plain text that is neither an hclog
// JSON line nor prefixed with a level such as "[ERROR]" nor part of a
// panic. That is what a broken binary prints before it dies (a missing
// library, a bad flag, a panic in init before the sdk's logger runs). It
// also keeps the last few of those lines, and of the panic's, for the
// launch error.
type stderrLog struct {
	log hclog.Logger

	mu      sync.Mutex
	partial []byte
	inPanic bool
	last    []string
}

// Limits of what stderrLog keeps for the launch error.
const (
	stderrTailLines = 5
	stderrLineMax   = 512
)

func newStderrLog(log hclog.Logger) *stderrLog { return &stderrLog{log: log} }

func (s *stderrLog) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rest := b
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(s.partial) < 64<<10 {
				s.partial = append(s.partial, rest...)
			}
			break
		}
		line := append(s.partial, rest[:i]...)
		s.partial = nil
		rest = rest[i+1:]
		s.line(string(line))
	}
	return len(b), nil
}

// line handles one complete line; s.mu is held.
func (s *stderrLog) line(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	if len(line) > stderrLineMax {
		line = line[:stderrLineMax] + "…"
	}
	if strings.HasPrefix(line, "{") && json.Valid([]byte(line)) {
		return // an hclog line: go-plugin re-emits it at its level
	}
	s.last = append(s.last, line)
	if len(s.last) > stderrTailLines {
		s.last = s.last[1:]
	}
	switch {
	case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
		s.inPanic = true
		return // go-plugin logs panics at error level
	case s.inPanic:
		return
	}
	for _, pre := range []string{"[INFO]", "[WARN]", "[ERROR]", "[DEBUG]", "[TRACE]"} {
		if strings.HasPrefix(line, pre) {
			return // go-plugin logs it at that level
		}
	}
	s.log.Warn("plugin wrote to stderr", "line", line)
}

// tail returns the last lines the plugin wrote to stderr, joined by " | ".
func (s *stderrLog) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.last, " | ")
}

// hostCapabilities is what the host tells each plugin it supports: the
// configured list and the features this host always has (it records
// sdk.OutcomeSkipped as SKIPPED).
func hostCapabilities(configured []string) []string {
	out := append([]string{}, configured...)
	if !slices.Contains(out, sdk.HostCapabilitySkipped) {
		out = append(out, sdk.HostCapabilitySkipped)
	}
	return out
}
