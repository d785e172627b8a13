package producer

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoDocComplete checks that `go doc` of every exported name of the
// producer module's packages shows a sentence, and that every
// exported field of an exported struct has its own comment.
func TestGoDocComplete(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "jsonguard"} {
		fset := token.NewFileSet()
		pkgs, err := parsePackages(fset, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, files := range pkgs {
			p, err := doc.NewFromFiles(fset, files, "github.com/heraldhq/herald/sdk/producer/"+dir)
			if err != nil {
				t.Fatal(err)
			}
			where := filepath.Join("sdk/producer", dir)
			if strings.TrimSpace(p.Doc) == "" {
				t.Errorf("%s: package %s has no doc comment", where, p.Name)
			}
			checkValues := func(vs []*doc.Value) {
				for _, v := range vs {
					if strings.TrimSpace(v.Doc) != "" {
						continue
					}
					// A grouped declaration may document each name instead.
					for _, spec := range v.Decl.Specs {
						vs := spec.(*ast.ValueSpec)
						for _, n := range vs.Names {
							if n.IsExported() && vs.Doc == nil && vs.Comment == nil {
								t.Errorf("%s: %s has no doc comment", where, n.Name)
							}
						}
					}
				}
			}
			checkFuncs := func(fs []*doc.Func) {
				for _, f := range fs {
					if strings.TrimSpace(f.Doc) == "" {
						t.Errorf("%s: func %s has no doc comment", where, f.Name)
					}
				}
			}
			checkValues(p.Consts)
			checkValues(p.Vars)
			checkFuncs(p.Funcs)
			for _, typ := range p.Types {
				if strings.TrimSpace(typ.Doc) == "" {
					t.Errorf("%s: type %s has no doc comment", where, typ.Name)
				}
				checkValues(typ.Consts)
				checkValues(typ.Vars)
				checkFuncs(typ.Funcs)
				for _, m := range typ.Methods {
					if ast.IsExported(m.Name) && strings.TrimSpace(m.Doc) == "" {
						t.Errorf("%s: method %s.%s has no doc comment", where, typ.Name, m.Name)
					}
				}
				for _, spec := range typ.Decl.Specs {
					st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, f := range st.Fields.List {
						for _, n := range f.Names {
							if n.IsExported() && f.Doc == nil && f.Comment == nil {
								t.Errorf("%s: field %s.%s has no comment", where, typ.Name, n.Name)
							}
						}
					}
				}
			}
		}
	}
}

// parsePackages parses the Go files of dir, tests left out, with their
// comments, and groups them by package name.
func parsePackages(fset *token.FileSet, dir string) (map[string][]*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	pkgs := map[string][]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
	}
	return pkgs, nil
}
