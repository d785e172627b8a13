package core_test

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// layoutRows reads the "Layout" table of docs/architecture.md: each
// row's folder (its first column, without the trailing slash; a
// "{v1,v2}" in it names one folder per element) and the row's text.
func layoutRows(t *testing.T, root string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("docs/architecture.md: no ## Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|(.*)$")
	braces := regexp.MustCompile(`^(.*)\{([^}]+)\}(.*)$`)
	rows := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(layout, -1) {
		folder := strings.TrimSuffix(m[1], "/")
		names := []string{folder}
		if b := braces.FindStringSubmatch(folder); b != nil {
			names = nil
			for _, e := range strings.Split(b[2], ",") {
				names = append(names, b[1]+e+b[3])
			}
		}
		for _, n := range names {
			if _, dup := rows[n]; dup {
				t.Errorf("docs/architecture.md Layout: %s/ has two rows", n)
			}
			rows[n] = m[2]
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/architecture.md Layout: no rows")
	}
	return rows
}

// TestArchitectureLayoutHasEveryGoFolder keeps docs/architecture.md's
// "one line per folder" true: every tracked folder holding a non-test Go
// file (testdata aside) has a row in its Layout table, or a row of a
// parent folder names it in backquotes (as the ociimage row names
// `cmd/ociimage`); and every row names a folder that exists.
func TestArchitectureLayoutHasEveryGoFolder(t *testing.T) {
	t.Parallel()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	root := strings.TrimSpace(string(top))
	rows := layoutRows(t, root)
	cmd := exec.Command("git", "ls-files", "--", "*.go")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var folders []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") || slices.Contains(strings.Split(f, "/"), "testdata") {
			continue
		}
		if d := path.Dir(f); !slices.Contains(folders, d) {
			folders = append(folders, d)
		}
	}
	if len(folders) == 0 {
		t.Fatal("git ls-files: no Go files")
	}
	for _, d := range folders {
		if _, ok := rows[d]; ok || namedByParent(rows, d) {
			continue
		}
		t.Errorf("docs/architecture.md Layout has no row for %s/ (add one: what the folder holds)", d)
	}
	for folder := range rows {
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(folder))); err != nil || !fi.IsDir() {
			t.Errorf("docs/architecture.md Layout has a row for %s/, which is not a folder of the repository", folder)
		}
	}
}

// namedByParent reports whether the row of one of d's parent folders
// names d, relative to itself, in backquotes.
func namedByParent(rows map[string]string, d string) bool {
	for p := path.Dir(d); p != "."; p = path.Dir(p) {
		text, ok := rows[p]
		if !ok {
			continue
		}
		rel := strings.TrimPrefix(d, p+"/")
		if strings.Contains(text, "`"+rel+"`") || strings.Contains(text, "`"+rel+"/`") {
			return true
		}
	}
	return false
}
