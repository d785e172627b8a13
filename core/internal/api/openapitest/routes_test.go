package openapitest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// notRoutes are the subtree patterns registered that are not operations:
// catch-alls that answer 404/405 problem documents and mount points of
// handlers whose own routes are scanned too. Every other pattern must be
// an operation of the document.
var notRoutes = map[string]string{
	"/":             "the catch-all: 404 problem document",
	"/v1/admin/":    "the superadmin API's catch-all (405 for writes, 404) and its mount point",
	"/v1/inbox/":    "the inbox's catch-all and its mount point",
	"/v1/inbox":     "the inbox's mount point (GET /v1/inbox is an operation)",
	"/v1/live/":     "the live gateway's mount point",
	"/v1/me/":       "the end-user API's catch-all and its mount point",
	"/v1/live":      "the live gateway's mount point (GET /v1/live is an operation)",
	"/admin/":       "the admin API's catch-all",
	"/inbox/":       "the web inbox's files: GET /inbox/{file}",
	"/debug/pprof/": "pprof's index: GET /debug/pprof/ and GET /debug/pprof/{profile}",
}

// skipDirs hold HTTP servers that are not herald's: test peers.
var skipDirs = []string{"devpeer", "testenv", "bench"}

// route is one registration found in the source.
type route struct {
	pattern string // as registered, e.g. "POST /v1/events"
	pos     string
}

// registeredRoutes scans the non-test Go files under dir for
// mux.Handle/HandleFunc and Server.Mount calls and evaluates their pattern
// argument: string literals, constants (of any scanned package), "+" and
// range variables over a literal list of constants. A pattern it cannot
// evaluate is an error, so a route cannot hide behind a variable.
func registeredRoutes(t *testing.T, dir string) []route {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains(skipDirs, d.Name()) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// String constants by name and by package.name.
	consts := map[string]ast.Expr{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						consts[n.Name] = vs.Values[i]
						consts[f.Name.Name+"."+n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var eval func(e ast.Expr, ranges map[string][]ast.Expr) ([]string, bool)
	eval = func(e ast.Expr, ranges map[string][]ast.Expr) ([]string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return nil, false
			}
			s, err := strconv.Unquote(e.Value)
			return []string{s}, err == nil
		case *ast.ParenExpr:
			return eval(e.X, ranges)
		case *ast.Ident:
			if elts, ok := ranges[e.Name]; ok {
				var out []string
				for _, el := range elts {
					vs, ok := eval(el, nil)
					if !ok {
						return nil, false
					}
					out = append(out, vs...)
				}
				return out, true
			}
			if c, ok := consts[e.Name]; ok {
				return eval(c, nil)
			}
		case *ast.SelectorExpr:
			if pkg, ok := e.X.(*ast.Ident); ok {
				if c, ok := consts[pkg.Name+"."+e.Sel.Name]; ok {
					return eval(c, nil)
				}
			}
		case *ast.BinaryExpr:
			if e.Op != token.ADD {
				return nil, false
			}
			xs, ok1 := eval(e.X, ranges)
			ys, ok2 := eval(e.Y, ranges)
			var out []string
			for _, x := range xs {
				for _, y := range ys {
					out = append(out, x+y)
				}
			}
			return out, ok1 && ok2
		}
		return nil, false
	}
	var out []route
	for _, f := range files {
		// ranges maps a range variable to the literal list it ranges over.
		ranges := map[string][]ast.Expr{}
		ast.Inspect(f, func(n ast.Node) bool {
			if rs, ok := n.(*ast.RangeStmt); ok {
				if cl, ok := rs.X.(*ast.CompositeLit); ok {
					var keys, values []ast.Expr
					for _, el := range cl.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							keys, values = append(keys, kv.Key), append(values, kv.Value)
						} else {
							values = append(values, el)
						}
					}
					if k, ok := rs.Key.(*ast.Ident); ok && keys != nil {
						ranges[k.Name] = keys
					}
					if v, ok := rs.Value.(*ast.Ident); ok {
						ranges[v.Name] = values
					}
				}
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains([]string{"Handle", "HandleFunc", "Mount"}, sel.Sel.Name) {
				return true
			}
			pos := fset.Position(call.Pos()).String()
			pats, ok := eval(call.Args[0], ranges)
			if !ok {
				// The one dynamic registration: api.Server.Handler mounts
				// what Mount registered (scanned at the Mount calls).
				if id, isID := call.Args[0].(*ast.Ident); isID && id.Name == "p" && strings.Contains(filepath.ToSlash(pos), "/api/api.go:") {
					return true
				}
				t.Errorf("%s: a route pattern the test cannot evaluate; register routes with constant patterns", pos)
				return true
			}
			for _, p := range pats {
				out = append(out, route{pattern: p, pos: pos})
			}
			return true
		})
	}
	return out
}

