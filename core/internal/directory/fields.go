package directory

import (
	"reflect"
	"strings"
	"sync"
)

// field is one field of a directory type as the decoder and the schema see
// it, read from the struct tags of the model's types (model.go): json (the
// name), dir (required, and the checks: id, name, email, e164, zone,
// clock, nonempty, ref=SECTION), doc and default.
type field struct {
	name     string
	index    int
	required bool
	checks   map[string]bool
	ref      string
	doc      string
	def      string
}

var fieldCache sync.Map // reflect.Type → []field

func fieldsOf(t reflect.Type) []field {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]field)
	}
	var fs []field
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" || !sf.IsExported() {
			continue
		}
		f := field{name: name, index: i, checks: map[string]bool{}, doc: sf.Tag.Get("doc"), def: sf.Tag.Get("default")}
		for _, c := range strings.Split(sf.Tag.Get("dir"), ",") {
			switch {
			case c == "":
			case c == "required":
				f.required = true
			case strings.HasPrefix(c, "ref="):
				f.ref = strings.TrimPrefix(c, "ref=")
			default:
				f.checks[c] = true
			}
		}
		fs = append(fs, f)
	}
	fieldCache.Store(t, fs)
	return fs
}

func fieldNames(fs []field) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}
