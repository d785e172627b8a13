// Package directory is Herald's directory model and its file format. The
// model (model.go) is recipients, their devices and quiet hours, groups,
// members, preferences and group settings: the snapshot a decision of the
// rules engine reads and the SQL layer loads. The package also reads
// directory files (the data `herald directory import` loads and
// `herald rules explain --directory` decides against) strictly and as a
// whole. One file is JSON or YAML (an object of five lists) or JSONL
// (one entry a line, {"recipient": {...}}, for large imports). Every
// problem is reported at once, in Herald's words, naming the entry and its
// line:
//
//	dir.json:14: recipients[3] (user s1): time_zone: unknown zone "Europe/Roma"
//
// The types, their field names and which fields are required come from
// the struct tags of the model's types, which the JSON Schema (Schema) is
// derived from too. Inputs are bounded by Limits.
package directory

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
)

// Format is the syntax of a directory file.
type Format string

// Formats of directory files.
const (
	JSON  Format = "json"
	YAML  Format = "yaml"
	JSONL Format = "jsonl"
)

// FormatOf picks the format from a file name: .yaml/.yml, .jsonl/.ndjson,
// anything else JSON.
func FormatOf(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return YAML
	case ".jsonl", ".ndjson":
		return JSONL
	}
	return JSON
}

// Limits bound what a directory file may cost to read. Each has a name
// (in parentheses) that the error of an input over it gives.
type Limits struct {
	// MaxFileBytes bounds a JSON or JSONL file (max_file_bytes).
	MaxFileBytes int64
	// MaxYAMLBytes bounds a YAML file, whose node tree costs more memory
	// per byte than JSON's (max_yaml_bytes); use JSONL for large imports.
	MaxYAMLBytes int64
	// MaxLineBytes bounds one JSONL line (max_line_bytes).
	MaxLineBytes int
	// MaxDepth bounds nesting of lists and objects (max_depth); the format
	// itself needs 4.
	MaxDepth int
	// MaxAliasNodes bounds the nodes YAML aliases expand to, all aliases
	// together (max_alias_nodes).
	MaxAliasNodes int64
	// MaxProblems is how many problems are listed; the rest are counted.
	MaxProblems int
}

// DefaultLimits are the limits `herald directory import` and `rules
// explain --directory` use.
func DefaultLimits() Limits {
	return Limits{
		MaxFileBytes:  1 << 30,
		MaxYAMLBytes:  16 << 20,
		MaxLineBytes:  1 << 20,
		MaxDepth:      16,
		MaxAliasNodes: 10_000,
		MaxProblems:   1000,
	}
}

func (l *Limits) setDefaults() {
	d := DefaultLimits()
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxYAMLBytes <= 0 {
		l.MaxYAMLBytes = d.MaxYAMLBytes
	}
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = d.MaxLineBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxAliasNodes <= 0 {
		l.MaxAliasNodes = d.MaxAliasNodes
	}
	if l.MaxProblems <= 0 {
		l.MaxProblems = d.MaxProblems
	}
}

// Options tune Parse.
type Options struct {
	// Format is the file's syntax; empty: FormatOf(name).
	Format Format
	Limits Limits
	// Known reports which group keys and user ids that entries refer to,
	// but the file does not declare, exist elsewhere (the tenant's
	// directory in the database). Nil: references must be declared in the
	// file.
	Known func(groups, users []string) (knownGroups, knownUsers map[string]bool, err error)
	// Read, when set, counts the bytes read so far (for a progress bar).
	Read *atomic.Int64
}

