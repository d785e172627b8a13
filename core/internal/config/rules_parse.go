package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	hclparser "github.com/hashicorp/hcl/hcl/parser"
	"github.com/hashicorp/hcl/hcl/token"
	koanfhcl "github.com/knadh/koanf/parsers/hcl"
	"go.yaml.in/yaml/v3"

	"github.com/heraldhq/herald/core/internal/rules"
)

// rulesShape describes how a key of the rules schema is written in HCL, so
// that HCL's generic decoding (every block and object becomes a list of
// maps) can be normalised into the shape YAML gives directly.
type rulesShape struct {
	kind   rulesShapeKind
	fields map[string]*rulesShape // for rulesObject
	elem   *rulesShape            // for rulesLabeled and rulesList
}

type rulesShapeKind int

const (
	// rulesScalar is a value or a list of values, left alone.
	rulesScalar rulesShapeKind = iota
	// rulesObject is a block or object given once.
	rulesObject
	// rulesList is a block that may repeat (audience) or a list of
	// objects (providers).
	rulesList
	// rulesLabeled is a labelled block: channel "EMAIL" {...}.
	rulesLabeled
	// rulesFree is free-form data (provider config, data maps).
	rulesFree
)

func shapeObject(fields map[string]*rulesShape) *rulesShape {
	return &rulesShape{kind: rulesObject, fields: fields}
}

var (
	shapeScalar = &rulesShape{kind: rulesScalar}
	shapeFree   = &rulesShape{kind: rulesFree}
	shapeRetry  = shapeObject(nil)
	shapeQuiet  = shapeObject(nil)
	shapeText   = shapeObject(map[string]*rulesShape{rules.KeyData: shapeFree})
	shapeTmpl   = shapeObject(map[string]*rulesShape{
		rules.KeyData:   shapeFree,
		rules.KeyLocale: {kind: rulesLabeled, elem: shapeText},
	})
	rulesFileShape = shapeObject(map[string]*rulesShape{
		rules.KeyChannel: {kind: rulesLabeled, elem: shapeObject(map[string]*rulesShape{
			rules.KeyProviders: {kind: rulesList, elem: shapeObject(map[string]*rulesShape{rules.KeyConfig: shapeFree})},
			rules.KeyRetry:     shapeRetry,
			rules.KeyBreaker:   shapeObject(nil),
		})},
		rules.KeyEvent: {kind: rulesLabeled, elem: shapeObject(map[string]*rulesShape{
			rules.KeyAudience:            {kind: rulesList, elem: shapeObject(nil)},
			rules.KeyRestrict:            {kind: rulesLabeled, elem: shapeObject(nil)},
			rules.KeyQuietHoursByChannel: shapeFree,
			rules.KeyTemplate:            {kind: rulesLabeled, elem: shapeTmpl},
			rules.KeyInbox:               shapeTmpl,
			rules.KeyPayloadSchema:       shapeFree,
		})},
		rules.KeyDefaults: shapeObject(map[string]*rulesShape{
			rules.KeyQuietHours: shapeQuiet,
			rules.KeyRetry:      shapeRetry,
			rules.KeyUserType: {kind: rulesLabeled, elem: shapeObject(map[string]*rulesShape{
				rules.KeyQuietHours: shapeQuiet,
			})},
		}),
	})
)

// rulesHCLParser is a koanf.Parser for HCL rules files: koanf's HCL parser
// followed by normalisation to the schema's shape. Problems found while
// normalising (a block given twice) are collected in problems, keyed by
// path, so that every problem of a file is reported at once.
type rulesHCLParser struct {
	problems []rulesPathProblem
}

type rulesPathProblem struct {
	path []string
	msg  string
	// occurrence is which occurrence of path the problem is about (0 =
	// first), for blocks given more than once.
	occurrence int
}

// Unmarshal parses HCL bytes into the rules file's map shape.
func (p *rulesHCLParser) Unmarshal(b []byte) (map[string]any, error) {
	m, err := koanfhcl.Parser(false).Unmarshal(b)
	if err != nil {
		return nil, err
	}
	out, _ := p.normalize(m, rulesFileShape, nil).(map[string]any)
	return out, nil
}