// wildcard matches a ServeMux wildcard: {name}, {name...} or {$}.
var wildcard = regexp.MustCompile(`\{([^}.]*)(\.\.\.)?\}`)

func TestEveryRouteIsDocumented(t *testing.T) {
	v := MustLoad(t)
	routes := registeredRoutes(t, filepath.Join("..", ".."))
	if len(routes) < 30 {
		t.Fatalf("found only %d route registrations; the scan is broken", len(routes))
	}
	t.Logf("%d route registrations, %d documented paths", len(routes), v.Doc.Paths.Len())
	for _, p := range undocumented(v, routes, true) {
		t.Error(p)
	}
}

// TestUndocumentedRouteFails shows that the scan catches a route the
// document lacks, behind a constant and a range variable too.
func TestUndocumentedRouteFails(t *testing.T) {
	dir := t.TempDir()
	src := `package x

const secretPath = "/v1/secret"

func routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/events/{event_id}", nil)
	mux.HandleFunc("DELETE "+secretPath, nil)
	for _, op := range []string{"read", "explode"} {
		mux.HandleFunc("POST /v1/inbox/{id}/"+op, nil)
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got := undocumented(MustLoad(t), registeredRoutes(t, dir), false)
	if len(got) != 2 || !strings.Contains(got[0], `"DELETE /v1/secret"`) || !strings.Contains(got[1], `"POST /v1/inbox/{id}/explode"`) {
		t.Fatalf("undocumented routes reported: %q", got)
	}
}

// undocumented says which routes the document lacks and, when both, which
// operations of the document no route registers.
func undocumented(v *Validator, routes []route, both bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range routes {
		method, path, ok := strings.Cut(r.pattern, " ")
		if !ok {
			method, path = "", r.pattern
		}
		if _, ok := notRoutes[path]; ok && method == "" {
			if item := v.Doc.Paths.Value(path); item != nil {
				for m := range item.Operations() {
					seen[m+" "+path] = true
				}
			}
			continue
		}
		docPath := wildcard.ReplaceAllStringFunc(path, func(w string) string {
			m := wildcard.FindStringSubmatch(w)
			if m[1] == "$" {
				return ""
			}
			return "{" + m[1] + "}"
		})
		item := v.Doc.Paths.Value(docPath)
		if method == "" && item != nil && len(item.Operations()) > 0 {
			// A pattern of every method: the path must have an operation
			// (the handler refuses the other methods with a problem).
			for m := range item.Operations() {
				seen[m+" "+docPath] = true
			}
			continue
		}
		if item == nil || item.GetOperation(method) == nil {
			out = append(out, fmt.Sprintf("%s: route %q is not in the OpenAPI document (core/internal/api/openapi.yaml); document it", r.pos, r.pattern))
			continue
		}
		seen[method+" "+docPath] = true
	}
	if !both {
		return out
	}
	for path, item := range v.Doc.Paths.Map() {
		for method := range item.Operations() {
			if !seen[method+" "+path] && !documentedVia(path) {
				out = append(out, fmt.Sprintf("the document has %s %s, which no route registers", method, path))
			}
		}
	}
	return out
}

// documentedVia reports whether path is served by a subtree pattern rather
// than a route of its own.
func documentedVia(path string) bool {
	return path == "/inbox/{file}" || path == "/debug/pprof/{profile}"
}
