package hcllimit

import (
	"errors"
	"strings"
	"testing"
)

var small = Limits{MaxDepth: 4, MaxUnaryRun: 3, MaxConditionals: 2}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		src  string
		want string // "" for no error; else a substring of the message
		line int
	}{
		"ordinary":                 {src: "a {\n  b = [1, 2]\n  c = \"x\"\n}\n"},
		"at the depth limit":       {src: "a = [[[[1]]]]\n"},
		"over the depth limit":     {src: "a = [[[[[1]]]]]\n", want: "nesting deeper than 4 levels", line: 1},
		"deep in a template":       {src: "a = \"${[[[1]]]}\"\n", want: "nesting deeper than 4 levels", line: 1},
		"brackets in a string":     {src: "a = \"[[[[[[[[\"\n"},
		"brackets in a comment":    {src: "# [[[[[[[[\n// ((((((((\n/* {{{{{{{{ */\na = 1\n"},
		"brackets in a heredoc":    {src: "a = <<EOT\n[[[[[[[[\nEOT\n"},
		"escaped template":         {src: "a = \"$${[[[[[[\"\n"},
		"negative number":          {src: "a = -1\n"},
		"unary run":                {src: "a = !!!!true\n", want: "more than 3 operators in a row", line: 1},
		"unary run across lines":   {src: "a = 1\nb = - - - -1\n", want: "more than 3 operators in a row", line: 2},
		"conditionals":             {src: "a = x ? 1 : 2\nb = x ? 1 : 2\nc = x ? 1 : 2\n", want: "more than 2 conditional expressions", line: 3},
		"unterminated string":      {src: "a = \"[[[[\n"},
		"closers only":             {src: ")))]]]}}}\n"},
		"deep nesting on line two": {src: "a = 1\nb = ((((((1))))))\n", want: "nesting deeper", line: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := Check([]byte(tc.src), small)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var le *Error
			if !errors.As(err, &le) || !strings.Contains(le.Msg, tc.want) || le.Line != tc.line {
				t.Fatalf("Check = %v, want %q at line %d", err, tc.want, tc.line)
			}
		})
	}
}

// TestCheckHugeNesting: a megabyte of "[" is refused at the limit, with a
// bounded stack.
func TestCheckHugeNesting(t *testing.T) {
	t.Parallel()
	src := "a = " + strings.Repeat("[", 1<<20)
	var le *Error
	if err := Check([]byte(src), Limits{MaxDepth: 64, MaxUnaryRun: 16, MaxConditionals: 64}); !errors.As(err, &le) || le.Col != 4+65 {
		t.Fatalf("Check = %v", err)
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"a {\n b = [1]\n}\n", "a = \"${x ? [1] : [2]}\"\n", "a = <<-EOT\n  x\n  EOT\n", "a = !!-1", "\"\\", "<<"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		err := Check(src, small)
		if err == nil {
			return
		}
		var le *Error
		if !errors.As(err, &le) || le.Line < 1 || le.Col < 1 || le.Msg == "" {
			t.Fatalf("Check = %#v", err)
		}
	})
}
