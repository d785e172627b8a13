package rulesfile

import (
	"encoding/json"
	"reflect"
)

// SchemaID is the $id of the rules format's JSON Schema.
const SchemaID = "https://heraldhq.github.io/schemas/rules.schema.json"

// JSONSchema returns a JSON Schema (draft 2020-12) of a rules file in
// its YAML (or JSON) spelling, generated from the same tagged structs the
// loader decodes through, so the two cannot disagree on which fields exist
// and what shape each takes. Editors use it to check YAML as it is typed
// (`herald rules schema > rules.schema.json`). What the schema cannot say
// (a template that does not parse, a channel no block declares) the loader
// still checks.
func JSONSchema() []byte {
	s := rulesStructSchema(reflect.TypeOf(rulesFileRaw{}))
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["$id"] = SchemaID
	s["title"] = "Herald rules file"
	s["description"] = "Channels, event rules and defaults. The same schema holds for HCL, where a labeled block (channel \"EMAIL\" { ... }) is a mapping keyed by label here, and a repeated block (audience) is a list."
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic("config: rules schema: " + err.Error())
	}
	return append(b, '\n')
}

// rulesStructSchema is the schema of a body (or an object value) of type t.
func rulesStructSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	for _, f := range rulesFields(t) {
		var s map[string]any
		switch f.kind {
		case fieldAttr:
			s = rulesValueSchema(f.typ)
			if len(f.types) > 0 {
				s["type"] = f.types
			}
		case fieldBlock:
			s = rulesStructSchema(f.typ.Elem())
		case fieldBlocks:
			body := rulesStructSchema(f.typ.Elem().Elem())
			s = map[string]any{"anyOf": []any{
				map[string]any{"type": "array", "items": body},
				body,
			}}
		case fieldLabeled:
			s = map[string]any{
				"type":                 "object",
				"additionalProperties": rulesStructSchema(f.typ.Elem().Elem()),
			}
		}
		if f.doc != "" {
			s["description"] = f.doc
		}
		if len(f.enum) > 0 {
			s["enum"] = f.enum
		}
		props[f.name] = s
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
}

// rulesValueSchema is the schema of an attribute's value of Go type t, as
// rulesDecoder.decodeExpr reads it.
func rulesValueSchema(t reflect.Type) map[string]any {
	if t.Kind() == reflect.Pointer {
		if t.Elem().Kind() == reflect.Struct {
			return rulesStructSchema(t.Elem())
		}
		return rulesValueSchema(t.Elem())
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": rulesValueSchema(t.Elem())}
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return map[string]any{"type": "object"}
		}
		return map[string]any{"type": "object", "additionalProperties": rulesValueSchema(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	}
	panic("config: rules schema: unsupported type " + t.String())
}

// rulesRawJSON writes decoded raw structs back in the YAML/JSON shape the
// schema describes (zero values left out). The schema test validates every
// example, HCL ones included, through it.
func rulesRawJSON(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return rulesRawJSON(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		for _, f := range rulesFields(v.Type()) {
			fv := v.Field(f.index)
			if fv.IsZero() {
				continue
			}
			out[f.name] = rulesRawJSON(fv)
		}
		return out
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = rulesRawJSON(v.Index(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = rulesRawJSON(it.Value())
		}
		return out
	}
	return v.Interface()
}
