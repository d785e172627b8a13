package rulesfile

import (
	"fmt"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// The rules schema is the raw structs of rules.go: their `hcl` tags are the
// one spec that both syntaxes decode through (YAML becomes an hcl.Body, see
// yaml.go) and that `herald rules schema` turns into a JSON Schema
// (schema.go). A tag is `hcl:"NAME,KIND"` with KIND one of
//
//	attr     an attribute (NAME = value); the Go type says which values fit
//	block    a block given at most once (NAME { ... }), a pointer to a struct
//	blocks   a block that may repeat (audience { ... } audience { ... })
//	labeled  a block with one label (channel "EMAIL" { ... }), a map by label
//
// and an optional `doc:"..."` tag describes the field in the JSON Schema.

type rulesFieldKind int

const (
	fieldAttr rulesFieldKind = iota
	fieldBlock
	fieldBlocks
	fieldLabeled
)

// rulesField is one field of a rules struct as its tag declares it.
type rulesField struct {
	name  string
	kind  rulesFieldKind
	index int
	typ   reflect.Type
	doc   string
	enum  []string
	// types are the JSON types a free-form value may take (schema tag).
	types []string
}

var rulesFieldsCache sync.Map // reflect.Type → []rulesField

// rulesFields returns the tagged fields of a rules struct type.
func rulesFields(t reflect.Type) []rulesField {
	if v, ok := rulesFieldsCache.Load(t); ok {
		return v.([]rulesField)
	}
	var out []rulesField
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("hcl")
		if !ok {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		f := rulesField{name: name, index: i, typ: sf.Type, doc: sf.Tag.Get("doc")}
		if ts := sf.Tag.Get("schema"); ts != "" {
			f.types = strings.Split(ts, "|")
		}
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, "|")
		}
		switch kind {
		case "attr", "":
			f.kind = fieldAttr
		case "block":
			f.kind = fieldBlock
		case "blocks":
			f.kind = fieldBlocks
		case "labeled":
			f.kind = fieldLabeled
		default:
			panic("config: bad hcl tag kind " + kind + " on " + t.String() + "." + sf.Name)
		}
		out = append(out, f)
	}
	rulesFieldsCache.Store(t, out)
	return out
}

// rulesBodySchema is the hcl.BodySchema of a rules struct type.
func rulesBodySchema(t reflect.Type) *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, f := range rulesFields(t) {
		switch f.kind {
		case fieldAttr:
			s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: f.name})
		case fieldBlock, fieldBlocks:
			s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: f.name})
		case fieldLabeled:
			s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: f.name, LabelNames: []string{"name"}})
		}
	}
	return s
}

// rulesDecoder decodes one file's body into its raw structs, recording the
// source range of every path and reporting every problem (it never stops
// at the first).
type rulesDecoder struct {
	c *rulesCollector
	f *rulesFile
}

func (d *rulesDecoder) problem(path []string, rng hcl.Range, format string, args ...any) {
	d.c.addAt(d.f, path, rng, fmt.Sprintf(format, args...))
}

// diags reports hcl diagnostics (errors only) at path.
func (d *rulesDecoder) diags(path []string, diags hcl.Diagnostics) {
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		var rng hcl.Range
		if dg.Subject != nil {
			rng = *dg.Subject
		}
		d.c.addAt(d.f, path, rng, rulesDiagText(dg))
	}
}

// rulesDiagText is an hcl diagnostic as one line.
func rulesDiagText(dg *hcl.Diagnostic) string {
	if dg.Summary == "Variables not allowed" || dg.Summary == "Function calls not allowed" {
		return "rules files hold plain values: ${ and %{ start HCL expressions, which are not allowed here; write $${ or %%{ for a literal ${ or %{"
	}
	msg := strings.TrimSuffix(dg.Summary, ".")
	if dg.Detail != "" {
		msg += ": " + strings.TrimSuffix(strings.ReplaceAll(dg.Detail, "\n", " "), ".")
	}
	return lowerFirst(msg)
}

