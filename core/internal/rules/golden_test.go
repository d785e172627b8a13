package rules_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
)

var update = flag.Bool("update", false, "rewrite the expected sections of testdata/*.txtar")

// TestGolden runs every testdata/*.txtar archive. An archive holds:
//
//	args            lines "rules=PATH" (relative to testdata, repeatable), "at=RFC3339",
//	                "render" (also render every recipient's inbox and channels) and
//	                "user=ID" (repeatable: also explain the decision for that user)
//	*.hcl, *.yaml   rules files, written to a temporary directory and loaded too
//	event.json      the event
//	directory.json  the directory snapshot (DIR.json format)
//
// and the expected results: needs.json, explain.txt and decision.json for a
// decision (plus rendered.txt with "render", users.txt with "user=", and
// directory_problems.txt when the strict directory parser refuses the file), or errors.txt when the rules
// do not load; warnings.txt holds the warnings of rules that load.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txtar")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runGolden(t, file)
		})
	}
}

// bundledBestEffort is the class each bundled plugin declares in Describe
// (plugins/<name>: websocket and slack best effort, the others
// persistent), as the daemon passes it to WithDeclared.
var bundledBestEffort = map[string]bool{"websocket": true, "slack": true, "email": false, "push": false, "sms": false}

// withBundledPlugins gives rs the classes the bundled plugins declare, as
// the daemon does once it has launched them.
func withBundledPlugins(rs *rules.RuleSet) *rules.RuleSet {
	declared := map[string]channel.Declared{}
	for _, ch := range rs.Channels() {
		d, ok := channel.DeclarationOf(ch, func(p channel.Provider) (channel.Declared, bool) {
			be, ok := bundledBestEffort[p.Plugin]
			return channel.Declared{Plugin: p.Plugin, BestEffort: be}, ok
		})
		if ok {
			declared[ch.Name] = d
		}
	}
	return rs.WithDeclared(declared)
}

