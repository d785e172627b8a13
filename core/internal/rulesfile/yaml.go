package rulesfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"go.yaml.in/yaml/v3"
)

// A YAML rules file is an adapter into the same spec as HCL: its node tree
// is written out as JSON with every value on the line (and, as far as the
// JSON spelling allows, the column) where it stands in the YAML, and that
// JSON is read by hcl/v2's JSON syntax, whose bodies decode like HCL's
// (labeled blocks are objects keyed by label, repeated blocks are lists).
// Diagnostics therefore carry the YAML file's lines.

// rulesPosError is a problem found at a line and column of a file.
type rulesPosError struct {
	line, col int
	msg       string
}

func (e *rulesPosError) Error() string { return e.msg }

// yamlJSON writes a YAML node tree as positioned JSON.
type yamlJSON struct {
	buf       bytes.Buffer
	line, col int
	nodes     int
	pinned    int // > 0 while expanding an alias: its nodes stand where the alias does
	// aliasLine and aliasCol are where the outermost alias being expanded
	// stands, where a limit met inside it is reported.
	aliasLine, aliasCol int
}

// where is the position to report a problem of n at.
func (w *yamlJSON) where(n *yaml.Node) (int, int) {
	if w.pinned > 0 {
		return w.aliasLine, w.aliasCol
	}
	return n.Line, n.Column
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlRulesBody parses YAML source into an hcl.Body, enforcing the nesting
// and alias limits.
func yamlRulesBody(src []byte, filename string) (hcl.Body, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errRulesEmpty
		}
		return nil, yamlSyntaxError(err)
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		return nil, &rulesPosError{line: second.Line, msg: "a rules file holds one YAML document; this is a second one"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlSyntaxError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, errRulesEmpty
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, errRulesEmpty
	}
	if root.Kind != yaml.MappingNode {
		return nil, &rulesPosError{line: root.Line, col: root.Column, msg: "a rules file is a mapping of channel, event and defaults"}
	}
	if len(root.Content) == 0 {
		return nil, errRulesEmpty
	}
	w := &yamlJSON{line: 1, col: 1}
	if err := w.node(root, 0); err != nil {
		return nil, err
	}
	f, diags := hcljson.Parse(w.buf.Bytes(), filename)
	if diags.HasErrors() {
		// The JSON is ours: a problem here is a bug, said plainly.
		return nil, fmt.Errorf("internal error reading YAML as JSON: %s", diags.Error())
	}
	return f.Body, nil
}

func yamlSyntaxError(err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &rulesPosError{line: line, msg: "syntax error: " + m[2]}
	}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
		if m := yamlLineRE.FindStringSubmatch("yaml: " + msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &rulesPosError{line: line, msg: "syntax error: " + m[2]}
		}
	}
	return &rulesPosError{msg: "syntax error: " + msg}
}

// pad moves the output to line and col (never backwards).
func (w *yamlJSON) pad(line, col int) {
	if w.pinned > 0 {
		return
	}
	for w.line < line {
		w.buf.WriteByte('\n')
		w.line++
		w.col = 1
	}
	if w.line == line {
		for w.col < col {
			w.buf.WriteByte(' ')
			w.col++
		}
	}
}

// write appends s, which holds no newline.
func (w *yamlJSON) write(s string) {
	w.buf.WriteString(s)
	w.col += utf8.RuneCountInString(s)
}

func (w *yamlJSON) node(n *yaml.Node, depth int) error {
	if depth > MaxDepth {
		line, col := w.where(n)
		return &rulesPosError{line: line, col: col, msg: fmt.Sprintf("nesting deeper than %d levels (limit)", MaxDepth)}
	}
	w.nodes++
	if w.nodes > MaxYAMLNodes {
		line, col := w.where(n)
		return &rulesPosError{line: line, col: col, msg: fmt.Sprintf("more than %d YAML values once aliases are expanded (limit)", MaxYAMLNodes)}
	}
	switch n.Kind {
	case yaml.MappingNode:
		// The brace goes where the output stands: in block style the
		// mapping starts where its first key does, which keeps its column.
		w.write("{")
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			if k.Kind != yaml.ScalarNode {
				return &rulesPosError{line: k.Line, col: k.Column, msg: "a mapping key must be a plain name"}
			}
			if k.Tag == "!!merge" || (k.Value == "<<" && k.Style == 0) {
				return &rulesPosError{line: k.Line, col: k.Column, msg: "YAML merge keys (<<) are not supported: repeat the fields, or use an alias for a whole value"}
			}
			if i > 0 {
				w.write(",")
			}
			w.pad(k.Line, k.Column)
			b, _ := json.Marshal(k.Value)
			w.write(string(b))
			w.write(":")
			if err := w.node(v, depth+1); err != nil {
				return err
			}
		}
		w.write("}")
	case yaml.SequenceNode:
		w.write("[")
		for i, c := range n.Content {
			if i > 0 {
				w.write(",")
			}
			if err := w.node(c, depth+1); err != nil {
				return err
			}
		}
		w.write("]")
	case yaml.AliasNode:
		if n.Alias == nil {
			return &rulesPosError{line: n.Line, col: n.Column, msg: "alias to an unknown anchor"}
		}
		w.pad(n.Line, n.Column)
		if w.pinned == 0 {
			w.aliasLine, w.aliasCol = n.Line, n.Column
		}
		w.pinned++
		err := w.node(n.Alias, depth+1)
		w.pinned--
		return err
	case yaml.ScalarNode:
		w.pad(n.Line, n.Column)
		s, err := yamlScalarJSON(n)
		if err != nil {
			return err
		}
		w.write(s)
	default:
		return &rulesPosError{line: n.Line, col: n.Column, msg: "unexpected YAML node"}
	}
	return nil
}

// yamlScalarJSON is a scalar as a JSON token: null, true/false, a number,
// or a string (for strings and every other tag, e.g. timestamps).
func yamlScalarJSON(n *yaml.Node) (string, error) {
	var v any
	switch n.ShortTag() {
	case "!!null":
		return "null", nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return "", &rulesPosError{line: n.Line, col: n.Column, msg: err.Error()}
		}
		v = b
	case "!!int", "!!float":
		var f any
		if err := n.Decode(&f); err != nil {
			return "", &rulesPosError{line: n.Line, col: n.Column, msg: err.Error()}
		}
		switch x := f.(type) {
		case float64:
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return "", &rulesPosError{line: n.Line, col: n.Column, msg: fmt.Sprintf("%s: want a finite number", n.Value)}
			}
		}
		v = f
	default:
		v = n.Value
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", &rulesPosError{line: n.Line, col: n.Column, msg: err.Error()}
	}
	return string(b), nil
}
