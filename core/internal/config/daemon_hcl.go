package config

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/heraldhq/herald/core/internal/hcllimit"
	"github.com/zclconf/go-cty/cty"
)

// Limits of a daemon file. A file beyond any of them is refused with an
// error that names the limit; a daemon file is a few kilobytes.
const (
	// MaxDaemonFileSize is the largest daemon file read, in bytes.
	MaxDaemonFileSize = 1 << 20
	// MaxDaemonDepth is the deepest nesting of blocks, lists, objects,
	// parentheses, strings and templates in an HCL daemon file, or of
	// mappings and sequences in a YAML one.
	MaxDaemonDepth = 32
	// maxDaemonUnaryRun is the longest run of prefix operators (!, -) in
	// HCL, which the parser would otherwise nest one level each.
	maxDaemonUnaryRun = 16
	// maxDaemonConditionals is the most ?: conditionals in an HCL daemon
	// file (each nests the parser one level).
	maxDaemonConditionals = 64
)

// hclParser is the koanf.Parser of HCL2 daemon files (the syntax of the
// rules files): attributes are evaluated, so `max_conns = 8 * 2` is 16,
// without variables or functions; an unlabelled block (`http { ... }`) is
// a map under its name, a labelled one (`queue "name" { ... }`) a map of
// label to body under its name. A block or attribute given twice is an
// error naming both lines. It records where each key stands, for the
// loader's errors.
type hclParser struct {
	// filename names the file in errors.
	filename string
	// pos is where each key (path joined by dots) was given; Unmarshal
	// fills it.
	pos positions
}

// positions maps a key path ("http.listen", "amqp.queue.q.bindings") to
// the line it was given at.
type positions map[string]int

func newHCLParser(filename string) *hclParser {
	return &hclParser{filename: filename, pos: positions{}}
}

// Unmarshal parses and evaluates an HCL2 daemon file.
func (p *hclParser) Unmarshal(src []byte) (map[string]any, error) {
	if len(src) > MaxDaemonFileSize {
		return nil, fmt.Errorf("%s: file larger than %d bytes (limit)", p.filename, MaxDaemonFileSize)
	}
	if !utf8.Valid(src) {
		return nil, fmt.Errorf("%s: not valid UTF-8 text", p.filename)
	}
	if err := p.checkLimits(src); err != nil {
		return nil, err
	}
	file, diags := hclsyntax.ParseConfig(src, p.filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, fmt.Errorf("%s: not an HCL native syntax file", p.filename)
	}
	return p.body(body, "")
}

// Marshal is not supported: Herald never writes daemon files.
func (p *hclParser) Marshal(map[string]any) ([]byte, error) {
	return nil, errors.New("writing HCL daemon files is not supported")
}

// body evaluates a block body whose key path is path.
func (p *hclParser) body(b *hclsyntax.Body, path string) (map[string]any, error) {
	out := map[string]any{}
	lines := map[string]int{}
	// Attributes come in a map: sort them by position for stable errors.
	attrs := make([]*hclsyntax.Attribute, 0, len(b.Attributes))
	for _, a := range b.Attributes {
		attrs = append(attrs, a)
	}
	sort.Slice(attrs, func(i, j int) bool { return attrs[i].SrcRange.Start.Byte < attrs[j].SrcRange.Start.Byte })
	for _, a := range attrs {
		key := joinKey(path, a.Name)
		line := a.NameRange.Start.Line
		if err := refuseExpr(a.Expr); err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %v", p.filename, line, key, err)
		}
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			return nil, diagError(diags)
		}
		gv, err := goValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %v", p.filename, line, key, err)
		}
		out[a.Name] = gv
		lines[a.Name] = line
		p.pos[key] = line
	}
	for _, blk := range b.Blocks {
		line := blk.DefRange().Start.Line
		key := joinKey(path, blk.Type)
		if first, dup := lines[blk.Type]; dup && len(blk.Labels) == 0 {
			return nil, fmt.Errorf("%s:%d: %s: given twice (first at line %d); write one %s block", p.filename, line, key, first, blk.Type)
		}
		switch len(blk.Labels) {
		case 0:
			m, err := p.body(blk.Body, key)
			if err != nil {
				return nil, err
			}
			out[blk.Type] = m
			lines[blk.Type] = line
			p.pos[key] = line
		case 1:
			label := blk.Labels[0]
			if first, ok := lines[blk.Type]; ok {
				if _, isMap := out[blk.Type].(labelled); !isMap {
					return nil, fmt.Errorf("%s:%d: %s: given twice (first at line %d)", p.filename, line, key, first)
				}
			}
			set, _ := out[blk.Type].(labelled)
			if set == nil {
				set = labelled{}
				out[blk.Type] = set
				lines[blk.Type] = line
				p.pos[key] = line
			}
			lkey := joinKey(key, label)
			if first, dup := p.pos[lkey]; dup {
				return nil, fmt.Errorf("%s:%d: %s: given twice (first at line %d)", p.filename, line, lkey, first)
			}
			m, err := p.body(blk.Body, lkey)
			if err != nil {
				return nil, err
			}
			set[label] = m
			p.pos[lkey] = line
		default:
			return nil, fmt.Errorf("%s:%d: %s: a block takes at most one label, got %d", p.filename, line, key, len(blk.Labels))
		}
	}
	// Labelled blocks become plain maps of label to body.
	for k, v := range out {
		if l, ok := v.(labelled); ok {
			out[k] = map[string]any(l)
		}
	}
	return out, nil
}