// Marshal is not supported.
func (p *rulesHCLParser) Marshal(map[string]any) ([]byte, error) {
	return nil, errors.New("config: HCL marshalling is not supported")
}

func (p *rulesHCLParser) problem(path []string, format string, args ...any) {
	p.problems = append(p.problems, rulesPathProblem{path: append([]string(nil), path...), msg: fmt.Sprintf(format, args...)})
}

func rulesSubPath(path []string, more ...string) []string {
	out := make([]string, 0, len(path)+len(more))
	return append(append(out, path...), more...)
}

// normalize rewrites HCL's decoding of v according to shape.
func (p *rulesHCLParser) normalize(v any, shape *rulesShape, path []string) any {
	switch shape.kind {
	case rulesObject:
		obj, ok := p.single(v, path)
		if !ok {
			return v
		}
		out := make(map[string]any, len(obj))
		for k, x := range obj {
			if fs, ok := shape.fields[k]; ok {
				out[k] = p.normalize(x, fs, rulesSubPath(path, k))
			} else {
				out[k] = normalizeFreeHCL(x)
			}
		}
		return out
	case rulesList:
		var items []any
		switch l := v.(type) {
		case []map[string]any:
			for _, m := range l {
				items = append(items, m)
			}
		case []any:
			items = l
		default:
			return v
		}
		out := make([]any, len(items))
		for i, x := range items {
			out[i] = p.normalize(x, shape.elem, rulesSubPath(path, strconv.Itoa(i)))
		}
		return out
	case rulesLabeled:
		blocks, ok := v.([]map[string]any)
		if !ok {
			if m, isMap := v.(map[string]any); isMap {
				blocks = []map[string]any{m}
			} else {
				return v
			}
		}
		out := map[string]any{}
		seen := map[string]int{}
		for _, b := range blocks {
			for label, body := range b {
				lp := rulesSubPath(path, label)
				seen[label]++
				if _, dup := out[label]; dup {
					p.problems = append(p.problems, rulesPathProblem{
						path:       lp,
						msg:        fmt.Sprintf("%s %q given twice in this file", path[len(path)-1], label),
						occurrence: seen[label] - 1,
					})
					continue
				}
				out[label] = p.normalize(body, shape.elem, lp)
			}
		}
		return out
	case rulesFree:
		return normalizeFreeHCL(v)
	}
	return v
}

// single unwraps a block HCL decoded as a one-element list of maps.
func (p *rulesHCLParser) single(v any, path []string) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case []map[string]any:
		if len(x) == 1 {
			return x[0], true
		}
		if len(x) > 1 && len(path) > 0 {
			p.problem(path, "block given %d times; give it once", len(x))
			return x[0], true
		}
	}
	return nil, false
}

