package rulesfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/heraldhq/herald/core/internal/hcllimit"
)

// Limits of a rules file. A file beyond any of them is refused with an
// error that names the limit; none of them is near what a hand-written
// rules file needs.
const (
	// MaxFileSize is the largest rules file read, in bytes.
	MaxFileSize = 4 << 20
	// MaxDepth is the deepest nesting of blocks, objects, lists,
	// parentheses and templates (HCL) or of mappings and sequences (YAML).
	MaxDepth = 64
	// MaxYAMLNodes is the most values a YAML file may hold once its
	// aliases are expanded (an alias bomb stops here).
	MaxYAMLNodes = 200_000
	// maxRulesUnaryRun is the longest run of prefix operators (!, -) in
	// HCL, which the parser would otherwise nest one level each.
	maxRulesUnaryRun = 16
	// maxRulesConditionals is the most ?: conditionals in an HCL file
	// (each nests the parser one level; rules need none).
	maxRulesConditionals = 64
)

// hclLimits are the HCL limits of a rules file.
var hclLimits = hcllimit.Limits{MaxDepth: MaxDepth, MaxUnaryRun: maxRulesUnaryRun, MaxConditionals: maxRulesConditionals}

var errRulesEmpty = errors.New("empty rules file: it declares no channel, event or defaults")

// rulesPositions maps a path in a rules file (joined by rulesPathSep) to
// the ranges it stands at, one per occurrence.
type rulesPositions map[string][]hcl.Range

const rulesPathSep = "\x00"

func (ps rulesPositions) record(path []string, rng hcl.Range) {
	if rng.Start.Line <= 0 {
		return
	}
	k := strings.Join(path, rulesPathSep)
	if rs := ps[k]; len(rs) == 0 || rs[len(rs)-1] != rng {
		ps[k] = append(rs, rng)
	}
}

// at returns the range of the longest known prefix of path.
func (ps rulesPositions) at(path []string) (hcl.Range, bool) {
	for n := len(path); n > 0; n-- {
		if rs, ok := ps[strings.Join(path[:n], rulesPathSep)]; ok {
			return rs[0], true
		}
	}
	return hcl.Range{}, false
}

// line returns the line of the longest known prefix of path (0 if none).
func (ps rulesPositions) line(path []string) int {
	r, _ := ps.at(path)
	return r.Start.Line
}

func rulesSubPath(path []string, more ...string) []string {
	out := make([]string, 0, len(path)+len(more))
	return append(append(out, path...), more...)
}

// readRulesSource reads a rules file, refusing one over MaxFileSize.
func readRulesSource(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %s", rulesPathErr(err))
	}
	defer fh.Close()
	src, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %s", rulesPathErr(err))
	}
	if len(src) > MaxFileSize {
		return nil, fmt.Errorf("file larger than %d bytes (limit)", MaxFileSize)
	}
	return src, nil
}

// parseRulesSource parses one rules file and decodes it into its raw
// structs. Problems go to c; f.broken is set when the file could not be
// read as a whole.
func parseRulesSource(c *rulesCollector, path string, src []byte) *rulesFile {
	f := &rulesFile{path: path, positions: rulesPositions{}, src: src}
	fail := func(line, col int, msg string) *rulesFile {
		f.broken = true
		c.addAt(f, nil, hcl.Range{Filename: path, Start: hcl.Pos{Line: line, Column: col}}, msg)
		return f
	}
	if !utf8.Valid(src) {
		line := 1 + bytes.Count(src[:firstInvalidUTF8(src)], []byte("\n"))
		return fail(line, 0, "not valid UTF-8 text")
	}
	var body hcl.Body
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".hcl":
		if err := hcllimit.Check(src, hclLimits); err != nil {
			var le *hcllimit.Error
			errors.As(err, &le)
			return fail(le.Line, le.Col, le.Msg)
		}
		file, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
		if diags.HasErrors() {
			f.broken = true
			for _, dg := range diags {
				if dg.Severity != hcl.DiagError {
					continue
				}
				var rng hcl.Range
				if dg.Subject != nil {
					rng = *dg.Subject
				}
				c.addAt(f, nil, rng, "syntax error: "+rulesDiagText(dg))
			}
			return f
		}
		sb := file.Body.(*hclsyntax.Body)
		if len(sb.Attributes) == 0 && len(sb.Blocks) == 0 {
			return fail(0, 0, errRulesEmpty.Error())
		}
		body = sb
	case ".yaml", ".yml":
		b, err := yamlRulesBody(src, path)
		if err != nil {
			var pe *rulesPosError
			if errors.As(err, &pe) {
				return fail(pe.line, pe.col, pe.msg)
			}
			return fail(0, 0, err.Error())
		}
		body = b
	default:
		return fail(0, 0, fmt.Sprintf("unknown rules file type %q: use .hcl, .yaml or .yml", ext))
	}
	d := &rulesDecoder{c: c, f: f}
	d.decodeBody(body, reflect.ValueOf(&f.raw).Elem(), nil)
	return f
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// rulesSnippet is the source line of rng with a caret under its column.
func rulesSnippet(src []byte, rng hcl.Range) string {
	line := rng.Start.Line
	if line <= 0 || src == nil {
		return ""
	}
	lines := bytes.SplitN(src, []byte("\n"), line+1)
	if len(lines) < line {
		return ""
	}
	text := strings.TrimRight(string(lines[line-1]), "\r")
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%5d | %s", line, text)
	if col := rng.Start.Column; col > 0 && col <= utf8.RuneCountInString(text)+1 {
		pad := []rune(text)[:col-1]
		for i, r := range pad {
			if r != '\t' {
				pad[i] = ' '
			}
		}
		fmt.Fprintf(&b, "\n      | %s^", string(pad))
	}
	return b.String()
}