func lowerFirst(s string) string {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return s
	}
	if len(s) > 1 && s[1] >= 'A' && s[1] <= 'Z' { // an acronym: keep it
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// decodeBody decodes body into the struct v points to.
func (d *rulesDecoder) decodeBody(body hcl.Body, v reflect.Value, path []string) {
	t := v.Type()
	fields := rulesFields(t)
	schema := rulesBodySchema(t)
	content, remain, diags := body.PartialContent(schema)
	d.diags(path, diags)
	d.unknown(body, remain, schema, path)

	for _, f := range fields {
		fv := v.Field(f.index)
		switch f.kind {
		case fieldAttr:
			attr, ok := content.Attributes[f.name]
			if !ok {
				continue
			}
			p := rulesSubPath(path, f.name)
			d.f.positions.record(p, attr.NameRange)
			d.decodeExpr(attr.Expr, fv, p)
		case fieldBlock:
			var blocks []*hcl.Block
			for _, b := range content.Blocks {
				if b.Type == f.name {
					blocks = append(blocks, b)
				}
			}
			if len(blocks) == 0 {
				continue
			}
			p := rulesSubPath(path, f.name)
			for _, b := range blocks {
				d.f.positions.record(p, b.DefRange)
			}
			if len(blocks) > 1 {
				d.problem(p, blocks[1].DefRange, "block given %d times; give it once", len(blocks))
			}
			nv := reflect.New(f.typ.Elem())
			d.decodeBody(blocks[0].Body, nv.Elem(), p)
			fv.Set(nv)
		case fieldBlocks:
			for _, b := range content.Blocks {
				if b.Type != f.name {
					continue
				}
				p := rulesSubPath(path, f.name, strconv.Itoa(fv.Len()))
				d.f.positions.record(rulesSubPath(path, f.name), b.DefRange)
				d.f.positions.record(p, b.DefRange)
				nv := reflect.New(f.typ.Elem().Elem())
				d.decodeBody(b.Body, nv.Elem(), p)
				fv.Set(reflect.Append(fv, nv))
			}
		case fieldLabeled:
			for _, b := range content.Blocks {
				if b.Type != f.name || len(b.Labels) != 1 {
					continue
				}
				label := b.Labels[0]
				d.f.positions.record(rulesSubPath(path, f.name), b.DefRange)
				p := rulesSubPath(path, f.name, label)
				d.f.positions.record(p, b.LabelRanges[0])
				if fv.IsNil() {
					fv.Set(reflect.MakeMap(f.typ))
				}
				if fv.MapIndex(reflect.ValueOf(label)).IsValid() {
					d.problem(p, b.LabelRanges[0], "%s %q given twice in this file", f.name, label)
					continue
				}
				nv := reflect.New(f.typ.Elem().Elem())
				d.decodeBody(b.Body, nv.Elem(), p)
				fv.SetMapIndex(reflect.ValueOf(label), nv)
			}
		}
	}
}

// unknown reports the attributes and blocks of body that the schema does
// not name.
func (d *rulesDecoder) unknown(body, remain hcl.Body, schema *hcl.BodySchema, path []string) {
	if sb, ok := body.(*hclsyntax.Body); ok {
		known := map[string]bool{}
		for _, a := range schema.Attributes {
			known[a.Name] = true
		}
		blocks := map[string]bool{}
		for _, b := range schema.Blocks {
			blocks[b.Type] = true
		}
		names := make([]string, 0, len(sb.Attributes))
		for name := range sb.Attributes {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if known[name] {
				continue
			}
			a := sb.Attributes[name]
			p := rulesSubPath(path, name)
			d.f.positions.record(p, a.NameRange)
			if blocks[name] {
				d.problem(p, a.NameRange, "%q is a block: write %s { ... }, not %s = ...", name, name, name)
				continue
			}
			d.problem(p, a.NameRange, "unknown field %q%s", name, rulesDidYouMean(name, schema))
		}
		for _, b := range sb.Blocks {
			if blocks[b.Type] {
				continue
			}
			p := rulesSubPath(path, b.Type)
			d.f.positions.record(p, b.TypeRange)
			if known[b.Type] {
				d.problem(p, b.TypeRange, "%q is an attribute: write %s = value, not a block", b.Type, b.Type)
				continue
			}
			d.problem(p, b.TypeRange, "unknown block %q%s", b.Type, rulesDidYouMean(b.Type, schema))
		}
		return
	}
	// JSON bodies (YAML files) cannot tell attributes from blocks: what is
	// left over is unknown.
	attrs, diags := remain.JustAttributes()
	d.diags(path, diags)
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a := attrs[name]
		p := rulesSubPath(path, name)
		d.f.positions.record(p, a.NameRange)
		d.problem(p, a.NameRange, "unknown field %q%s", name, rulesDidYouMean(name, schema))
	}
}

