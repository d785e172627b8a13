package directory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
)

// Patterns the schema gives for the dir checks the decoder makes.
const (
	patternNoControl = `^[^\x00-\x1f\x7f]*$`
	patternE164      = `^\+[1-9][0-9]{1,14}$`
	patternClock     = `^([01][0-9]|2[0-3]):[0-5][0-9]$`
)

// Schema returns the JSON Schema (draft 2020-12) of the directory format,
// derived from the same Go definitions and struct tags the parser decodes
// with. With jsonl it describes one JSONL line instead of a whole file.
// Checks a schema cannot say (IANA zone names, duplicate ids, references
// to declared groups and users, an empty quiet-hours window) are in the
// descriptions; `herald directory import` and `rules explain` make them.
func Schema(jsonl bool) ([]byte, error) {
	defs := map[string]any{}
	for _, s := range sections {
		defs[s.one] = structSchema(s.typ, defs)
	}
	root := map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"$defs":   defs,
	}
	if jsonl {
		root["title"] = "Herald directory, one JSONL line"
		root["description"] = "One entry of a directory file in JSONL form: an object with exactly one key naming the kind of entry."
		var one []any
		for _, s := range sections {
			one = append(one, map[string]any{
				"type":                 "object",
				"properties":           map[string]any{s.one: map[string]any{"$ref": "#/$defs/" + s.one}},
				"required":             []string{s.one},
				"additionalProperties": false,
			})
		}
		root["oneOf"] = one
	} else {
		props := map[string]any{}
		fs := fieldsOf(reflect.TypeFor[Directory]())
		for _, f := range fs {
			for _, s := range sections {
				if s.name == f.name {
					props[f.name] = map[string]any{
						"description": f.doc,
						"type":        []string{"array", "null"},
						"items":       map[string]any{"$ref": "#/$defs/" + s.one},
					}
				}
			}
		}
		root["title"] = "Herald directory"
		root["description"] = "Recipients, groups, memberships, preferences and group settings, as `herald directory import` and `herald rules explain --directory` read them (JSON or YAML)."
		root["type"] = "object"
		root["properties"] = props
		root["additionalProperties"] = false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func structSchema(t reflect.Type, defs map[string]any) map[string]any {
	props := map[string]any{}
	var required []string
	for _, f := range fieldsOf(t) {
		props[f.name] = fieldSchema(t.Field(f.index).Type, f, defs)
		if f.required {
			required = append(required, f.name)
		}
	}
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func fieldSchema(t reflect.Type, f field, defs map[string]any) map[string]any {
	s := map[string]any{}
	if f.doc != "" {
		s["description"] = f.doc
	}
	switch t.Kind() {
	case reflect.String:
		s["type"] = "string"
		if f.required {
			s["minLength"] = 1
		}
		switch {
		case f.checks["id"]:
			s["maxLength"] = maxIDBytes
			s["pattern"] = patternNoControl
		case f.checks["name"]:
			s["maxLength"] = maxNameBytes
			s["pattern"] = patternNoControl
		case f.checks["nonempty"]:
			s["minLength"] = 1
			s["maxLength"] = maxValueBytes
			s["pattern"] = patternNoControl
		case f.checks["email"]:
			s["maxLength"] = 254
			s["anyOf"] = []any{map[string]any{"const": ""}, map[string]any{"format": "email"}}
		case f.checks["e164"]:
			s["pattern"] = fmt.Sprintf("^(|%s)$", patternE164[1:len(patternE164)-1])
		case f.checks["clock"]:
			s["pattern"] = patternClock
		case f.checks["zone"]:
			s["pattern"] = patternNoControl
		default:
			s["maxLength"] = maxValueBytes
		}
		if f.ref != "" {
			s["description"] = fmt.Sprintf("%s (must be declared in %s)", f.doc, f.ref)
		}
	case reflect.Bool:
		s["type"] = "boolean"
		if f.def == "true" {
			s["default"] = true
		}
	case reflect.Int:
		s["type"] = "integer"
		s["minimum"] = 0
		s["maximum"] = math.MaxInt32
	case reflect.Pointer:
		name := f.name
		if _, ok := defs[name]; !ok {
			defs[name] = structSchema(t.Elem(), defs)
		}
		s["oneOf"] = []any{map[string]any{"$ref": "#/$defs/" + name}, map[string]any{"type": "null"}}
	case reflect.Struct:
		name := f.name
		if _, ok := defs[name]; !ok {
			defs[name] = structSchema(t, defs)
		}
		s["$ref"] = "#/$defs/" + name
	case reflect.Slice:
		s["type"] = "array"
		item := fieldSchema(t.Elem(), f, defs)
		delete(item, "description")
		s["items"] = item
	case reflect.Map:
		s["type"] = "object"
		s["propertyNames"] = map[string]any{"minLength": 1, "maxLength": maxNameBytes, "pattern": patternNoControl}
		s["additionalProperties"] = map[string]any{"type": "string", "maxLength": maxValueBytes}
		if f.checks["destinations"] {
			s["propertyNames"] = map[string]any{"minLength": 1, "maxLength": maxNameBytes, "pattern": "^[A-Za-z0-9_-]+$"}
			s["additionalProperties"] = map[string]any{"type": "string", "minLength": 1, "maxLength": MaxDestinationBytes, "pattern": patternNoControl}
		}
	}
	return s
}
