package rulesfile

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
	"golang.org/x/tools/txtar"
)

func compileRulesSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema()))
	if err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(SchemaID)
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	return s
}

// jsonInstance round-trips v through JSON, as an editor's validator sees it.
func jsonInstance(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// rulesExamples returns every rules file the project ships as an example:
// examples/, the golden archives that load, and the hcl/yaml snippets of
// README.md and the pages under docs/.
func rulesExamples(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, pat := range []string{"../../../examples/rules/*", "../../../examples/quickstart/rules.*"} {
		ms, _ := filepath.Glob(pat)
		for _, m := range ms {
			out[m] = read(m)
		}
	}
	archives, _ := filepath.Glob("../rules/testdata/*.txtar")
	for _, a := range archives {
		ar := txtar.Parse(read(a))
		loads := true
		for _, f := range ar.Files {
			if f.Name == "errors.txt" {
				loads = false
			}
		}
		for _, f := range ar.Files {
			if ext := filepath.Ext(f.Name); loads && (ext == ".hcl" || ext == ".yaml") {
				out[a+"/"+f.Name] = f.Data
			}
		}
	}
	fence := regexp.MustCompile("(?s)```(hcl|yaml)\n(.*?)```")
	rulesSnippet := regexp.MustCompile(`(?m)^(channel|event|defaults)\b`)
	// The README and every page under docs/ (the README's sections moved
	// there; docs/rules.md holds most of the snippets).
	docs, _ := filepath.Glob("../../../docs/*.md")
	sub, _ := filepath.Glob("../../../docs/*/*.md")
	for _, doc := range append(append([]string{"../../../README.md"}, docs...), sub...) {
		for i, m := range fence.FindAllSubmatch(read(doc), -1) {
			src := m[2]
			switch {
			case rulesSnippet.Match(src):
			case string(m[1]) == "hcl" && bytes.Contains(src, []byte("template ")):
				// A fragment of an event block.
				src = append(append([]byte("event \"SNIPPET\" {\n"), src...), "}\n"...)
			default:
				continue // daemon config, not rules
			}
			out[doc+"#"+string(m[1])+"-"+strings.Repeat("i", i+1)+"."+string(m[1])] = src
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d examples", len(out))
	}
	return out
}

// TestRulesSchemaValidatesExamples: every example the project ships is
// valid under `herald rules schema`: YAML as written, and HCL in the
// YAML/JSON shape the loader reads it as.
func TestRulesSchemaValidatesExamples(t *testing.T) {
	t.Parallel()
	schema := compileRulesSchema(t)
	examples := rulesExamples(t)
	t.Logf("%d examples", len(examples))
	for name, src := range examples {
		c := &rulesCollector{}
		f := parseRulesSource(c, name, src)
		if len(c.errs) > 0 {
			t.Errorf("%s does not parse: %v", name, c.errs)
			continue
		}
		if err := schema.Validate(jsonInstance(t, rulesRawJSON(reflect.ValueOf(f.raw)))); err != nil {
			t.Errorf("%s (as decoded) fails the schema: %v", name, err)
		}
		if strings.HasSuffix(name, ".yaml") {
			var v any
			if err := yaml.Unmarshal(src, &v); err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(jsonInstance(t, v)); err != nil {
				t.Errorf("%s (as written) fails the schema: %v", name, err)
			}
		}
	}
}

// TestRulesSchemaRefuses: the schema refuses what the loader refuses for
// shape (unknown fields, wrong types), so an editor flags it as typed.
func TestRulesSchemaRefuses(t *testing.T) {
	t.Parallel()
	schema := compileRulesSchema(t)
	for name, src := range map[string]string{
		"unknown top-level key":  "evnt: {}\n",
		"unknown channel field":  "channel:\n  EMAIL:\n    colour: blue\n",
		"provider field typo":    "channel:\n  EMAIL:\n    providers: [{plugin: email, priorty: 1}]\n",
		"bool as string":         "channel:\n  EMAIL:\n    best_effort: \"yes\"\n",
		"audience field typo":    "event:\n  X:\n    audience: [{grop: a}]\n",
		"roles not a list":       "event:\n  X:\n    audience: [{group: a, roles: MANAGER}]\n",
		"payload schema as list": "event:\n  X:\n    payload_schema: [1]\n",
	} {
		var v any
		if err := yaml.Unmarshal([]byte(src), &v); err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(jsonInstance(t, v)); err == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
		// And the loader refuses it too.
		c := &rulesCollector{}
		f := parseRulesSource(c, "r.yaml", []byte(src))
		if _, _, err := loadParsedRules(c, []*rulesFile{f}, Options{KeepReferences: true}); err == nil {
			t.Errorf("%s: the loader accepts it", name)
		}
	}
}