// rulesDidYouMean suggests the known name closest to a misspelt one.
func rulesDidYouMean(name string, schema *hcl.BodySchema) string {
	var names []string
	for _, a := range schema.Attributes {
		names = append(names, a.Name)
	}
	for _, b := range schema.Blocks {
		names = append(names, b.Type)
	}
	if s := field.Suggest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// decodeExpr decodes an attribute's value (or a part of it) into v, by v's
// Go type. Lists and objects are taken apart with hcl.ExprList and
// hcl.ExprMap, which work for both syntaxes and keep each part's range.
func (d *rulesDecoder) decodeExpr(expr hcl.Expression, v reflect.Value, path []string) {
	t := v.Type()
	switch {
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		items, diags := hcl.ExprMap(expr)
		if diags.HasErrors() {
			d.bad(path, expr, "want an object")
			return
		}
		nv := reflect.New(t.Elem())
		d.decodeObject(items, nv.Elem(), path)
		v.Set(nv)
		return
	case t.Kind() == reflect.Pointer:
		nv := reflect.New(t.Elem())
		if !d.decodeLeafOrList(expr, nv.Elem(), path) {
			return
		}
		v.Set(nv)
		return
	case t.Kind() == reflect.Map:
		items, diags := hcl.ExprMap(expr)
		if diags.HasErrors() {
			d.bad(path, expr, "want an object (a map of names to values)")
			return
		}
		m := reflect.MakeMapWithSize(t, len(items))
		for _, kv := range items {
			key, ok := d.key(kv.Key, path)
			if !ok {
				continue
			}
			p := rulesSubPath(path, key)
			d.f.positions.record(p, kv.Key.Range())
			if m.MapIndex(reflect.ValueOf(key)).IsValid() {
				d.problem(p, kv.Key.Range(), "key %q given twice", key)
				continue
			}
			ev := reflect.New(t.Elem()).Elem()
			if t.Elem().Kind() == reflect.Interface {
				val, ok := d.value(kv.Value, p)
				if !ok {
					continue
				}
				ev.Set(reflect.ValueOf(&val).Elem())
			} else {
				d.decodeExpr(kv.Value, ev, p)
			}
			m.SetMapIndex(reflect.ValueOf(key), ev)
		}
		v.Set(m)
		return
	case t.Kind() == reflect.Interface:
		val, ok := d.value(expr, path)
		if ok && val != nil {
			v.Set(reflect.ValueOf(val))
		}
		return
	}
	d.decodeLeafOrList(expr, v, path)
}

// decodeObject decodes an object value ({ plugin = "email", ... }) into a
// struct whose fields are all attributes; unknown keys are errors.
func (d *rulesDecoder) decodeObject(items []hcl.KeyValuePair, v reflect.Value, path []string) {
	fields := rulesFields(v.Type())
	byName := map[string]rulesField{}
	schema := &hcl.BodySchema{}
	for _, f := range fields {
		byName[f.name] = f
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: f.name})
	}
	seen := map[string]bool{}
	for _, kv := range items {
		key, ok := d.key(kv.Key, path)
		if !ok {
			continue
		}
		p := rulesSubPath(path, key)
		d.f.positions.record(p, kv.Key.Range())
		f, known := byName[key]
		if !known {
			d.problem(p, kv.Key.Range(), "unknown field %q%s", key, rulesDidYouMean(key, schema))
			continue
		}
		if seen[key] {
			d.problem(p, kv.Key.Range(), "key %q given twice", key)
			continue
		}
		seen[key] = true
		d.decodeExpr(kv.Value, v.Field(f.index), p)
	}
}

// key returns an object key as a string.
func (d *rulesDecoder) key(expr hcl.Expression, path []string) (string, bool) {
	if kw := hcl.ExprAsKeyword(expr); kw != "" {
		return kw, true
	}
	val, diags := expr.Value(nil)
	if diags.HasErrors() {
		d.diags(path, diags)
		return "", false
	}
	if !val.IsKnown() || val.IsNull() || val.Type() != cty.String {
		d.problem(path, expr.Range(), "object keys must be strings")
		return "", false
	}
	return val.AsString(), true
}

