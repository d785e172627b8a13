package directory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Entry is a type DecodeEntry decodes: one entry of a directory file, a
// device, or a user's preferences document.
type Entry interface {
	*Recipient | *Group | *Member | *Preference | *GroupSetting | *Device | *UserPreferences | *GroupSettings
}

// DecodeEntry decodes one JSON value b into v with the checks Parse
// applies to an entry of a directory file (the same decoder): unknown
// fields, wrong types, missing required fields, values that fail their
// checks, invalid UTF-8, nesting deeper than lim.MaxDepth. It returns
// every problem, each naming its field path (devices[0].p256dh); on any
// problem v is left unspecified. name is the Problem's File (such as
// "body").
func DecodeEntry[T Entry](b []byte, v T, name string, lim Limits) Problems {
	lim.setDefaults()
	n, err := parseJSON(b, 1, lim)
	if err != nil {
		var se *syntaxError
		var le *LimitError
		switch {
		case errors.As(err, &se):
			return Problems{{File: name, Line: se.line, Msg: se.msg}}
		case errors.As(err, &le):
			return Problems{{File: name, Line: le.Line, Msg: le.Error()}}
		}
		return Problems{{File: name, Msg: err.Error()}}
	}
	rv := reflect.ValueOf(v).Elem()
	rv.Set(reflect.Zero(rv.Type()))
	var d decoder
	d.decodeStruct(n, rv, "")
	// A document's switches: each (event type, channel) once.
	var keys [][2]string
	switch doc := any(v).(type) {
	case *UserPreferences:
		for _, c := range doc.Channels {
			keys = append(keys, [2]string{c.EventType, c.Channel})
		}
	case *GroupSettings:
		for _, c := range doc.Channels {
			keys = append(keys, [2]string{c.EventType, c.Channel})
		}
	}
	seen := map[[2]string]int{}
	clean := len(d.probs) == 0 // decoded values to compare
	for i, k := range keys {
		if first, dup := seen[k]; dup && clean {
			d.fail(n.line, fmt.Sprintf("channels[%d]", i), "duplicate: the same event type and channel as channels[%d]", first)
			continue
		}
		seen[k] = i
	}
	var probs Problems
	for _, fp := range d.probs {
		probs = append(probs, Problem{File: name, Line: fp.line, Field: fp.field, Msg: fp.msg})
	}
	return probs
}

// MergePatch applies the JSON merge patch (RFC 7396) patch to the JSON
// object doc and returns the result, which the caller then decodes with
// DecodeEntry: the patch is read with the limits and UTF-8 checks of
// DecodeEntry, must be an object, and a null in it removes the field. A
// patch that cannot be read is a Problems of one.
func MergePatch(doc, patch []byte, name string, lim Limits) ([]byte, Problems) {
	lim.setDefaults()
	n, err := parseJSON(patch, 1, lim)
	if err == nil && n.kind != kObject {
		err = &syntaxError{line: n.line, msg: fmt.Sprintf("got %s, want an object (a JSON merge patch)", n.describe())}
	}
	if err != nil {
		var se *syntaxError
		var le *LimitError
		switch {
		case errors.As(err, &se):
			return nil, Problems{{File: name, Line: se.line, Msg: se.msg}}
		case errors.As(err, &le):
			return nil, Problems{{File: name, Line: le.Line, Msg: le.Error()}}
		}
		return nil, Problems{{File: name, Msg: err.Error()}}
	}
	var target, p any
	if err := unmarshalNumbers(doc, &target); err != nil {
		return nil, Problems{{File: name, Msg: "the stored entry: " + err.Error()}}
	}
	if err := unmarshalNumbers(patch, &p); err != nil {
		return nil, Problems{{File: name, Msg: err.Error()}}
	}
	out, err := json.Marshal(mergePatch(target, p))
	if err != nil {
		return nil, Problems{{File: name, Msg: err.Error()}}
	}
	return out, nil
}

// unmarshalNumbers decodes JSON keeping numbers as written.
func unmarshalNumbers(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// mergePatch is RFC 7396's MergePatch(Target, Patch).
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

// CheckID checks a user id or group key that does not come in a JSON
// document (a URL's path), as the "id" fields of entries are checked:
// valid UTF-8, 1 to 200 bytes, no control characters (NUL among them) or
// surrounding spaces. It says what is wrong, or "".
func CheckID(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case len(s) > maxIDBytes || hasControl(s) || strings.TrimSpace(s) != s:
		return fmt.Sprintf("%q: want at most %d bytes without control characters or surrounding spaces", clip(strings.ToValidUTF8(s, "?")), maxIDBytes)
	}
	return ""
}
