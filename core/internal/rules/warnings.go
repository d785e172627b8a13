package rules

import (
	"fmt"
	htmltemplate "html/template"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Warnings lists what in the rules is allowed but probably wrong: a
// template that reads a payload field (.payload.x.y) its event's
// payload_schema does not declare in "properties" would fail to render
// (templates run with missingkey=error) whenever the field is absent, and
// the schema lets it be absent. A schema level without "properties"
// declares nothing and is not checked. Each warning's Path names the
// template field.
func (rs *RuleSet) Warnings() SpecErrors {
	var out SpecErrors
	for _, typ := range sortedKeys(rs.events) {
		ce := rs.events[typ]
		if ce.schema == nil {
			continue
		}
		base := []string{KeyEvent, typ}
		check := func(path []string, root parse.Node) {
			seen := map[string]bool{}
			walkFields(root, func(ident []string) {
				if len(ident) < 2 || ident[0] != "payload" {
					return
				}
				field, ok := undeclared(ce.schema, ident[1:])
				if !ok || seen[field] {
					return
				}
				seen[field] = true
				out = append(out, &SpecError{Path: path, Msg: fmt.Sprintf(
					"reads .payload.%s, which payload_schema does not declare (it fails to render when the field is absent; "+
						"declare it, or read it with index)", field)})
			})
		}
		for i, a := range ce.audiences {
			p := extend(base, KeyAudience, strconv.Itoa(i))
			check(extend(p, KeyGroup), rootOf(a.group))
			check(extend(p, KeyUser), rootOf(a.user))
		}
		texts := func(path []string, ct *compiledTemplate) {
			if ct == nil {
				return
			}
			checkText(path, ct.base, check)
			for _, l := range sortedKeys(ct.locales) {
				checkText(extend(path, KeyLocale, l), ct.locales[l], check)
			}
		}
		for _, ch := range sortedKeys(ce.templates) {
			texts(extend(base, KeyTemplate, ch), ce.templates[ch])
		}
		texts(extend(base, KeyInbox), ce.inbox)
	}
	return out
}

func checkText(path []string, ct compiledText, check func([]string, parse.Node)) {
	check(extend(path, KeySubject), rootOf(ct.subject))
	check(extend(path, KeyTitle), rootOf(ct.title))
	check(extend(path, KeyBody), rootOf(ct.body))
	if ct.html != nil {
		check(extend(path, KeyHTML), htmlRootOf(ct.html))
	}
	for _, k := range sortedKeys(ct.data) {
		check(extend(path, KeyData, k), rootOf(ct.data[k]))
	}
}

func rootOf(t *template.Template) parse.Node {
	if t == nil || t.Tree == nil {
		return nil
	}
	return t.Tree.Root
}

func htmlRootOf(t *htmltemplate.Template) parse.Node {
	if t == nil || t.Tree == nil {
		return nil
	}
	return t.Tree.Root
}

// walkFields calls fn with the identifiers of every field node (.a.b) in n.
func walkFields(n parse.Node, fn func(ident []string)) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walkFields(c, fn)
		}
	case *parse.ActionNode:
		walkFields(n.Pipe, fn)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walkFields(c, fn)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walkFields(a, fn)
		}
	case *parse.IfNode:
		walkBranch(&n.BranchNode, fn)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, fn)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, fn)
	case *parse.TemplateNode:
		walkFields(n.Pipe, fn)
	case *parse.ChainNode:
		walkFields(n.Node, fn)
	case *parse.FieldNode:
		fn(n.Ident)
	}
}

func walkBranch(b *parse.BranchNode, fn func([]string)) {
	walkFields(b.Pipe, fn)
	walkFields(b.List, fn)
	walkFields(b.ElseList, fn)
}

// undeclared returns the first prefix of path (dot separated) that s does
// not declare in properties, and whether there is one.
func undeclared(s *jsonschema.Schema, path []string) (string, bool) {
	cur := s
	for i, key := range path {
		props := map[string]*jsonschema.Schema{}
		if !collectProperties(cur, props, 0) {
			return "", false
		}
		next, ok := props[key]
		if !ok {
			return strings.Join(path[:i+1], "."), true
		}
		cur = next
	}
	return "", false
}

// collectProperties gathers the properties s declares, itself, through
// $ref and through allOf, and reports whether it declares any.
func collectProperties(s *jsonschema.Schema, into map[string]*jsonschema.Schema, depth int) bool {
	if s == nil || depth > 16 {
		return false
	}
	declares := false
	if s.Properties != nil {
		declares = true
		for k, v := range s.Properties {
			if _, dup := into[k]; !dup {
				into[k] = v
			}
		}
	}
	for _, sub := range slices.Concat([]*jsonschema.Schema{s.Ref}, s.AllOf) {
		if collectProperties(sub, into, depth+1) {
			declares = true
		}
	}
	return declares
}
