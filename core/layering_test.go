package core_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layering of the core, checked on the import graph that `go list`
// reports (the same graph the compiler builds):
//
//   - the rules engine is pure: it, and the packages of the module it
//     depends on (channel, directory, backoff, durfmt), import no I/O package (network,
//     database, broker, processes, plugins, file watching), and the
//     engine depends on no other package of the module;
//   - the plugin host and the store do not depend on the engine: the
//     domain types they share with it live in channel and directory;
//   - the product never imports tooling: only the CLI (and the commands
//     under core/cmd) import core/internal/tools/...; tests may;
//   - only tests import the test helpers: no non-test file outside
//     core/internal/testenv imports it;
//   - retries go through channel.RetryPolicy: only channel (and the
//     broker, for its redials) import the backoff formula.

const module = "github.com/heraldhq/herald/"

const (
	engine     = module + "core/internal/rules"
	tools      = module + "core/internal/tools"
	testenv    = module + "core/internal/testenv"
	cli        = module + "core/internal/cli"
	commands   = module + "core/cmd"
	pluginhost = module + "core/internal/pluginhost"
	store      = module + "core/internal/store"
	backoff    = module + "core/internal/backoff"
)

// backoffUsers are the packages that may compute a backoff themselves:
// channel (RetryPolicy) and the broker (its redials). Every other retry is
// a channel.RetryPolicy.
var backoffUsers = []string{module + "core/internal/channel", module + "core/internal/broker"}

// engineMayUse are the packages of the module the engine may depend on:
// the domain types, the backoff formula and the duration format.
var engineMayUse = []string{
	module + "core/internal/channel",
	module + "core/internal/directory",
	module + "core/internal/backoff",
	module + "core/internal/durfmt",
}

// ioPackages are imports that do I/O: not one may be a dependency of the
// engine, however indirect.
var ioPackages = []string{
	"net/http", "net/smtp", "net/rpc", "database/sql", "os/exec", "os/signal", "plugin",
	"github.com/jackc/", "github.com/rabbitmq/", "google.golang.org/grpc",
	"github.com/hashicorp/go-plugin", "github.com/fsnotify/", "github.com/knadh/koanf",
}

// directIO are imports the engine and its packages of the module may not
// name themselves (the standard library uses some of them inside pure
// packages such as net/mail, so they are not checked transitively).
var directIO = []string{"net", "os", "io/ioutil", "syscall"}

// hasPrefixIn reports whether pkg is one of prefixes or inside one; a
// prefix ending in "/" names every package under it.
func hasPrefixIn(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if pkg == p || strings.HasPrefix(pkg, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

type listed struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

func goList(t *testing.T, args ...string) []listed {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports,TestImports,XTestImports,Deps"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list: decode: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestEngineDoesNoIO(t *testing.T) {
	t.Parallel()
	pkgs := goList(t, engine)
	if len(pkgs) != 1 {
		t.Fatalf("go list %s: %d packages", engine, len(pkgs))
	}
	mine := []string{engine}
	for _, dep := range pkgs[0].Deps {
		if hasPrefixIn(dep, ioPackages) {
			t.Errorf("the rules engine depends on %s, which does I/O", dep)
		}
		if strings.HasPrefix(dep, module) {
			if !slices.Contains(engineMayUse, dep) {
				t.Errorf("the rules engine depends on %s; it may use only %v", dep, engineMayUse)
			}
			mine = append(mine, dep)
		}
	}
	for _, p := range goList(t, mine...) {
		for _, imp := range p.Imports {
			if slices.Contains(directIO, imp) {
				t.Errorf("%s imports %s: the engine and its domain packages do no I/O", p.ImportPath, imp)
			}
		}
	}
}

func TestHostAndStoreDoNotImportEngine(t *testing.T) {
	t.Parallel()
	for _, p := range goList(t, pluginhost+"/...", store+"/...") {
		if slices.Contains(p.Deps, engine) {
			t.Errorf("%s depends on the rules engine; use package channel or directory for the types", p.ImportPath)
		}
	}
}

func TestToolingAndTestHelpersStayOutOfTheProduct(t *testing.T) {
	t.Parallel()
	for _, p := range goList(t, module+"...") {
		for _, imp := range p.Imports {
			if hasPrefixIn(imp, []string{tools}) && !hasPrefixIn(p.ImportPath, []string{cli, commands, tools}) {
				t.Errorf("%s imports the tool %s: only the CLI runs tooling", p.ImportPath, imp)
			}
			if hasPrefixIn(imp, []string{testenv}) && !hasPrefixIn(p.ImportPath, []string{testenv}) {
				t.Errorf("%s imports %s outside a _test file: only tests use the test helpers", p.ImportPath, imp)
			}
		}
	}
}

func TestRetriesGoThroughRetryPolicy(t *testing.T) {
	t.Parallel()
	for _, p := range goList(t, module+"...") {
		if slices.Contains(p.Imports, backoff) && !slices.Contains(backoffUsers, p.ImportPath) {
			t.Errorf("%s imports %s: retry with a channel.RetryPolicy (only %v use the formula directly)", p.ImportPath, backoff, backoffUsers)
		}
	}
}