func runGolden(t *testing.T, file string) {
	ar, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var rulesPaths []string
	var at time.Time
	render := false
	var users []string
	inputs := map[string][]byte{}
	for _, f := range ar.Files {
		inputs[f.Name] = f.Data
		switch ext := filepath.Ext(f.Name); ext {
		case ".hcl", ".yaml", ".yml", ".json":
			p := filepath.Join(dir, f.Name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			if ext != ".json" {
				rulesPaths = append(rulesPaths, p)
			}
		}
	}
	for _, line := range strings.Split(string(inputs["args"]), "\n") {
		key, val, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch key {
		case "rules":
			rulesPaths = append(rulesPaths, filepath.Join("testdata", val))
		case "at":
			if at, err = time.Parse(time.RFC3339, val); err != nil {
				t.Fatalf("args: at: %v", err)
			}
		case "render":
			render = true
		case "user":
			users = append(users, val)
		case "":
		default:
			t.Fatalf("args: unknown key %q", key)
		}
	}

	got := map[string]string{}
	rs, _, warnings, err := rulesfile.Check(rulesfile.Options{}, rulesPaths...)
	if rs != nil {
		rs = withBundledPlugins(rs)
	}
	if len(warnings) > 0 {
		got["warnings.txt"] = strings.ReplaceAll(warnings.Error(), dir+string(filepath.Separator), "") + "\n"
	}
	if err != nil {
		got["errors.txt"] = strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "") + "\n"
	} else {
		var ev rules.Event
		if err := json.Unmarshal(inputs["event.json"], &ev); err != nil {
			t.Fatalf("event.json: %v", err)
		}
		// The engine decides on any snapshot, as the database gives it
		// (a membership may outlive its recipient row); what the strict
		// parser of `rules explain --directory` would refuse in the file
		// is directory_problems.txt.
		var d directory.Directory
		if err := json.Unmarshal(inputs["directory.json"], &d); err != nil {
			t.Fatalf("directory.json: %v", err)
		}
		res, err := directory.Parse(bytes.NewReader(inputs["directory.json"]), "directory.json", directory.Options{})
		switch {
		case err != nil:
			got["directory_problems.txt"] = err.Error() + "\n"
		case !res.OK():
			got["directory_problems.txt"] = res.Problems.Error() + "\n"
		}
		needs, err := rs.Needs(ev)
		if err != nil {
			t.Fatalf("Needs: %v", err)
		}
		got["needs.json"] = mustJSON(t, needs)
		dec, err := rs.Decide(ev, &d, at)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		var b bytes.Buffer
		if err := rules.WriteExplain(&b, dec, at); err != nil {
			t.Fatal(err)
		}
		got["explain.txt"] = b.String()
		got["decision.json"] = mustJSON(t, dec)
		if render {
			got["rendered.txt"] = renderAll(rs, ev, dec)
		}
		if len(users) > 0 {
			var ub bytes.Buffer
			for i, u := range users {
				ue, err := rs.ExplainUser(ev, &d, at, u)
				if err != nil {
					t.Fatalf("ExplainUser %s: %v", u, err)
				}
				if i > 0 {
					ub.WriteString("\n---\n\n")
				}
				if err := rules.WriteUserExplain(&ub, ev, ue, at); err != nil {
					t.Fatal(err)
				}
			}
			got["users.txt"] = ub.String()
		}
	}

	if *update {
		var kept []txtar.File
		for _, f := range ar.Files {
			switch f.Name {
			case "needs.json", "explain.txt", "decision.json", "rendered.txt", "users.txt", "directory_problems.txt", "errors.txt", "warnings.txt":
				continue
			}
			kept = append(kept, f)
		}
		for _, name := range []string{"needs.json", "explain.txt", "decision.json", "rendered.txt", "users.txt", "directory_problems.txt", "errors.txt", "warnings.txt"} {
			if s, ok := got[name]; ok {
				kept = append(kept, txtar.File{Name: name, Data: []byte(s)})
			}
		}
		ar.Files = kept
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, name := range []string{"needs.json", "explain.txt", "decision.json", "rendered.txt", "users.txt", "directory_problems.txt", "errors.txt", "warnings.txt"} {
		want, inArchive := inputs[name]
		g, produced := got[name]
		switch {
		case produced && !inArchive:
			t.Errorf("%s: produced but not in the archive (run with -update):\n%s", name, g)
		case !produced && inArchive:
			t.Errorf("%s: expected but not produced", name)
		case produced:
			if diff := cmp.Diff(string(want), g); diff != "" {
				t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// renderAll renders every recipient's inbox and kept channels, one line
// each: the content, or the error and what fails with it.
func renderAll(rs *rules.RuleSet, ev rules.Event, dec rules.Decision) string {
	var b strings.Builder
	pe := rules.PrepareEvent(ev)
	for _, rd := range dec.Recipients {
		channels := []string{""}
		for _, cd := range rd.Channels {
			channels = append(channels, cd.Channel)
		}
		for _, ch := range channels {
			name := ch
			if name == "" {
				name = "inbox"
			}
			out, err := rs.RenderPrepared(pe, rd.Recipient, ch)
			var re *rules.RenderError
			switch {
			case errors.As(err, &re):
				fails := "the delivery"
				if re.RecipientFree || ch == "" {
					fails = "the event"
				}
				fmt.Fprintf(&b, "%s %s: field %s fails %s: %v\n", rd.Recipient.UserID, name, re.Field, fails, err)
			case err != nil:
				fmt.Fprintf(&b, "%s %s: %v\n", rd.Recipient.UserID, name, err)
			default:
				fmt.Fprintf(&b, "%s %s: subject=%q title=%q body=%q html=%q data=%s\n", rd.Recipient.UserID, name,
					out.Subject, out.Title, out.Body, out.HTML, out.Data)
			}
		}
	}
	return b.String()
}
