// Package jsonguard checks JSON text from outside Herald (event payloads) before it reaches
// PostgreSQL: jsonb refuses some JSON that Go's encoding/json accepts (the
// escape \u0000, lone surrogates) and encoding/json silently rewrites
// invalid UTF-8 and lone surrogates to U+FFFD, so two different inputs could
// decode to one value.
package jsonguard

import (
	"fmt"
	"unicode/utf8"
)

// Error says what is wrong with JSON text and at which byte offset.
type Error struct {
	// Offset is the byte offset of the fault in the text.
	Offset int
	// Msg says what is wrong.
	Msg string
}

// Error returns the message and the byte offset.
func (e *Error) Error() string { return fmt.Sprintf("%s at byte %d", e.Msg, e.Offset) }

// Check scans JSON text (which need not be valid JSON: callers decode it
// afterwards) and returns an *Error when it holds invalid UTF-8, the escape
// \u0000, an unpaired surrogate escape, or arrays and objects nested deeper
// than maxDepth (0: no limit). The outermost object or array is depth 1.
func Check(text []byte, maxDepth int) error {
	depth := 0
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '"':
			n, err := checkString(text, i)
			if err != nil {
				return err
			}
			i = n
			continue
		case c == '{' || c == '[':
			depth++
			if maxDepth > 0 && depth > maxDepth {
				return &Error{Offset: i, Msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
			}
		case c == '}' || c == ']':
			depth--
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(text[i:])
			if r == utf8.RuneError && size <= 1 {
				return &Error{Offset: i, Msg: "invalid UTF-8"}
			}
			i += size
			continue
		case c == 0:
			return &Error{Offset: i, Msg: "a NUL byte"}
		}
		i++
	}
	return nil
}

// checkString checks the string that starts with the quote at text[start]
// and returns the offset just past its closing quote (or the end of text).
func checkString(text []byte, start int) (int, error) {
	for i := start + 1; i < len(text); {
		c := text[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == 0:
			return 0, &Error{Offset: i, Msg: "a NUL byte"}
		case c == '\\':
			if i+1 >= len(text) {
				return len(text), nil
			}
			if text[i+1] != 'u' {
				i += 2
				continue
			}
			r, ok := hex4(text, i+2)
			if !ok {
				i += 2 // not a valid escape: the decoder reports it
				continue
			}
			switch {
			case r == 0:
				return 0, &Error{Offset: i, Msg: `the escape \u0000 (NUL)`}
			case r >= 0xDC00 && r <= 0xDFFF:
				return 0, &Error{Offset: i, Msg: "an unpaired surrogate escape"}
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), i+7 < len(text) && text[i+6] == '\\' && text[i+7] == 'u'
				if ok {
					lo, ok = hex4(text, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return 0, &Error{Offset: i, Msg: "an unpaired surrogate escape"}
				}
				i += 12
				continue
			}
			i += 6
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(text[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, &Error{Offset: i, Msg: "invalid UTF-8"}
			}
			i += size
		default:
			i++
		}
	}
	return len(text), nil
}

// hex4 decodes the four hex digits at text[at:].
func hex4(text []byte, at int) (rune, bool) {
	if at+4 > len(text) {
		return 0, false
	}
	var r rune
	for _, c := range text[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
