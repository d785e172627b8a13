package directory

import (
	"errors"
	"fmt"
	"math"
	"net/mail"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // zone names check the same on every machine
	"unicode"
	"unicode/utf8"
)

// Bounds of single values.
const (
	maxIDBytes    = 200
	maxNameBytes  = 200
	maxValueBytes = 4096
)

var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

// fieldProblem is a problem inside one entry: the field path and line.
type fieldProblem struct {
	line  int
	field string
	msg   string
}

// decoder decodes nodes into the rules package's directory types,
// strictly: unknown fields, wrong types, missing required fields and
// values that fail their checks are problems, all of them collected.
type decoder struct {
	probs []fieldProblem
}

func (d *decoder) fail(line int, path, format string, args ...any) {
	d.probs = append(d.probs, fieldProblem{line: line, field: path, msg: fmt.Sprintf(format, args...)})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// decodeStruct fills the struct v from the object n.
func (d *decoder) decodeStruct(n *node, v reflect.Value, path string) {
	if n.kind != kObject {
		d.fail(n.line, path, "got %s, want an object", n.describe())
		return
	}
	fs := fieldsOf(v.Type())
	seen := make([]bool, len(fs))
	for i := range fs {
		if fs[i].def == "true" && v.Field(fs[i].index).Kind() == reflect.Bool {
			v.Field(fs[i].index).SetBool(true)
		}
	}
	for i, k := range n.keys {
		fi := -1
		for j := range fs {
			if fs[j].name == k {
				fi = j
				break
			}
		}
		if fi < 0 {
			d.fail(n.klns[i], join(path, k), "unknown field (want one of %s)", fieldNames(fs))
			continue
		}
		seen[fi] = true
		d.decodeValue(n.vals[i], v.Field(fs[fi].index), join(path, k), fs[fi])
	}
	for i, f := range fs {
		if f.required && !seen[i] {
			d.fail(n.line, join(path, f.name), "missing (required)")
		}
	}
	if dv, ok := v.Addr().Interface().(*Device); ok && dv.Kind != "" {
		for _, p := range CheckDevice(*dv) {
			d.fail(n.line, join(path, p.Field), "%s", p.Msg)
		}
	}
	if r, ok := v.Addr().Interface().(*Recipient); ok {
		// One device once: the import keys devices by (user, address).
		seen := map[string]string{}
		note := func(addr, at string) {
			if addr == "" {
				return
			}
			if first, dup := seen[addr]; dup {
				d.fail(n.line, join(path, at), "duplicate device: the same address as %s", first)
				return
			}
			seen[addr] = at
		}
		for i, t := range r.DeviceTokens {
			note(t, fmt.Sprintf("device_tokens[%d]", i))
		}
		for i, dv := range r.Devices {
			if dv.Kind == DeviceFCM || dv.Kind == DeviceAPNs || dv.Kind == DeviceWebPush {
				note(dv.Address(), fmt.Sprintf("devices[%d]", i))
			}
		}
	}
	if qh, ok := v.Addr().Interface().(*QuietHours); ok && qh.Start != "" && qh.End != "" {
		if _, _, err := qh.Minutes(); err != nil {
			// Name the end the error is about in the path.
			var qe *QuietHoursError
			if errors.As(err, &qe) {
				d.fail(n.line, join(path, qe.Field), "%s", qe.Msg)
			} else {
				d.fail(n.line, path, "%s", err.Error())
			}
		}
	}
}

func (d *decoder) decodeValue(n *node, v reflect.Value, path string, f field) {
	switch v.Kind() {
	case reflect.String:
		if n.kind != kString {
			hint := ""
			if n.kind == kNumber {
				hint = fmt.Sprintf(" (quote it: \"%s\")", clip(n.str))
			}
			d.fail(n.line, path, "got %s, want a string%s", n.describe(), hint)
			return
		}
		v.SetString(n.str)
		d.checkString(n, path, f)
	case reflect.Bool:
		if n.kind != kBool {
			d.fail(n.line, path, "got %s, want true or false", n.describe())
			return
		}
		v.SetBool(n.b)
	case reflect.Int:
		if n.kind != kNumber {
			d.fail(n.line, path, "got %s, want a whole number", n.describe())
			return
		}
		i, err := strconv.ParseInt(n.str, 10, 64)
		if err != nil || i < 0 || i > math.MaxInt32 {
			d.fail(n.line, path, "got %s, want a whole number from 0 to %d", clip(n.str), math.MaxInt32)
			return
		}
		v.SetInt(i)
	case reflect.Pointer:
		if n.kind == kNull {
			return
		}
		p := reflect.New(v.Type().Elem())
		d.decodeStruct(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.kind != kArray {
			d.fail(n.line, path, "got %s, want a list", n.describe())
			return
		}
		if len(n.items) == 0 {
			return // an empty list is no list: the directory round-trips
		}
		s := reflect.MakeSlice(v.Type(), len(n.items), len(n.items))
		for i, it := range n.items {
			d.decodeValue(it, s.Index(i), fmt.Sprintf("%s[%d]", path, i), f)
		}
		v.Set(s)
	case reflect.Map:
		if n.kind != kObject {
			d.fail(n.line, path, "got %s, want an object of strings", n.describe())
			return
		}
		if len(n.keys) == 0 {
			return // an empty object is no object: the directory round-trips
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.keys))
		for i, k := range n.keys {
			kp := join(path, k)
			if k == "" || len(k) > maxNameBytes || hasControl(k) {
				d.fail(n.klns[i], kp, "keys must be 1-%d bytes without control characters", maxNameBytes)
				continue
			}
			val := n.vals[i]
			if val.kind != kString {
				d.fail(val.line, kp, "got %s, want a string", val.describe())
				continue
			}
			if len(val.str) > maxValueBytes || strings.ContainsRune(val.str, 0) {
				d.fail(val.line, kp, "at most %d bytes without NUL", maxValueBytes)
				continue
			}
			if f.checks["destinations"] {
				if msg := checkDestination(k, val.str); msg != "" {
					d.fail(val.line, kp, "%s", msg)
					continue
				}
			}
			m.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(val.str))
		}
		v.Set(m)
	default:
		d.fail(n.line, path, "unsupported field type %s", v.Type())
	}
}

