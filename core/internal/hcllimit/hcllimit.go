// Package hcllimit bounds HCL 2 source before hclsyntax parses it: the
// parser is recursive, so a file nested thousands of levels deep, or a long
// run of prefix operators or conditionals, would take its stack and time.
// The rules files (core/internal/rulesfile) and the daemon file
// (core/internal/config) share this one scanner, each with its own limits.
package hcllimit

import (
	"bytes"
	"fmt"
)

// Limits are what Check allows.
type Limits struct {
	// MaxDepth is the deepest nesting of blocks, objects, lists,
	// parentheses, strings and template sequences.
	MaxDepth int
	// MaxUnaryRun is the longest run of prefix operators (!, -).
	MaxUnaryRun int
	// MaxConditionals is the most ?: conditionals in one file.
	MaxConditionals int
}

// Error is a limit exceeded at a line and column (1-based) of the source.
type Error struct {
	Line, Col int
	Msg       string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

// Check scans HCL source and refuses what would make the recursive parser
// deep or slow (nesting deeper than l.MaxDepth, a run of more than
// l.MaxUnaryRun prefix operators, more than l.MaxConditionals ?:
// conditionals), before the parser (or its lexer, which holds a token per
// character of "[[[[...") sees it. The scan follows HCL's
// lexical structure closely enough to be exact for ordinary files:
// comments, quoted strings with escapes, heredocs, and ${ } / %{ }
// template sequences, which nest code inside strings. It keeps a stack of
// at most l.MaxDepth entries. The error is an *Error.
func Check(src []byte, l Limits) error {
	const (
		ctxCode    = iota // ordinary code; closes at its bracket
		ctxString         // "..."; closes at "
		ctxHeredoc        // <<EOT ... EOT
	)
	type frame struct {
		kind   int
		close  byte   // for ctxCode: the closing bracket (0 at top level)
		marker []byte // for ctxHeredoc
	}
	stack := []frame{{kind: ctxCode}}
	line, col := 1, 1
	unary, conditionals := 0, 0
	deep := func() error {
		return &Error{Line: line, Col: col, Msg: fmt.Sprintf("nesting deeper than %d levels (limit)", l.MaxDepth)}
	}
	push := func(f frame) error {
		if len(stack) > l.MaxDepth {
			return deep()
		}
		stack = append(stack, f)
		return nil
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		top := &stack[len(stack)-1]
		advance := func(n int) {
			for k := 0; k < n && i < len(src); k++ {
				if src[i] == '\n' {
					line, col = line+1, 1
				} else {
					col++
				}
				i++
			}
			i-- // the loop's i++
		}
		switch top.kind {
		case ctxString, ctxHeredoc:
			switch {
			case top.kind == ctxString && c == '\\':
				advance(2)
				continue
			case top.kind == ctxString && c == '"':
				stack = stack[:len(stack)-1]
			case top.kind == ctxString && c == '\n':
				// An unterminated string: the parser reports it.
				stack = stack[:len(stack)-1]
			case (c == '$' || c == '%') && i+2 < len(src) && src[i+1] == c && src[i+2] == '{':
				// $${ and %%{ are the literal text ${ and %{.
				advance(3)
				continue
			case (c == '$' || c == '%') && i+1 < len(src) && src[i+1] == '{':
				if err := push(frame{kind: ctxCode, close: '}'}); err != nil {
					return err
				}
				advance(2)
				continue
			case top.kind == ctxHeredoc && c == '\n':
				rest := src[i+1:]
				if j := bytes.IndexByte(rest, '\n'); j >= 0 {
					rest = rest[:j]
				}
				if bytes.Equal(bytes.TrimSpace(rest), top.marker) {
					stack = stack[:len(stack)-1]
				}
			}
			advance(1)
			continue
		}
		// Code.
		switch c {
		case ' ', '\t', '\r', '\n':
			advance(1)
			continue
		}
		if c == '!' || (c == '-' && !(i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9' && unary == 0)) {
			unary++
			if unary > l.MaxUnaryRun {
				return &Error{Line: line, Col: col, Msg: fmt.Sprintf("more than %d operators in a row (limit)", l.MaxUnaryRun)}
			}
		} else {
			unary = 0
		}
		switch {
		case c == '#' || (c == '/' && i+1 < len(src) && src[i+1] == '/'):
			j := bytes.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			advance(j)
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			j := bytes.Index(src[i+2:], []byte("*/"))
			if j < 0 {
				j = len(src) - i - 2
			}
			advance(j + 4)
		case c == '"':
			if err := push(frame{kind: ctxString}); err != nil {
				return err
			}
			advance(1)
		case c == '<' && i+1 < len(src) && src[i+1] == '<':
			j := i + 2
			if j < len(src) && src[j] == '-' {
				j++
			}
			k := j
			for k < len(src) && (src[k] == '_' || src[k] == '-' || src[k] >= '0' && src[k] <= '9' || src[k]|0x20 >= 'a' && src[k]|0x20 <= 'z') {
				k++
			}
			if k > j && k < len(src) && (src[k] == '\n' || src[k] == '\r') {
				if err := push(frame{kind: ctxHeredoc, marker: append([]byte(nil), src[j:k]...)}); err != nil {
					return err
				}
				advance(k - i)
				continue
			}
			advance(2)
		case c == '{' || c == '[' || c == '(':
			closer := map[byte]byte{'{': '}', '[': ']', '(': ')'}[c]
			if err := push(frame{kind: ctxCode, close: closer}); err != nil {
				return err
			}
			advance(1)
		case c == '}' || c == ']' || c == ')':
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			advance(1)
		case c == '?':
			conditionals++
			if conditionals > l.MaxConditionals {
				return &Error{Line: line, Col: col, Msg: fmt.Sprintf("more than %d conditional expressions (limit)", l.MaxConditionals)}
			}
			advance(1)
		default:
			advance(1)
		}
	}
	return nil
}
