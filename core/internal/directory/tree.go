package directory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// kind is the type of a parsed value.
type kind int

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kObject
	kArray
)

func (k kind) String() string {
	switch k {
	case kBool:
		return "a boolean"
	case kNumber:
		return "a number"
	case kString:
		return "a string"
	case kObject:
		return "an object"
	case kArray:
		return "a list"
	}
	return "null"
}

// node is one parsed value with the line it starts on. Both syntaxes
// (JSON, YAML) parse into nodes, so that one strict decoder and one set of
// checks serve both.
type node struct {
	kind  kind
	line  int
	str   string // string value or number literal
	b     bool
	keys  []string // object keys, in order
	klns  []int    // line of each key
	vals  []*node  // object values, in order
	items []*node  // list items
}

func (n *node) describe() string {
	switch n.kind {
	case kString:
		return fmt.Sprintf("string %q", clip(n.str))
	case kNumber:
		return "number " + clip(n.str)
	case kBool:
		return "boolean " + strconv.FormatBool(n.b)
	}
	return n.kind.String()
}

func clip(s string) string {
	if len(s) > 60 {
		s = s[:57]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return s + "..."
	}
	return s
}

// LimitError is a limit of Limits that an input went over; Name is the
// limit's name as Limits' documentation and the error text give it.
type LimitError struct {
	Name  string
	Limit int64
	What  string
	// Line is where the input went over the limit (0: the file as a whole).
	Line int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s over the limit %s = %d", e.What, e.Name, e.Limit)
}

// syntaxError is a fault of the text itself, at a line.
type syntaxError struct {
	line int
	msg  string
}

func (e *syntaxError) Error() string { return e.msg }

// lineIndex maps byte offsets to 1-based line numbers.
type lineIndex []int // offsets of '\n'

func newLineIndex(b []byte) lineIndex {
	var nl lineIndex
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return nl
		}
		nl = append(nl, i+j)
		i += j + 1
	}
}

func (li lineIndex) line(off int64) int {
	// The token ending at off started on the line of off-1.
	o := int(off) - 1
	if o < 0 {
		o = 0
	}
	return sort.SearchInts(li, o) + 1
}

// checkUTF8 reports the line of the first invalid UTF-8 sequence.
func checkUTF8(b []byte, firstLine int) error {
	if utf8.Valid(b) {
		return nil
	}
	line := firstLine
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return &syntaxError{line: line, msg: fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", b[i])}
		}
		if r == '\n' {
			line++
		}
		i += size
	}
	return nil
}

// parseJSON parses one JSON value (the whole of b) into nodes, with a
// depth limit; firstLine is the line b starts on. Duplicate object keys
// are errors.
func parseJSON(b []byte, firstLine int, lim Limits) (*node, error) {
	if err := checkUTF8(b, firstLine); err != nil {
		return nil, err
	}
	li := newLineIndex(b)
	lineAt := func(off int64) int { return li.line(off) + firstLine - 1 }
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		n      *node
		key    string
		keyLn  int
		hasKey bool
	}
	var stack []*frame
	var root *node
	attach := func(n *node) error {
		if len(stack) == 0 {
			root = n
			return nil
		}
		top := stack[len(stack)-1]
		if top.n.kind == kArray {
			top.n.items = append(top.n.items, n)
			return nil
		}
		for _, k := range top.n.keys {
			if k == top.key {
				return &syntaxError{line: top.keyLn, msg: fmt.Sprintf("field %q appears twice in one object", clip(top.key))}
			}
		}
		top.n.keys = append(top.n.keys, top.key)
		top.n.klns = append(top.n.klns, top.keyLn)
		top.n.vals = append(top.n.vals, n)
		top.hasKey = false
		return nil
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, jsonSyntax(err, lineAt(dec.InputOffset()+1))
		}
		line := lineAt(dec.InputOffset())
		// An object key comes as a string token in key position.
		if len(stack) > 0 {
			top := stack[len(stack)-1]
			if top.n.kind == kObject && !top.hasKey {
				if s, ok := tok.(string); ok {
					top.key, top.keyLn, top.hasKey = s, line, true
					continue
				}
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= lim.MaxDepth {
					return nil, &LimitError{Name: "max_depth", Limit: int64(lim.MaxDepth), What: "nesting", Line: line}
				}
				n := &node{kind: kObject, line: line}
				if t == '[' {
					n.kind = kArray
				}
				if err := attach(n); err != nil {
					return nil, err
				}
				stack = append(stack, &frame{n: n})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if err := attach(&node{kind: kString, line: line, str: t}); err != nil {
				return nil, err
			}
		case json.Number:
			if err := attach(&node{kind: kNumber, line: line, str: string(t)}); err != nil {
				return nil, err
			}
		case bool:
			if err := attach(&node{kind: kBool, line: line, b: t}); err != nil {
				return nil, err
			}
		case nil:
			if err := attach(&node{kind: kNull, line: line}); err != nil {
				return nil, err
			}
		}
		if len(stack) == 0 {
			// One value only: anything after it is an error.
			if dec.More() {
				return nil, &syntaxError{line: lineAt(dec.InputOffset() + 1), msg: "text after the end of the JSON value"}
			}
			if _, err := dec.Token(); err != io.EOF {
				return nil, &syntaxError{line: lineAt(dec.InputOffset() + 1), msg: "text after the end of the JSON value"}
			}
			break
		}
	}
	if root == nil {
		return nil, &syntaxError{line: firstLine, msg: "empty: no JSON value"}
	}
	if len(stack) > 0 {
		return nil, &syntaxError{line: lineAt(int64(len(b))), msg: "invalid JSON: unexpected end: the JSON is truncated"}
	}
	return root, nil
}

