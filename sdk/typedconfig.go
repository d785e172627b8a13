package sdk

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Struct tags read by ConfigFields and DecodeConfig. A plugin's config is a
// struct whose exported fields each carry a `config` tag:
//
//	type Config struct {
//		// URL is where deliveries are posted.
//		URL string `config:"url,required" help:"Receiver URL (http or https)."`
//		// Secret signs each body.
//		Secret string `config:"secret,secret" help:"HMAC-SHA256 key."`
//		// Timeout bounds one request.
//		Timeout time.Duration `config:"timeout" default:"10s" help:"Timeout of one request."`
//		// Mode is how bodies are encoded.
//		Mode string `config:"mode" default:"json" enum:"json,form"`
//	}
//
// The `config` tag is the field's name followed by the options "required"
// and "secret"; `config:"-"` skips a field. `default` is the value used when
// the key is absent, in the field's syntax ("587", "true", "10s", "a,b");
// `enum` lists the allowed values separated by commas; `help` is the
// description operators see. Field types are string, int, bool,
// time.Duration, []string and map[string]string (no default). Unexported fields are ignored, so a config
// struct can keep values its Validate method derives.
const (
	TagName     = "config"
	TagDefault  = "default"
	TagEnum     = "enum"
	TagHelp     = "help"
	optRequired = "required"
	optSecret   = "secret"
)

var fieldTypes = map[reflect.Type]FieldType{
	reflect.TypeFor[string]():            FieldString,
	reflect.TypeFor[int]():               FieldInt,
	reflect.TypeFor[bool]():              FieldBool,
	reflect.TypeFor[time.Duration]():     FieldDuration,
	reflect.TypeFor[[]string]():          FieldList,
	reflect.TypeFor[map[string]string](): FieldMap,
}

type structFields struct {
	specs []FieldSpec
	// index is the struct field index of each spec, in order.
	index []int
	err   error
}

var fieldCache sync.Map // reflect.Type → *structFields

// ConfigFields derives the field specs a plugin declares in
// Description.Config from a config struct (or a pointer to one), reading
// the tags described above. It fails on a field of an unsupported type, an
// exported field without a `config` tag, a name used twice, a required
// field with a default, or a default that does not pass its own spec.
func ConfigFields(v any) ([]FieldSpec, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("sdk: ConfigFields wants a struct, got %T", v)
	}
	sf := fieldsOf(t)
	if sf.err != nil {
		return nil, sf.err
	}
	out := make([]FieldSpec, len(sf.specs))
	for i, s := range sf.specs {
		s.Enum = append([]string(nil), s.Enum...)
		out[i] = s
	}
	return out, nil
}

// MustConfigFields is ConfigFields for a config struct known to be right;
// it panics on an error, which is a bug in the plugin (the SDK turns a
// panic in Describe into an error the host reports).
func MustConfigFields(v any) []FieldSpec {
	specs, err := ConfigFields(v)
	if err != nil {
		panic(err)
	}
	return specs
}

func fieldsOf(t reflect.Type) *structFields {
	if c, ok := fieldCache.Load(t); ok {
		return c.(*structFields)
	}
	sf := &structFields{}
	sf.err = sf.build(t)
	c, _ := fieldCache.LoadOrStore(t, sf)
	return c.(*structFields)
}

func (sf *structFields) build(t reflect.Type) error {
	seen := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup(TagName)
		if !ok {
			return fmt.Errorf("sdk: config struct %s: field %s has no %q tag (use `config:\"-\"` to skip it)", t, f.Name, TagName)
		}
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			return fmt.Errorf("sdk: config struct %s: field %s: empty name in its %q tag", t, f.Name, TagName)
		}
		if seen[name] {
			return fmt.Errorf("sdk: config struct %s: name %q used twice", t, name)
		}
		seen[name] = true
		typ, ok := fieldTypes[f.Type]
		if !ok {
			return fmt.Errorf("sdk: config struct %s: field %s has type %s; use string, int, bool, time.Duration, []string or map[string]string", t, f.Name, f.Type)
		}
		spec := FieldSpec{Name: name, Type: typ, Default: f.Tag.Get(TagDefault), Description: f.Tag.Get(TagHelp)}
		if opts != "" {
			for _, o := range strings.Split(opts, ",") {
				switch strings.TrimSpace(o) {
				case optRequired:
					spec.Required = true
				case optSecret:
					spec.Secret = true
				default:
					return fmt.Errorf("sdk: config struct %s: field %s: unknown option %q (want required, secret)", t, f.Name, o)
				}
			}
		}
		if e := f.Tag.Get(TagEnum); e != "" {
			spec.Enum = splitList(e)
		}
		if spec.Type == FieldMap && spec.Default != "" {
			return fmt.Errorf("sdk: config struct %s: field %s: a map field takes no default", t, f.Name)
		}
		if spec.Required && spec.Default != "" {
			return fmt.Errorf("sdk: config struct %s: field %s is required and has a default", t, f.Name)
		}
		if spec.Default != "" {
			if _, err := CheckConfig([]FieldSpec{spec}, nil); err != nil {
				return fmt.Errorf("sdk: config struct %s: field %s: %w", t, f.Name, err)
			}
		}
		sf.specs = append(sf.specs, spec)
		sf.index = append(sf.index, i)
	}
	return nil
}

// Validator is implemented by config structs that check the meaning of
// their values; DecodeConfig calls Validate after decoding. Its errors
// should be *ConfigError naming the field.
type Validator interface {
	Validate() error
}

// DecodeConfig decodes an operator's config into out, a pointer to a
// config struct tagged as ConfigFields describes. It checks raw with
// CheckConfig against the struct's field specs (unknown keys, types,
// required fields, enums, defaults), stores every present or defaulted
// value in its field, leaves the fields of absent keys without a default as
// they were, and then calls out's Validate method when it has one. Every
// failure of the operator's config is a *ConfigError naming the field.
func DecodeConfig(raw map[string]any, out any) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("sdk: DecodeConfig wants a non-nil pointer to a struct, got %T", out)
	}
	sf := fieldsOf(rv.Elem().Type())
	if sf.err != nil {
		return sf.err
	}
	checked, err := CheckConfig(sf.specs, raw)
	if err != nil {
		return err
	}
	st := rv.Elem()
	for i, spec := range sf.specs {
		v, ok := checked[spec.Name]
		if !ok {
			continue
		}
		fv := st.Field(sf.index[i])
		val := reflect.ValueOf(v)
		if !val.Type().AssignableTo(fv.Type()) {
			// CheckConfig types every value by its spec, and the spec comes
			// from the field's type.
			return &ConfigError{Field: spec.Name, Msg: fmt.Sprintf("cannot store %T in %s (sdk bug)", v, fv.Type())}
		}
		fv.Set(val)
	}
	if v, ok := out.(Validator); ok {
		if err := v.Validate(); err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				return &ConfigError{Msg: err.Error()}
			}
			return err
		}
	}
	return nil
}
