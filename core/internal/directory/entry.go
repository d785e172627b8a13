package directory

import (
	"errors"
	"fmt"
	"reflect"
)

// Entry is a type DecodeEntry decodes: one entry of a directory file, a
// device, or a user's preferences document.
type Entry interface {
	*Recipient | *Group | *Member | *Preference | *GroupSetting | *Device | *UserPreferences
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
	if up, ok := any(v).(*UserPreferences); ok && len(d.probs) == 0 {
		seen := map[[2]string]int{}
		for i, c := range up.Channels {
			k := [2]string{c.EventType, c.Channel}
			if first, dup := seen[k]; dup {
				d.fail(n.line, fmt.Sprintf("channels[%d]", i), "duplicate: the same event type and channel as channels[%d]", first)
				continue
			}
			seen[k] = i
		}
	}
	var probs Problems
	for _, fp := range d.probs {
		probs = append(probs, Problem{File: name, Line: fp.line, Field: fp.field, Msg: fp.msg})
	}
	return probs
}
