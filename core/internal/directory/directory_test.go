package directory_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
	"golang.org/x/tools/txtar"

	"github.com/heraldhq/herald/core/internal/directory"
)

var update = flag.Bool("update", false, "rewrite testdata/bad.txt")

func parseFile(t *testing.T, path string, opt directory.Options) (*directory.Result, error) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	return directory.Parse(fh, filepath.Base(path), opt)
}

// TestEveryProblemAtOnce: a file with one of each kind of mistake gets
// every problem listed, in file order, each naming its line, entry and
// field in Herald's words (testdata/bad.txt).
func TestEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	res, err := parseFile(t, "testdata/bad.json", directory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Problems.Error() + "\n"
	if *update {
		if err := os.WriteFile("testdata/bad.txt", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/bad.txt")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	// The good entries are what --partial imports: the first s1 stays, the
	// duplicate goes; members of bad groups go with them.
	var users []string
	for _, r := range res.Directory.Recipients {
		users = append(users, r.UserID)
	}
	if got, want := fmt.Sprint(users), "[s0 s1]"; got != want {
		t.Errorf("good recipients %s, want %s", got, want)
	}
	if len(res.Directory.Groups) != 1 || res.Directory.Groups[0].Key != "restaurant:6" || len(res.Directory.Members) != 1 ||
		res.Directory.Members[0].Role != "A" || len(res.Directory.Preferences) != 0 || len(res.Directory.Settings) != 0 {
		t.Errorf("good entries %+v", res.Directory)
	}
	if res.Entries != 20 || res.Bad != 16 {
		t.Errorf("entries %d, bad %d; want 20, 16", res.Entries, res.Bad)
	}
}

// TestSyntaxesAgree: the same directory in JSON, YAML and JSONL decodes to
// the same entries; YAML anchors and active's default work.
func TestSyntaxesAgree(t *testing.T) {
	t.Parallel()
	y, err := parseFile(t, "testdata/good.yaml", directory.Options{})
	if err != nil || !y.OK() {
		t.Fatalf("good.yaml: %v %v", err, y)
	}
	r := y.Directory.Recipients
	if !r[0].Active || r[1].Active || r[1].QuietHours == nil || r[1].QuietHours.Start != "22:00" || r[1].Attributes["slack_user_id"] != "U42" {
		t.Fatalf("good.yaml recipients %+v", r)
	}
	b, err := json.Marshal(y.Directory)
	if err != nil {
		t.Fatal(err)
	}
	j, err := directory.Parse(bytes.NewReader(b), "same.json", directory.Options{})
	if err != nil || !j.OK() {
		t.Fatalf("JSON of good.yaml: %v %v", err, j)
	}
	if diff := cmp.Diff(y.Directory, j.Directory); diff != "" {
		t.Errorf("YAML and JSON differ:\n%s", diff)
	}
	l, err := parseFile(t, "testdata/good.jsonl", directory.Options{})
	if err != nil || !l.OK() {
		t.Fatalf("good.jsonl: %v %v", err, l)
	}
	if len(l.Directory.Recipients) != 1 || !l.Directory.Recipients[0].Active || len(l.Directory.Members) != 1 || len(l.Directory.Settings) != 1 {
		t.Errorf("good.jsonl: %+v", l.Directory)
	}
}

// TestExamplesParse: every example directory the repository ships is
// clean.
func TestExamplesParse(t *testing.T) {
	t.Parallel()
	for _, path := range exampleDirectories(t) {
		res, err := parseFile(t, path, directory.Options{})
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if !res.OK() {
			t.Errorf("%s:\n%v", path, res.Problems)
		}
	}
}

func exampleDirectories(t *testing.T) []string {
	t.Helper()
	var paths []string
	for _, glob := range []string{"../../../examples/directory/*.json", "../../../examples/quickstart/directory.json"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	if len(paths) < 4 {
		t.Fatalf("found only %v", paths)
	}
	return paths
}

// TestLineProblems: JSONL and YAML problems name their lines; a JSONL line
// that is not an entry does not stop the others.
func TestLineProblems(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		format directory.Format
		in     string
		want   string
	}{
		"jsonl bad line and kind": {directory.JSONL,
			`{"recipient": {"user_id": "u1", "user_type": "T"}}` + "\n" + `{"recipient": {"user_id": "u2"` + "\n" + `{"person": {}}` + "\n" + `{"member": {"group": "g", "user_id": "u1"}}`,
			"f:2: invalid JSON: unexpected end: the JSON is truncated\n" +
				"f:3: person: unknown kind of entry (want one of recipient, group, member, preference, setting)\n" +
				`f:4: members[0] (group g, user u1): group: group "g" is not declared in this file (groups)`},
		"jsonl two entries on a line": {directory.JSONL,
			`{"recipient": {"user_id": "u1", "user_type": "T"}, "group": {"key": "g", "type": "t"}}`,
			`f:1: want one entry a line: an object with one key, recipient, group, member, preference, setting (such as {"recipient": {"user_id": "u1", "user_type": "STAFF"}})`},
		"json bad destinations": {directory.JSON,
			`{"groups": [{"key": "g", "type": "t", "destinations": {"SLACK": "", "TEAMS": " room", "sl ack": "x", "OK": "a\u0001b", "PUSH": 3}}]}`,
			"f:1: groups[0] (group g): destinations.SLACK: want the address the channel's plugin posts to (a webhook's name, a channel id): 1-512 bytes of UTF-8 without control characters or surrounding spaces\n" +
				"f:1: groups[0] (group g): destinations.TEAMS: want the address the channel's plugin posts to (a webhook's name, a channel id): 1-512 bytes of UTF-8 without control characters or surrounding spaces\n" +
				`f:1: groups[0] (group g): destinations.sl ack: "sl ack" is not a channel name: want letters, digits, _ and - such as SLACK` + "\n" +
				"f:1: groups[0] (group g): destinations.OK: want the address the channel's plugin posts to (a webhook's name, a channel id): 1-512 bytes of UTF-8 without control characters or surrounding spaces\n" +
				"f:1: groups[0] (group g): destinations.PUSH: got number 3, want a string"},
		"yaml unquoted number": {directory.YAML, "recipients:\n  - user_id: 42\n    user_type: T\n    time_zone: Mars/Olympus\n",
			"f:2: recipients[0]: user_id: got number 42, want a string (quote it: \"42\")\n" +
				"f:4: recipients[0]: time_zone: unknown zone \"Mars/Olympus\": want an IANA zone name such as Europe/Rome"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := directory.Parse(strings.NewReader(c.in), "f", directory.Options{Format: c.format})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, res.Problems.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnreadableFiles: a file that cannot be read as a directory at all
// is one problem naming the line, or the limit by name.
func TestUnreadableFiles(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		format directory.Format
		in     string
		want   string
	}{
		"empty":              {directory.JSON, "  \n", "f:1: empty: no JSON value"},
		"empty object":       {directory.JSON, "{}", "f: the directory is empty: no recipients, groups, members, preferences, settings"},
		"comment-only yaml":  {directory.YAML, "# nothing\n", "f:1: empty: no YAML document"},
		"truncated":          {directory.JSON, "{\n\"recipients\": [\n{\"user_id\": \"u", "f:3: invalid JSON: unexpected end: the JSON is truncated"},
		"trailing text":      {directory.JSON, "{}\n{}", "f:2: text after the end of the JSON value"},
		"duplicate key":      {directory.JSON, "{\"recipients\": [],\n\"recipients\": []}", `f:2: field "recipients" appears twice in one object`},
		"invalid utf-8":      {directory.JSON, "{\"recipients\": [\n{\"user_id\": \"\xff\"}]}", "f:2: invalid UTF-8 (byte 0xff)"},
		"not an object":      {directory.JSON, "[1]", "f:1: got a list, want an object with the lists recipients, groups, members, preferences, settings"},
		"yaml merge key":     {directory.YAML, "recipients:\n  - <<: {user_id: a}\n", "f:2: mapping keys must be plain names (no merge keys << or complex keys)"},
		"two yaml documents": {directory.YAML, "recipients: []\n---\ngroups: []\n", "f:2: a second YAML document: a directory file holds one"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := directory.Parse(strings.NewReader(c.in), "f", directory.Options{Format: c.format})
			if err == nil && res != nil && !res.OK() {
				err = res.Problems
			}
			if err == nil {
				t.Fatalf("accepted: %+v", res)
			}
			if diff := cmp.Diff(c.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// hostile are inputs built to cost time or memory, each with the limit
// (or the error) that must refuse it.
func hostile() map[string]struct {
	format directory.Format
	in     []byte
	want   string
} {
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		_ = i
		bomb += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
		prev = name
	}
	bomb += "recipients: *j\n"
	return map[string]struct {
		format directory.Format
		in     []byte
		want   string
	}{
		"json deep brackets":    {directory.JSON, []byte(strings.Repeat("[", 5<<20)), "max_depth = 16"},
		"json deep objects":     {directory.JSON, []byte(strings.Repeat(`{"a":`, 1<<20)), "max_depth = 16"},
		"jsonl deep line":       {directory.JSONL, []byte(strings.Repeat("[", 1<<19) + "\n"), "max_depth = 16"},
		"yaml deep flow":        {directory.YAML, []byte(strings.Repeat("[", 1<<20)), "invalid YAML: exceeded max depth"},
		"yaml deep block":       {directory.YAML, []byte(deepYAML(5000)), ""},
		"yaml alias bomb":       {directory.YAML, []byte(bomb), "max_alias_nodes = 10000"},
		"yaml too large":        {directory.YAML, bytes.Repeat([]byte("# padding\n"), 2<<20), "max_yaml_bytes = 16777216"},
		"jsonl long line":       {directory.JSONL, append(bytes.Repeat([]byte("x"), 2<<20), '\n'), "max_line_bytes = 1048576"},
		"json truncated deep":   {directory.JSON, []byte(`{"recipients": [{"user_id": "u", "quiet_hours": {"start": "2`), "truncated"},
		"json invalid utf-8":    {directory.JSON, []byte("{\"recipients\": [{\"user_id\": \"\xc3\x28\"}]}"), "invalid UTF-8"},
		"json huge string":      {directory.JSON, []byte(`{"recipients": [{"user_id": "` + strings.Repeat("a", 8<<20) + `", "user_type": "T"}]}`), "want at most 200 bytes"},
		"json many keys":        {directory.JSON, []byte(`{"recipients": [{` + strings.Repeat(`"k": 1,`, 1) + strings.Repeat(`"x": 1, `, 0) + `"user_id": "u", "user_type": "T"}]}`), "unknown field"},
		"yaml many unknown":     {directory.YAML, []byte("recipients:\n" + strings.Repeat("  - {user_id: u, user_type: T, zz: 1}\n", 5000)), "more problems"},
		"yaml anchor recursion": {directory.YAML, []byte("a: &a\n  b: *a\n"), ""},
	}
}

func deepYAML(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	return b.String()
}

// TestHostileInputsRefusedWithinBounds feeds each hostile input and
// checks that it is refused (with the limit named) before a deadline and
// within a memory bound: the bytes allocated while parsing stay under 64
// MiB more than eight times the input. It runs alone (not parallel), so
// the allocation counter is this test's.
func TestHostileInputsRefusedWithinBounds(t *testing.T) {
	for name, c := range hostile() {
		done := make(chan struct{})
		var res *directory.Result
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		go func() {
			defer close(done)
			res, err = directory.Parse(bytes.NewReader(c.in), "hostile", directory.Options{Format: c.format})
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not refused within 30s", name)
		}
		runtime.ReadMemStats(&after)
		if err == nil && res != nil && !res.OK() {
			err = problemsWithDropped(res)
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %.300q does not name %q", name, err.Error(), c.want)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		if bound := uint64(64<<20 + 8*len(c.in)); alloc > bound {
			t.Errorf("%s: allocated %d MiB parsing %d KiB (bound %d MiB)", name, alloc>>20, len(c.in)>>10, bound>>20)
		}
		t.Logf("%s: refused, %d KiB in, %d KiB allocated: %.120s", name, len(c.in)>>10, alloc>>10, err.Error())
	}
}

func problemsWithDropped(res *directory.Result) error {
	s := res.Problems.Error()
	if res.Dropped > 0 {
		s += fmt.Sprintf("\n... and %d more problems", res.Dropped)
	}
	return errors.New(s)
}

// TestSchemaValidatesExamples: the JSON Schema `herald directory schema`
// prints compiles, every example directory (examples/, the rules golden
// tests' directory.json, testdata) validates against it, and the files the
// parser refuses for a per-field reason are refused by the schema too.
func TestSchemaValidatesExamples(t *testing.T) {
	t.Parallel()
	doc := compile(t, false)
	line := compile(t, true)
	validate := func(sch *jsonschema.Schema, name string, data []byte) error {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return sch.Validate(inst)
	}
	for _, path := range exampleDirectories(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(doc, path, data); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	archives, _ := filepath.Glob("../rules/testdata/*.txtar")
	n := 0
	for _, a := range archives {
		ar, err := txtar.ParseFile(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range ar.Files {
			if f.Name == "directory.json" {
				n++
				if err := validate(doc, a, f.Data); err != nil {
					t.Errorf("%s: directory.json: %v", a, err)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no directory.json in ../rules/testdata")
	}
	// YAML validates through its JSON form.
	var y any
	data, _ := os.ReadFile("testdata/good.yaml")
	if err := yaml.Unmarshal(data, &y); err != nil {
		t.Fatal(err)
	}
	yj, _ := json.Marshal(y)
	if err := validate(doc, "good.yaml", yj); err != nil {
		t.Errorf("good.yaml: %v", err)
	}
	jl, _ := os.ReadFile("testdata/good.jsonl")
	for i, l := range bytes.Split(jl, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if err := validate(line, "good.jsonl", l); err != nil {
			t.Errorf("good.jsonl:%d: %v", i+1, err)
		}
	}
	// Per-field faults the schema can express.
	for name, bad := range map[string]string{
		"unknown field":  `{"recipients": [{"user_id": "u", "user_type": "T", "colour": 1}]}`,
		"missing type":   `{"recipients": [{"user_id": "u"}]}`,
		"phone":          `{"recipients": [{"user_id": "u", "user_type": "T", "phone": "06 123"}]}`,
		"clock":          `{"recipients": [{"user_id": "u", "user_type": "T", "quiet_hours": {"start": "25:00", "end": "08:00"}}]}`,
		"number id":      `{"recipients": [{"user_id": 8, "user_type": "T"}]}`,
		"negative cap":   `{"groups": [{"key": "g", "type": "t", "max_recipients": -1}]}`,
		"section":        `{"people": []}`,
		"jsonl two keys": `{"recipient": {"user_id": "u", "user_type": "T"}, "group": {"key": "g", "type": "t"}}`,
	} {
		sch := doc
		if strings.HasPrefix(name, "jsonl") {
			sch = line
		}
		if err := validate(sch, name, []byte(bad)); err == nil {
			t.Errorf("%s: the schema accepts %s", name, bad)
		}
		res, err := directory.Parse(strings.NewReader(bad), name, directory.Options{Format: map[bool]directory.Format{true: directory.JSONL, false: directory.JSON}[sch == line]})
		if err == nil && res.OK() {
			t.Errorf("%s: the parser accepts %s", name, bad)
		}
	}
}

func compile(t *testing.T, jsonl bool) *jsonschema.Schema {
	t.Helper()
	raw, err := directory.Schema(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("directory.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("directory.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// FuzzDirectory: no input makes the parser panic, hang or balloon; and
// whatever it accepts as clean survives a round trip through JSON to the
// same directory.
func FuzzDirectory(f *testing.F) {
	for _, p := range []string{"testdata/bad.json", "testdata/good.yaml", "testdata/good.jsonl", "../../../examples/directory/acme.json",
		"../../../examples/directory/restaurant5.json"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(formatIndex(directory.FormatOf(p))))
	}
	for _, h := range hostile() {
		in := h.in
		if len(in) > 4096 {
			in = in[:4096]
		}
		f.Add(in, uint8(formatIndex(h.format)))
	}
	f.Add([]byte("recipients:\n  - &a {user_id: u, user_type: T}\n  - *a\n"), uint8(1))
	f.Add([]byte("{\"recipients\": [{\"user_id\": \"u\xff\", \"user_type\": \"T\"}]}"), uint8(0))
	f.Add([]byte(`{"recipient": {"user_id": "u", "user_type": "T", "quiet_hours": {"start": "22:00", "end": "0`), uint8(2))
	f.Add([]byte(`{"recipient": {"user_id": "u", "user_type": "T", "devices": [{"kind": "webpush", "endpoint": "https://p.example/1", "p256dh": "BA", "auth": "AA"}, {"kind": "apns", "token": "zz"}]}}`), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, fi uint8) {
		format := []directory.Format{directory.JSON, directory.YAML, directory.JSONL}[int(fi)%3]
		lim := directory.DefaultLimits()
		res, err := directory.Parse(bytes.NewReader(data), "fuzz", directory.Options{Format: format, Limits: lim})
		if err != nil {
			var ps directory.Problems
			if !errors.As(err, &ps) || len(ps) != 1 {
				t.Fatalf("error is not one Problem: %T %v", err, err)
			}
			return
		}
		if !res.OK() || res.Entries == 0 {
			return
		}
		b, err := json.Marshal(res.Directory)
		if err != nil {
			t.Fatal(err)
		}
		again, err := directory.Parse(bytes.NewReader(b), "again.json", directory.Options{})
		if err != nil || !again.OK() {
			t.Fatalf("round trip of %s refused: %v %v", b, err, again.Problems)
		}
		if diff := cmp.Diff(res.Directory, again.Directory); diff != "" {
			t.Fatalf("round trip differs:\n%s", diff)
		}
	})
}

func formatIndex(f directory.Format) int {
	switch f {
	case directory.YAML:
		return 1
	case directory.JSONL:
		return 2
	}
	return 0
}

var _ = directory.Directory{}