// MaxDestinationBytes bounds a place's address (a destination).
const MaxDestinationBytes = 512

// checkDestination checks one destination of a group: a channel name
// (letters, digits, _ and -) and the address its plugin posts to.
func checkDestination(ch, addr string) string {
	for _, r := range ch {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Sprintf("%q is not a channel name: want letters, digits, _ and - such as SLACK", clip(ch))
		}
	}
	if addr == "" || len(addr) > MaxDestinationBytes || hasControl(addr) || strings.TrimSpace(addr) != addr || !utf8.ValidString(addr) {
		return fmt.Sprintf("want the address the channel's plugin posts to (a webhook's name, a channel id): 1-%d bytes of UTF-8 without control characters or surrounding spaces", MaxDestinationBytes)
	}
	return ""
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}

// checkString applies the field's dir checks to a string value.
func (d *decoder) checkString(n *node, path string, f field) {
	s := n.str
	if f.required && s == "" {
		d.fail(n.line, path, "must not be empty")
		return
	}
	switch {
	case f.checks["id"]:
		if len(s) > maxIDBytes || hasControl(s) || strings.TrimSpace(s) != s {
			d.fail(n.line, path, "%q: want at most %d bytes without control characters or surrounding spaces", clip(s), maxIDBytes)
		}
	case f.checks["name"]:
		if len(s) > maxNameBytes || hasControl(s) || strings.TrimSpace(s) != s {
			d.fail(n.line, path, "%q: want at most %d bytes without control characters or surrounding spaces", clip(s), maxNameBytes)
		}
	case f.checks["nonempty"]:
		if s == "" || len(s) > maxValueBytes || hasControl(s) {
			d.fail(n.line, path, "want 1-%d bytes without control characters", maxValueBytes)
		}
	case f.checks["email"] && s != "":
		if msg := checkEmail(s); msg != "" {
			d.fail(n.line, path, "%q: %s", clip(s), msg)
		}
	case f.checks["e164"] && s != "":
		if !e164.MatchString(s) {
			d.fail(n.line, path, "%q: want an E.164 number: + then the country code and number, 2 to 15 digits in all, no spaces (+390600000001)", clip(s))
		}
	case f.checks["zone"] && s != "":
		if msg := checkZone(s); msg != "" {
			d.fail(n.line, path, "%s", msg)
		}
	case f.checks["clock"]:
		// Checked with the whole window (QuietHours.Minutes).
	default:
		if len(s) > maxValueBytes {
			d.fail(n.line, path, "at most %d bytes", maxValueBytes)
		}
	}
}

func checkEmail(s string) string {
	if len(s) > 254 {
		return "longer than 254 bytes"
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return "want a bare e-mail address such as maria@example.com"
	}
	at := strings.LastIndexByte(s, '@')
	if at < 1 || !strings.Contains(s[at+1:], ".") && s[at+1:] != "localhost" {
		return "want a bare e-mail address such as maria@example.com (the domain has no dot)"
	}
	return ""
}

func checkZone(s string) string {
	if s == "Local" || strings.ContainsAny(s, "\x00\\") || strings.HasPrefix(s, "/") || strings.Contains(s, "..") {
		return fmt.Sprintf("unknown zone %q: want an IANA zone name such as Europe/Rome", clip(s))
	}
	known, ok := zoneNames.Load(s)
	if !ok {
		_, err := time.LoadLocation(s)
		known = err == nil
		if zoneCount.Add(1) <= maxCachedZones {
			zoneNames.Store(s, known)
		}
	}
	if !known.(bool) {
		return fmt.Sprintf("unknown zone %q: want an IANA zone name such as Europe/Rome", clip(s))
	}
	return ""
}

// zoneNames caches which zone names load (LoadLocation reads and parses
// zoneinfo each time); a bounded number, so hostile files cannot grow it.
var (
	zoneNames sync.Map // string → bool
	zoneCount atomic.Int64
)

const maxCachedZones = 4096