// decodeLeafOrList decodes a string, bool, number or list of those.
func (d *rulesDecoder) decodeLeafOrList(expr hcl.Expression, v reflect.Value, path []string) bool {
	t := v.Type()
	if t.Kind() == reflect.Slice {
		items, diags := hcl.ExprList(expr)
		if diags.HasErrors() {
			d.bad(path, expr, "want a list")
			return false
		}
		s := reflect.MakeSlice(t, 0, len(items))
		ok := true
		for i, item := range items {
			p := rulesSubPath(path, strconv.Itoa(i))
			d.f.positions.record(p, item.Range())
			ev := reflect.New(t.Elem()).Elem()
			if iv, diags := item.Value(nil); !diags.HasErrors() && iv.IsNull() {
				d.bad(p, item, "want "+rulesKindName(t.Elem())+", got null")
				ok = false
				continue
			}
			if t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() == reflect.Struct {
				d.decodeExpr(item, ev, p)
			} else if !d.decodeLeafOrList(item, ev, p) {
				ok = false
				continue
			}
			s = reflect.Append(s, ev)
		}
		v.Set(s)
		return ok
	}
	val, diags := expr.Value(nil)
	if diags.HasErrors() {
		d.valueDiags(path, expr, diags)
		return false
	}
	if val.IsNull() && !isNullLiteralHCL(expr) {
		// YAML's `key:` (null) leaves the field unset, as if absent.
		return false
	}
	if val.IsNull() {
		d.bad(path, expr, "want "+rulesKindName(t)+", got null")
		return false
	}
	if !val.IsWhollyKnown() {
		d.bad(path, expr, "value is not known")
		return false
	}
	switch t.Kind() {
	case reflect.String:
		if val.Type() != cty.String {
			d.bad(path, expr, "want a string, got "+rulesCtyName(val))
			return false
		}
		v.SetString(val.AsString())
	case reflect.Bool:
		if val.Type() != cty.Bool {
			d.bad(path, expr, "want true or false, got "+rulesCtyName(val))
			return false
		}
		v.SetBool(val.True())
	case reflect.Int:
		if val.Type() != cty.Number {
			d.bad(path, expr, "want a whole number, got "+rulesCtyName(val))
			return false
		}
		bf := val.AsBigFloat()
		i, acc := bf.Int64()
		if !bf.IsInt() || acc != big.Exact || i != int64(int(i)) {
			d.bad(path, expr, "want a whole number, got "+bf.Text('g', 10))
			return false
		}
		v.SetInt(i)
	case reflect.Float64:
		if val.Type() != cty.Number {
			d.bad(path, expr, "want a number, got "+rulesCtyName(val))
			return false
		}
		f, _ := val.AsBigFloat().Float64()
		v.SetFloat(f)
	default:
		panic("config: rules field of unsupported type " + t.String())
	}
	return true
}

// bad reports a value of the wrong shape and marks its path, so that
// validation does not report the consequences.
func (d *rulesDecoder) bad(path []string, expr hcl.Expression, msg string) {
	d.problem(path, expr.Range(), "%s", msg)
	d.f.badPaths = append(d.f.badPaths, path)
}

func rulesKindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.Pointer:
		return "an object"
	}
	return "a value"
}

func rulesCtyName(v cty.Value) string {
	switch {
	case v.Type() == cty.String:
		return fmt.Sprintf("the string %q", rulesTruncate(v.AsString(), 40))
	case v.Type() == cty.Bool:
		return "a bool"
	case v.Type() == cty.Number:
		return "a number"
	case v.Type().IsObjectType() || v.Type().IsMapType():
		return "an object"
	case v.Type().IsTupleType() || v.Type().IsListType() || v.Type().IsSetType():
		return "a list"
	}
	return v.Type().FriendlyName()
}

func rulesTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// value decodes free-form data (a provider's config, an inline JSON
// Schema) into plain Go values: string, bool, int or float64, []any and
// map[string]any. Whole numbers become int, as both syntaxes write them.
func (d *rulesDecoder) value(expr hcl.Expression, path []string) (any, bool) {
	val, diags := expr.Value(nil)
	if diags.HasErrors() {
		d.valueDiags(path, expr, diags)
		return nil, false
	}
	if !val.IsWhollyKnown() {
		d.bad(path, expr, "value is not known")
		return nil, false
	}
	return ctyToGo(val), true
}

func ctyToGo(v cty.Value) any {
	if v.IsNull() {
		return nil
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString()
	case t == cty.Bool:
		return v.True()
	case t == cty.Number:
		bf := v.AsBigFloat()
		if bf.IsInt() {
			if i, acc := bf.Int64(); acc == big.Exact && i == int64(int(i)) {
				return int(i)
			}
		}
		f, _ := bf.Float64()
		return f
	case t.IsObjectType() || t.IsMapType():
		out := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			out[k.AsString()] = ctyToGo(e)
		}
		return out
	case t.IsTupleType() || t.IsListType() || t.IsSetType():
		out := []any{}
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			out = append(out, ctyToGo(e))
		}
		return out
	}
	return nil
}

// isNullLiteralHCL reports whether expr is HCL's null written out, which
// is refused like any value of the wrong type (YAML's empty value is not).
func isNullLiteralHCL(expr hcl.Expression) bool {
	_, ok := expr.(*hclsyntax.LiteralValueExpr)
	return ok
}

// valueDiags reports the diagnostics of evaluating a value; a bare word
// (severity = critical) gets a message of its own.
func (d *rulesDecoder) valueDiags(path []string, expr hcl.Expression, diags hcl.Diagnostics) {
	d.f.badPaths = append(d.f.badPaths, path)
	if st, ok := expr.(*hclsyntax.ScopeTraversalExpr); ok {
		name := st.Traversal.RootName()
		d.problem(path, expr.Range(), "%s is not a value: write strings in quotes (%q); the bare words are true, false and null", name, name)
		return
	}
	d.diags(path, diags)
}