// labelled collects the labelled blocks of one type while a body is read.
type labelled map[string]any

// refuseExpr refuses the expressions that could make a small file
// evaluate to a huge value (for expressions, splats); variables and
// functions are refused when the expression is evaluated (no context).
func refuseExpr(e hclsyntax.Expression) error {
	var err error
	hclsyntax.VisitAll(e, func(n hclsyntax.Node) hcl.Diagnostics {
		if err != nil {
			return nil
		}
		switch n.(type) {
		case *hclsyntax.ForExpr, *hclsyntax.TemplateJoinExpr:
			err = errors.New("for expressions are not allowed in the daemon file")
		case *hclsyntax.SplatExpr:
			err = errors.New("splat expressions are not allowed in the daemon file")
		}
		return nil
	})
	return err
}

// goValue converts an evaluated attribute to what koanf holds: string,
// int64 (whole numbers) or float64, bool, []any and map[string]any.
func goValue(v cty.Value) (any, error) {
	if v.IsNull() {
		return nil, errors.New("null is not a value here")
	}
	if !v.IsWhollyKnown() {
		return nil, errors.New("the value is not known")
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString(), nil
	case t == cty.Bool:
		return v.True(), nil
	case t == cty.Number:
		f := v.AsBigFloat()
		if f.IsInt() {
			if i, acc := f.Int64(); acc == 0 {
				return i, nil
			}
			return nil, errors.New("the number is out of range")
		}
		// (Never format such a number: its decimal digits could take
		// minutes to compute.)
		x, _ := f.Float64()
		if math.IsInf(x, 0) {
			return nil, errors.New("the number is out of range")
		}
		return x, nil
	case t.IsListType() || t.IsTupleType() || t.IsSetType():
		out := make([]any, 0, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			g, err := goValue(e)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
		return out, nil
	case t.IsMapType() || t.IsObjectType():
		out := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			g, err := goValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.AsString(), err)
			}
			out[k.AsString()] = g
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value of type %s", t.FriendlyName())
}

// checkLimits refuses a file nested deeper than MaxDaemonDepth, or with
// long runs of prefix operators or many conditionals, before the
// (recursive) parser reads it: the scanner the rules files use
// (hcllimit), with the daemon file's limits.
func (p *hclParser) checkLimits(src []byte) error {
	err := hcllimit.Check(src, hcllimit.Limits{MaxDepth: MaxDaemonDepth, MaxUnaryRun: maxDaemonUnaryRun, MaxConditionals: maxDaemonConditionals})
	var le *hcllimit.Error
	if errors.As(err, &le) {
		return fmt.Errorf("%s:%d: %s", p.filename, le.Line, le.Msg)
	}
	return err
}

// diagError is the errors of diags, each with its file and line.
func diagError(diags hcl.Diagnostics) error {
	var msgs []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d: %s", d.Subject.Filename, d.Subject.Start.Line, msg)
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// joinKey joins a key path and a key.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
