package sdk

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CheckConfig checks an operator's config against a plugin's field specs and
// returns it with defaults applied and every value converted to its Go type:
// string, int, bool, time.Duration, []string or map[string]string. It refuses unknown keys,
// values of the wrong type, missing required fields and values outside an
// enum, with a *ConfigError naming the field; the error never repeats the
// value of a Secret field. Absent optional fields without a default are
// left out of the result.
//
// Values are accepted in the shapes config loaders produce: integers of any
// Go type, float64 holding a whole number and json.Number for int fields;
// strings for int, bool and duration fields ("587", "true", "5s"); []any of
// strings for list fields; map[string]any of strings for map fields. CheckConfig runs on the host before Configure and
// again inside the plugin, so a plugin's Configure always sees checked,
// typed values.
func CheckConfig(specs []FieldSpec, cfg map[string]any) (map[string]any, error) {
	byName := make(map[string]FieldSpec, len(specs))
	for _, s := range specs {
		byName[s.Name] = s
	}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := byName[k]; !ok {
			known := make([]string, 0, len(specs))
			for _, s := range specs {
				known = append(known, s.Name)
			}
			msg := "unknown field"
			if len(known) > 0 {
				msg += " (known: " + strings.Join(known, ", ") + ")"
			} else {
				msg += " (the plugin takes no config)"
			}
			return nil, &ConfigError{Field: k, Msg: msg}
		}
	}
	out := make(map[string]any, len(specs))
	for _, s := range specs {
		raw, present := cfg[s.Name]
		if present && raw == nil {
			present = false
		}
		if !present {
			if s.Default == "" {
				if s.Required {
					return nil, &ConfigError{Field: s.Name, Msg: "required"}
				}
				continue
			}
			raw = s.Default
			if s.Type == FieldList {
				raw = splitList(s.Default)
			}
		}
		v, err := convertField(s, raw)
		if err != nil {
			switch {
			case !present:
				err = fmt.Errorf("bad default %q (plugin bug): %w", s.Default, err)
			case s.Secret:
				err = secretFieldError(s)
			}
			return nil, &ConfigError{Field: s.Name, Msg: err.Error()}
		}
		out[s.Name] = v
	}
	return out, nil
}

// secretFieldError says what a secret field wants without repeating the
// value it was given.
func secretFieldError(s FieldSpec) error {
	want := map[FieldType]string{FieldString: "a string", FieldInt: "an int", FieldBool: "a bool",
		FieldDuration: "a duration", FieldList: "a list of strings", FieldMap: "a map of strings"}[s.Type]
	if want == "" {
		want = "a " + string(s.Type)
	}
	if s.Required && s.Type == FieldString {
		want = "a non-empty string"
	}
	if len(s.Enum) > 0 {
		want += " (one of " + strings.Join(s.Enum, ", ") + ")"
	}
	return fmt.Errorf("must be %s; the value is secret and not shown", want)
}

func convertField(s FieldSpec, raw any) (any, error) {
	var v any
	var err error
	switch s.Type {
	case FieldString:
		str, ok := raw.(string)
		if !ok {
			return nil, fmt.Errorf("must be a string, got %s", typeName(raw))
		}
		if s.Required && str == "" {
			return nil, fmt.Errorf("required, must not be empty")
		}
		v = str
	case FieldInt:
		v, err = toInt(raw)
	case FieldBool:
		v, err = toBool(raw)
	case FieldDuration:
		v, err = toDuration(raw)
	case FieldList:
		v, err = toList(raw)
	case FieldMap:
		v, err = toMap(raw)
	default:
		return nil, fmt.Errorf("unknown field type %q (plugin bug)", s.Type)
	}
	if err != nil {
		return nil, err
	}
	if len(s.Enum) > 0 {
		vals := []string{fmt.Sprint(v)}
		if l, ok := v.([]string); ok {
			vals = l
		}
		for _, x := range vals {
			if !slices.Contains(s.Enum, x) {
				return nil, fmt.Errorf("%q is not one of %s", x, strings.Join(s.Enum, ", "))
			}
		}
	}
	return v, nil
}

func toInt(raw any) (int, error) {
	switch x := raw.(type) {
	case string:
		i, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			return 0, fmt.Errorf("must be an int, got %q", x)
		}
		return i, nil
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, fmt.Errorf("must be an int, got %v", x)
		}
		return int(x), nil
	case float32:
		return toInt(float64(x))
	case json.Number:
		i, err := x.Int64()
		if err != nil {
			return 0, fmt.Errorf("must be an int, got %s", x)
		}
		return int(i), nil
	}
	rv := reflect.ValueOf(raw)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rv.Uint() > math.MaxInt64 {
			return 0, fmt.Errorf("int out of range")
		}
		return int(rv.Uint()), nil
	}
	return 0, fmt.Errorf("must be an int, got %s", typeName(raw))
}

func toBool(raw any) (bool, error) {
	switch x := raw.(type) {
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		if err != nil {
			return false, fmt.Errorf("must be a bool, got %q", x)
		}
		return b, nil
	}
	return false, fmt.Errorf("must be a bool, got %s", typeName(raw))
}

func toDuration(raw any) (time.Duration, error) {
	switch x := raw.(type) {
	case time.Duration:
		return x, nil
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return 0, fmt.Errorf("must be a duration such as \"5s\", got %q", x)
		}
		return d, nil
	}
	return 0, fmt.Errorf("must be a duration such as \"5s\", got %s", typeName(raw))
}

func toList(raw any) ([]string, error) {
	switch x := raw.(type) {
	case []string:
		return append([]string{}, x...), nil
	case []any:
		out := make([]string, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("item %d must be a string, got %s", i, typeName(e))
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a list of strings, got %s", typeName(raw))
}

func toMap(raw any) (map[string]string, error) {
	switch x := raw.(type) {
	case map[string]string:
		return maps.Clone(x), nil
	case map[string]any:
		out := make(map[string]string, len(x))
		for k, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("entry %q must be a string, got %s", k, typeName(e))
			}
			out[k] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a map of strings, got %s", typeName(raw))
}

func splitList(s string) []string {
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case float32, float64:
		return "number"
	case []any, []string:
		return "list"
	case map[string]any, map[string]string:
		return "map"
	case time.Duration:
		return "duration"
	case nil:
		return "nothing"
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	}
	return fmt.Sprintf("%T", v)
}