func jsonSyntax(err error, line int) error {
	var se *json.SyntaxError
	msg := err.Error()
	if errors.As(err, &se) {
		msg = se.Error()
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "unexpected end: the JSON is truncated"
	}
	return &syntaxError{line: line, msg: "invalid JSON: " + msg}
}

// parseYAML parses one YAML document into nodes through yaml.v3's Node
// tree (the library parses; aliases stay unexpanded there). Aliases are
// expanded here against a budget of lim.MaxAliasNodes nodes in all, and
// nesting (aliases included) is bounded by lim.MaxDepth.
func parseYAML(b []byte, lim Limits) (*node, error) {
	if err := checkUTF8(b, 1); err != nil {
		return nil, err
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, &syntaxError{line: 1, msg: "empty: no YAML document"}
		}
		return nil, yamlSyntax(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &syntaxError{line: 1, msg: "empty: no YAML document"}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		line := next.Line
		if err != nil {
			return nil, yamlSyntax(err)
		}
		return nil, &syntaxError{line: line, msg: "a second YAML document: a directory file holds one"}
	}
	c := &yamlConv{lim: lim}
	return c.conv(doc.Content[0], 0, false)
}

type yamlConv struct {
	lim        Limits
	aliasNodes int64
}

func (c *yamlConv) conv(y *yaml.Node, depth int, viaAlias bool) (*node, error) {
	if depth > c.lim.MaxDepth {
		return nil, &LimitError{Name: "max_depth", Limit: int64(c.lim.MaxDepth), What: "nesting", Line: y.Line}
	}
	if viaAlias {
		c.aliasNodes++
		if c.aliasNodes > c.lim.MaxAliasNodes {
			return nil, &LimitError{Name: "max_alias_nodes", Limit: c.lim.MaxAliasNodes, What: "YAML alias expansion", Line: y.Line}
		}
	}
	switch y.Kind {
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &syntaxError{line: y.Line, msg: "alias to an unknown anchor"}
		}
		n, err := c.conv(y.Alias, depth, true)
		if err != nil {
			return nil, err
		}
		return n, nil
	case yaml.DocumentNode:
		return nil, &syntaxError{line: y.Line, msg: "nested YAML document"}
	case yaml.MappingNode:
		n := &node{kind: kObject, line: y.Line}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k, v := y.Content[i], y.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return nil, &syntaxError{line: k.Line, msg: "mapping keys must be plain names (no merge keys << or complex keys)"}
			}
			for _, have := range n.keys {
				if have == k.Value {
					return nil, &syntaxError{line: k.Line, msg: fmt.Sprintf("field %q appears twice in one mapping", clip(k.Value))}
				}
			}
			vn, err := c.conv(v, depth+1, viaAlias)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k.Value)
			n.klns = append(n.klns, k.Line)
			n.vals = append(n.vals, vn)
		}
		return n, nil
	case yaml.SequenceNode:
		n := &node{kind: kArray, line: y.Line}
		for _, it := range y.Content {
			in, err := c.conv(it, depth+1, viaAlias)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, in)
		}
		return n, nil
	case yaml.ScalarNode:
		n := &node{line: y.Line, str: y.Value}
		switch y.ShortTag() {
		case "!!null":
			n.kind = kNull
		case "!!bool":
			var v bool
			if err := y.Decode(&v); err != nil {
				return nil, &syntaxError{line: y.Line, msg: err.Error()}
			}
			n.kind, n.b = kBool, v
		case "!!int", "!!float":
			n.kind = kNumber
		default:
			n.kind = kString
		}
		return n, nil
	}
	return nil, &syntaxError{line: y.Line, msg: "unsupported YAML node"}
}

func yamlSyntax(err error) error {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	line := 0
	// yaml.v3 errors read "yaml: line N: ...".
	if _, err := fmt.Sscanf(msg, "yaml: line %d:", &line); err == nil {
		if i := bytes.IndexByte([]byte(msg), ':'); i >= 0 {
			rest := msg[i+1:]
			if j := bytes.IndexByte([]byte(rest), ':'); j >= 0 {
				msg = rest[j+1:]
			}
		}
	}
	return &syntaxError{line: line, msg: "invalid YAML: " + strings.TrimSpace(strings.TrimPrefix(msg, "yaml:"))}
}
