package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/config/field"
)

// Setting is one key of the daemon file, derived from the Config structs
// by reflection over their koanf tags: a field with a koanf tag is a
// setting (a struct-typed one a section, a map of structs labelled
// blocks), a field without one is wiring the code sets.
type Setting struct {
	// Key is the key path: "relay.batch_size"; inside labelled blocks the
	// label is "<name>": "amqp.queue.<name>.bindings".
	Key string
	// Env is the environment variable that overrides it
	// ("HERALD_RELAY_BATCH_SIZE"); empty for sections, labelled blocks and
	// the keys inside labelled blocks, which only the file sets.
	Env string
	// Type is the field's Go type.
	Type reflect.Type
	// Default is the value DefaultDaemon gives it (invalid for sections,
	// labelled blocks and the keys inside labelled blocks).
	Default reflect.Value
	// Section marks a section (`http { ... }`), Blocks labelled blocks
	// (`queue "name" { ... }`).
	Section, Blocks bool
	// Owner is the struct type declaring the field and Field its Go name,
	// where the field's doc comment is.
	Owner reflect.Type
	Field string
	// index is the field's index path from Daemon (nil inside labelled
	// blocks).
	index []int
}

// daemonEnvPrefix prefixes every environment override.
const daemonEnvPrefix = "HERALD_"

// envName is the environment variable of key: HERALD_ and the key path
// upper-cased with dots as underscores.
func envName(key string) string {
	return daemonEnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

var durationType = reflect.TypeOf(time.Duration(0))

// Settings lists every key of the daemon file, in the order of the
// structs' fields.
func Settings() []Setting {
	var out []Setting
	walkSettings(reflect.TypeOf(Daemon{}), reflect.ValueOf(DefaultDaemon()), "", false, nil, &out)
	return out
}

// walkSettings appends the settings of struct type t (its default value
// v, invalid inside labelled blocks) under prefix.
func walkSettings(t reflect.Type, v reflect.Value, prefix string, inBlock bool, index []int, out *[]Setting) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := koanfTag(f)
		if tag == "" {
			continue
		}
		s := Setting{Key: joinKey(prefix, tag), Type: f.Type, Owner: t, Field: f.Name}
		var fv reflect.Value
		if !inBlock {
			s.index = append(append([]int(nil), index...), i)
			fv = v.Field(i)
		}
		switch {
		case isSection(f.Type):
			s.Section = true
			*out = append(*out, s)
			walkSettings(f.Type, fv, s.Key, inBlock, s.index, out)
		case isBlocks(f.Type):
			s.Blocks = true
			*out = append(*out, s)
			walkSettings(f.Type.Elem(), reflect.Value{}, s.Key+".<name>", true, nil, out)
		default:
			if !inBlock {
				s.Env = envName(s.Key)
				s.Default = fv
			}
			*out = append(*out, s)
		}
	}
}

// koanfTag is f's key, "" when f is not a setting.
func koanfTag(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
	if tag == "-" {
		return ""
	}
	return tag
}

func isSection(t reflect.Type) bool { return t.Kind() == reflect.Struct }

func isBlocks(t reflect.Type) bool {
	return t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Struct
}

// settingFields maps the keys of struct type t to its fields.
func settingFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if tag := koanfTag(f); tag != "" {
			out[tag] = f
		}
	}
	return out
}

// defaultsMap is the flat key → value map of the defaults koanf starts
// from: every setting outside labelled blocks.
func defaultsMap(settings []Setting) map[string]any {
	out := map[string]any{}
	for _, s := range settings {
		if !s.Default.IsValid() || (s.Default.Kind() == reflect.Slice && s.Default.IsNil()) {
			continue // no default (rules): the key stays unset
		}
		out[s.Key] = plainValue(s.Default)
	}
	return out
}

// plainValue is v as koanf holds it: durations as their text, slices as
// fresh []any.
func plainValue(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Slice:
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = plainValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

// typeName says what a value of t is, for errors and the reference.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case isSection(t):
		return "block"
	case isBlocks(t):
		return "labelled blocks"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	}
	return t.String()
}

// wantOf says what a key of type t takes, for errors.
func wantOf(t reflect.Type) string {
	switch typeName(t) {
	case "duration":
		return `a duration with a unit, such as "30s"`
	case "bool":
		return "true or false"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	case "string":
		return "a string"
	}
	return "a " + typeName(t)
}

// describe shows a parsed value in an error.
func describe(v any) string {
	switch t := v.(type) {
	case string:
		if len(t) > 40 {
			t = t[:40] + "..."
		}
		return fmt.Sprintf("%q", t)
	case map[string]any:
		return "a block"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	}
	return fmt.Sprint(v)
}

// suggest names the key of fields closest to key, for an unknown key.
func suggest(key string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := field.Suggest(key, names); best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	if len(names) <= 12 {
		return fmt.Sprintf(" (known keys: %s)", strings.Join(names, ", "))
	}
	return ""
}