// normalizeFreeHCL turns HCL's one-element lists of maps (objects) into
// maps, recursively.
func normalizeFreeHCL(v any) any {
	switch x := v.(type) {
	case []map[string]any:
		if len(x) == 1 {
			return normalizeFreeHCL(x[0])
		}
		out := make([]any, len(x))
		for i, m := range x {
			out[i] = normalizeFreeHCL(m)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, y := range x {
			out[k] = normalizeFreeHCL(y)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = normalizeFreeHCL(y)
		}
		return out
	}
	return v
}

// rulesPositions maps a path in a rules file (joined by rulesPathSep) to
// the lines it starts on, one per occurrence.
type rulesPositions map[string][]int

const rulesPathSep = "\x00"

func (ps rulesPositions) record(path []string, line int) {
	if line <= 0 {
		return
	}
	k := strings.Join(path, rulesPathSep)
	if lines := ps[k]; len(lines) == 0 || lines[len(lines)-1] != line {
		ps[k] = append(lines, line)
	}
}

// line returns the line of the longest known prefix of path (0 if none).
func (ps rulesPositions) line(path []string) int { return ps.lineOf(path, 0) }

// lineOf is line for the nth occurrence of path (the first when there are
// fewer).
func (ps rulesPositions) lineOf(path []string, nth int) int {
	for n := len(path); n > 0; n-- {
		if lines, ok := ps[strings.Join(path[:n], rulesPathSep)]; ok {
			if n == len(path) && nth < len(lines) {
				return lines[nth]
			}
			return lines[0]
		}
	}
	return 0
}

// hclRulesPositions indexes an HCL rules file's paths by line.
func hclRulesPositions(src []byte) rulesPositions {
	ps := rulesPositions{}
	f, err := hcl.ParseBytes(src)
	if err != nil {
		return ps
	}
	if list, ok := f.Node.(*ast.ObjectList); ok {
		walkHCLPositions(ps, list, rulesFileShape, nil)
	}
	return ps
}

func hclKey(k *ast.ObjectKey) string {
	if s, ok := k.Token.Value().(string); ok && k.Token.Type == token.STRING {
		return s
	}
	return k.Token.Text
}

func walkHCLPositions(ps rulesPositions, list *ast.ObjectList, shape *rulesShape, path []string) {
	counts := map[string]int{}
	for _, item := range list.Items {
		if len(item.Keys) == 0 {
			continue
		}
		key := hclKey(item.Keys[0])
		p := rulesSubPath(path, key)
		ps.record(p, item.Pos().Line)
		var fs *rulesShape
		if shape != nil && shape.fields != nil {
			fs = shape.fields[key]
		}
		if _, isList := item.Val.(*ast.ListType); isList && fs != nil && fs.kind == rulesList {
			// `providers = [{...}, {...}]`: the list's items are the
			// elements, indexed by walkHCLValue.
			walkHCLValue(ps, item.Val, fs, p)
			continue
		}
		if fs != nil && fs.kind == rulesList {
			p = rulesSubPath(p, strconv.Itoa(counts[key]))
			counts[key]++
			ps.record(p, item.Pos().Line)
			fs = fs.elem
		}
		for _, label := range item.Keys[1:] {
			p = rulesSubPath(p, hclKey(label))
			ps.record(p, label.Pos().Line)
			if fs != nil && fs.kind == rulesLabeled {
				fs = fs.elem
			}
		}
		walkHCLValue(ps, item.Val, fs, p)
	}
}

func walkHCLValue(ps rulesPositions, n ast.Node, shape *rulesShape, path []string) {
	switch v := n.(type) {
	case *ast.ObjectType:
		walkHCLPositions(ps, v.List, shape, path)
	case *ast.ListType:
		var elem *rulesShape
		if shape != nil && shape.kind == rulesList {
			elem = shape.elem
		}
		for i, x := range v.List {
			p := rulesSubPath(path, strconv.Itoa(i))
			ps.record(p, x.Pos().Line)
			walkHCLValue(ps, x, elem, p)
		}
	}
}

// yamlRulesPositions indexes a YAML rules file's paths by line.
func yamlRulesPositions(src []byte) rulesPositions {
	ps := rulesPositions{}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return ps
	}
	walkYAMLPositions(ps, &doc, nil)
	return ps
}

func walkYAMLPositions(ps rulesPositions, n *yaml.Node, path []string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkYAMLPositions(ps, c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := rulesSubPath(path, n.Content[i].Value)
			ps.record(p, n.Content[i].Line)
			walkYAMLPositions(ps, n.Content[i+1], p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := rulesSubPath(path, strconv.Itoa(i))
			ps.record(p, c.Line)
			walkYAMLPositions(ps, c, p)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			walkYAMLPositions(ps, n.Alias, path)
		}
	}
}

// rulesParseLine extracts the line of a syntax error when the parser
// reports it as data (HCL does; YAML puts it in the message).
func rulesParseLine(err error) int {
	var pe *hclparser.PosError
	if errors.As(err, &pe) {
		return pe.Pos.Line
	}
	return 0
}

// splitDecodePath turns a mapstructure field name such as
// `event[A].audience[0].group` into path segments.
func splitDecodePath(name string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '.':
			flush()
		case '[':
			flush()
			j := strings.IndexByte(name[i:], ']')
			if j < 0 {
				cur.WriteString(name[i+1:])
				i = len(name)
				continue
			}
			out = append(out, name[i+1:i+j])
			i += j
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}