// Problem is one fault of a directory file: its line, the entry
// (`recipients[3] (user s1)`, empty for the file as a whole), the field
// path inside the entry and what is wrong.
type Problem struct {
	File  string `json:"file"`
	Line  int    `json:"line,omitempty"`
	Entry string `json:"entry,omitempty"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`

	order int // the entry's position in the file, to sort problems
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Entry != "" {
		b.WriteString(p.Entry + ": ")
	}
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems are every problem of a file, in file order.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Result is a parsed directory file.
type Result struct {
	// Directory holds the good entries only.
	Directory Directory
	// Problems lists every problem (up to Limits.MaxProblems; Dropped
	// counts the rest). Entries with a problem are not in Directory.
	Problems Problems
	Dropped  int
	// Entries counts the entries read, Bad those refused.
	Entries, Bad int
}

// OK reports whether the file has no problem at all.
func (r *Result) OK() bool { return len(r.Problems) == 0 && r.Dropped == 0 }

// sections in file order, with the JSONL key of one entry and its type.
var sections = []struct {
	name, one string
	typ       reflect.Type
}{
	{"recipients", "recipient", reflect.TypeFor[Recipient]()},
	{"groups", "group", reflect.TypeFor[Group]()},
	{"members", "member", reflect.TypeFor[Member]()},
	{"preferences", "preference", reflect.TypeFor[Preference]()},
	{"settings", "setting", reflect.TypeFor[GroupSetting]()},
}

func sectionNames() string {
	var s []string
	for _, sec := range sections {
		s = append(s, sec.name)
	}
	return strings.Join(s, ", ")
}

func sectionOnes() string {
	var s []string
	for _, sec := range sections {
		s = append(s, sec.one)
	}
	return strings.Join(s, ", ")
}

// entry is one decoded entry with where it came from.
type entry struct {
	sec   int
	index int
	line  int
	value reflect.Value // *Recipient, ...
	bad   bool
	pos   int // 1-based position in the file
}

func (e *entry) label() string {
	s := fmt.Sprintf("%s[%d]", sections[e.sec].name, e.index)
	var l string
	switch v := e.value.Interface().(type) {
	case *Recipient:
		if v.UserID != "" {
			l = "user " + v.UserID
		}
	case *Group:
		if v.Key != "" {
			l = "group " + v.Key
		}
	case *Member:
		l = "group " + v.Group + ", user " + v.UserID
	case *Preference:
		l = "user " + v.UserID + ", channel " + v.Channel
	case *GroupSetting:
		l = "group " + v.Group + ", channel " + v.Channel
	}
	if l != "" {
		s += " (" + clip(l) + ")"
	}
	return s
}

// parser accumulates the entries and problems of one file.
type parser struct {
	name    string
	lim     Limits
	entries []*entry
	counts  [5]int
	res     *Result
}

func (p *parser) problem(pr Problem) {
	pr.File = p.name
	if len(p.res.Problems) >= p.lim.MaxProblems {
		p.res.Dropped++
		return
	}
	p.res.Problems = append(p.res.Problems, pr)
}

// add decodes one entry node of section sec.
func (p *parser) add(sec int, n *node) {
	e := &entry{sec: sec, index: p.counts[sec], line: n.line, value: reflect.New(sections[sec].typ), pos: len(p.entries) + 1}
	p.counts[sec]++
	var d decoder
	d.decodeStruct(n, e.value.Elem(), "")
	p.entries = append(p.entries, e)
	for _, fp := range d.probs {
		e.bad = true
		p.problem(Problem{Line: fp.line, Entry: e.label(), Field: fp.field, Msg: fp.msg, order: e.pos})
	}
}

// Parse reads a whole directory file from r (name is the file name the
// problems give) and checks it as a whole. A file that cannot be read as
// a directory at all (syntax, a limit) returns an error, a Problems of
// one; otherwise the Result lists every problem, and holds the good
// entries.
func Parse(r io.Reader, name string, opt Options) (*Result, error) {
	opt.Limits.setDefaults()
	if opt.Format == "" {
		opt.Format = FormatOf(name)
	}
	p := &parser{name: name, lim: opt.Limits, res: &Result{}}
	cr := &countReader{r: r, n: opt.Read}
	fatal := func(err error) (*Result, error) {
		var se *syntaxError
		var le *LimitError
		switch {
		case errors.As(err, &se):
			return nil, Problems{{File: name, Line: se.line, Msg: se.msg}}
		case errors.As(err, &le):
			return nil, Problems{{File: name, Line: le.Line, Msg: le.Error()}}
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch opt.Format {
	case JSONL:
		if err := p.readJSONL(cr); err != nil {
			return fatal(err)
		}
	case JSON, YAML:
		max := opt.Limits.MaxFileBytes
		limName := "max_file_bytes"
		if opt.Format == YAML {
			max, limName = opt.Limits.MaxYAMLBytes, "max_yaml_bytes"
		}
		data, err := io.ReadAll(io.LimitReader(cr, max+1))
		if err != nil {
			return fatal(err)
		}
		if int64(len(data)) > max {
			return fatal(&LimitError{Name: limName, Limit: max, What: "file size"})
		}
		var root *node
		if opt.Format == YAML {
			root, err = parseYAML(data, opt.Limits)
		} else {
			root, err = parseJSON(data, 1, opt.Limits)
		}
		if err != nil {
			return fatal(err)
		}
		p.readDocument(root)
	default:
		return nil, fmt.Errorf("%s: unknown directory format %q (want json, yaml or jsonl)", name, opt.Format)
	}
	if len(p.entries) == 0 && len(p.res.Problems) == 0 {
		return nil, Problems{{File: name, Msg: "the directory is empty: no " + sectionNames()}}
	}
	if err := p.crossCheck(opt.Known); err != nil {
		return nil, err
	}
	p.collect()
	return p.res, nil
}

// readDocument reads the JSON or YAML form: an object of five lists.
func (p *parser) readDocument(root *node) {
	if root.kind != kObject {
		p.problem(Problem{Line: root.line, Msg: fmt.Sprintf("got %s, want an object with the lists %s", root.describe(), sectionNames())})
		return
	}
	for i, k := range root.keys {
		sec := -1
		for j, s := range sections {
			if s.name == k {
				sec = j
			}
		}
		if sec < 0 {
			p.problem(Problem{Line: root.klns[i], Field: k, Msg: "unknown section (want one of " + sectionNames() + ")"})
			continue
		}
		v := root.vals[i]
		if v.kind == kNull {
			continue
		}
		if v.kind != kArray {
			p.problem(Problem{Line: v.line, Field: k, Msg: fmt.Sprintf("got %s, want a list", v.describe())})
			continue
		}
		for _, it := range v.items {
			p.add(sec, it)
		}
	}
}

// readJSONL reads one entry a line: {"recipient": {...}}; blank lines are
// skipped. A line that is not a valid entry is a problem of that line;
// the file as a whole is bounded by MaxFileBytes.
func (p *parser) readJSONL(cr *countReader) error {
	br := bufio.NewReaderSize(cr, 64<<10)
	var buf []byte
	for line := 1; ; line++ {
		buf = buf[:0]
		tooLong := false
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			if !tooLong {
				if len(buf)+len(chunk) > p.lim.MaxLineBytes+1 {
					tooLong = true
					buf = buf[:0]
				} else {
					buf = append(buf, chunk...)
				}
			}
			if cr.total > p.lim.MaxFileBytes {
				return &LimitError{Name: "max_file_bytes", Limit: p.lim.MaxFileBytes, What: "file size"}
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil && err != io.EOF {
			return err
		}
		if tooLong {
			p.problem(Problem{Line: line, Msg: (&LimitError{Name: "max_line_bytes", Limit: int64(p.lim.MaxLineBytes), What: "line length"}).Error()})
		} else if t := bytes.TrimSpace(buf); len(t) > 0 {
			p.lineEntry(t, line)
		}
		if err == io.EOF {
			return nil
		}
	}
}

func (p *parser) lineEntry(b []byte, line int) {
	n, err := parseJSON(b, line, p.lim)
	if err != nil {
		var se *syntaxError
		msg := err.Error()
		if errors.As(err, &se) {
			msg = se.msg
			line = se.line
		}
		p.problem(Problem{Line: line, Msg: msg})
		return
	}
	if n.kind != kObject || len(n.keys) != 1 {
		p.problem(Problem{Line: line, Msg: "want one entry a line: an object with one key, " + sectionOnes() + ` (such as {"recipient": {"user_id": "u1", "user_type": "STAFF"}})`})
		return
	}
	for j, s := range sections {
		if s.one == n.keys[0] {
			p.add(j, n.vals[0])
			return
		}
	}
	p.problem(Problem{Line: line, Field: n.keys[0], Msg: "unknown kind of entry (want one of " + sectionOnes() + ")"})
}

// crossCheck finds duplicates and references to undeclared groups and
// users, across the whole file (and, through known, the database).
func (p *parser) crossCheck(known func(groups, users []string) (map[string]bool, map[string]bool, error)) error {
	users := map[string]*entry{}
	groups := map[string]*entry{}
	type keyed struct{ a, b, c string }
	seen := map[int]map[keyed]*entry{2: {}, 3: {}, 4: {}}
	dup := func(e, first *entry, field string) {
		e.bad = true
		p.problem(Problem{Line: e.line, Entry: e.label(), order: e.pos, Field: field,
			Msg: fmt.Sprintf("duplicate: %s (line %d) is the same %s", first.label(), first.line, sections[e.sec].one)})
	}
	for _, e := range p.entries {
		switch v := e.value.Interface().(type) {
		case *Recipient:
			if v.UserID == "" {
				continue
			}
			if first, ok := users[v.UserID]; ok {
				dup(e, first, "user_id")
				continue
			}
			users[v.UserID] = e
		case *Group:
			if v.Key == "" {
				continue
			}
			if first, ok := groups[v.Key]; ok {
				dup(e, first, "key")
				continue
			}
			groups[v.Key] = e
		}
	}
	// References: collect the undeclared ones and ask known once.
	var undGroups, undUsers []string
	refs := func(e *entry) (group, user string) {
		switch v := e.value.Interface().(type) {
		case *Member:
			return v.Group, v.UserID
		case *Preference:
			return "", v.UserID
		case *GroupSetting:
			return v.Group, ""
		}
		return "", ""
	}
	for _, e := range p.entries {
		g, u := refs(e)
		if g != "" && groups[g] == nil {
			undGroups = append(undGroups, g)
		}
		if u != "" && users[u] == nil {
			undUsers = append(undUsers, u)
		}
	}
	kg, ku := map[string]bool{}, map[string]bool{}
	if known != nil && len(undGroups)+len(undUsers) > 0 {
		var err error
		if kg, ku, err = known(uniq(undGroups), uniq(undUsers)); err != nil {
			return err
		}
	}
	where := "in this file"
	if known != nil {
		where = "in this file or the tenant's directory"
	}
	for _, e := range p.entries {
		if e.sec < 2 {
			continue
		}
		g, u := refs(e)
		if g != "" {
			if d := groups[g]; d == nil && !kg[g] {
				e.bad = true
				p.problem(Problem{Line: e.line, Entry: e.label(), order: e.pos, Field: "group", Msg: fmt.Sprintf("group %q is not declared %s (groups)", clip(g), where)})
			} else if d != nil && d.bad {
				e.bad = true
				p.problem(Problem{Line: e.line, Entry: e.label(), order: e.pos, Field: "group", Msg: fmt.Sprintf("refers to %s (line %d), which has errors", d.label(), d.line)})
			}
		}
		if u != "" {
			if d := users[u]; d == nil && !ku[u] {
				e.bad = true
				p.problem(Problem{Line: e.line, Entry: e.label(), order: e.pos, Field: "user_id", Msg: fmt.Sprintf("user %q is not declared %s (recipients)", clip(u), where)})
			} else if d != nil && d.bad {
				e.bad = true
				p.problem(Problem{Line: e.line, Entry: e.label(), order: e.pos, Field: "user_id", Msg: fmt.Sprintf("refers to %s (line %d), which has errors", d.label(), d.line)})
			}
		}
		var k keyed
		field := ""
		switch v := e.value.Interface().(type) {
		case *Member:
			k, field = keyed{v.Group, v.UserID, ""}, "user_id"
		case *Preference:
			k, field = keyed{v.UserID, v.EventType, v.Channel}, "channel"
		case *GroupSetting:
			k, field = keyed{v.Group, v.EventType, v.Channel}, "channel"
		}
		if first, ok := seen[e.sec][k]; ok {
			dup(e, first, field)
			continue
		}
		seen[e.sec][k] = e
	}
	// Problems in file order (line, then the order found).
	sort.SliceStable(p.res.Problems, func(i, j int) bool {
		a, b := p.res.Problems[i], p.res.Problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.order < b.order
	})
	return nil
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// collect builds the Directory from the good entries.
func (p *parser) collect() {
	d := &p.res.Directory
	for _, e := range p.entries {
		p.res.Entries++
		if e.bad {
			p.res.Bad++
			continue
		}
		switch v := e.value.Interface().(type) {
		case *Recipient:
			d.Recipients = append(d.Recipients, *v)
		case *Group:
			d.Groups = append(d.Groups, *v)
		case *Member:
			d.Members = append(d.Members, *v)
		case *Preference:
			d.Preferences = append(d.Preferences, *v)
		case *GroupSetting:
			d.Settings = append(d.Settings, *v)
		}
	}
	p.entries = nil
}

// countReader counts the bytes read.
type countReader struct {
	r     io.Reader
	n     *atomic.Int64
	total int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.total += int64(n)
	if c.n != nil {
		c.n.Add(int64(n))
	}
	return n, err
}
