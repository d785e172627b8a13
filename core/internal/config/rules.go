package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	koanfyaml "github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/secret"
)

// RulesError is one problem in a rules file. It names the file, the line
// when the parser gives one, the rule (`event "X"`, `channel "X"`,
// `defaults`) and the field inside the rule.
type RulesError struct {
	File  string
	Line  int
	Rule  string
	Field string
	Msg   string
}

func (e *RulesError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Rule != "" {
		b.WriteString(": ")
		b.WriteString(e.Rule)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// RulesErrors lists every problem found while loading rules files, sorted
// by file and line. LoadRules returns it as its error.
type RulesErrors []*RulesError

func (es RulesErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es RulesErrors) sorted() RulesErrors {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].File != es[j].File {
			return es[i].File < es[j].File
		}
		return es[i].Line < es[j].Line
	})
	return es
}

// The raw structs mirror a rules file. Unknown keys land in the ",remain"
// maps and are reported as errors (strict decoding).

type rulesFileRaw struct {
	Channels map[string]*rulesChannelRaw `koanf:"channel"`
	Events   map[string]*rulesEventRaw   `koanf:"event"`
	Defaults *rulesDefaultsRaw           `koanf:"defaults"`
	Unknown  map[string]any              `koanf:",remain"`
}

type rulesChannelRaw struct {
	Providers  []*rulesProviderRaw `koanf:"providers"`
	BestEffort *bool               `koanf:"best_effort"`
	Intrusive  *bool               `koanf:"intrusive"`
	UserTypes  []string            `koanf:"user_types"`
	Retry      *rulesRetryRaw      `koanf:"retry"`
	Breaker    *rulesBreakerRaw    `koanf:"breaker"`
	TextFormat *string             `koanf:"text_format"`
	Unknown    map[string]any      `koanf:",remain"`
}

type rulesBreakerRaw struct {
	Cooldown string         `koanf:"cooldown"`
	Unknown  map[string]any `koanf:",remain"`
}

type rulesProviderRaw struct {
	Plugin   string         `koanf:"plugin"`
	Name     string         `koanf:"name"`
	Priority int            `koanf:"priority"`
	Checksum string         `koanf:"checksum"`
	Config   map[string]any `koanf:"config"`
	Unknown  map[string]any `koanf:",remain"`
}

type rulesRetryRaw struct {
	MaxAttempts *int           `koanf:"max_attempts"`
	Initial     string         `koanf:"initial"`
	Max         string         `koanf:"max"`
	Multiplier  *float64       `koanf:"multiplier"`
	Jitter      *float64       `koanf:"jitter"`
	Unknown     map[string]any `koanf:",remain"`
}

type rulesEventRaw struct {
	Description         string                       `koanf:"description"`
	Severity            string                       `koanf:"severity"`
	Shared              bool                         `koanf:"shared"`
	Audiences           []*rulesAudienceRaw          `koanf:"audience"`
	Mandatory           []string                     `koanf:"mandatory"`
	Optional            []string                     `koanf:"optional"`
	Restrict            map[string]*rulesRestrictRaw `koanf:"restrict"`
	QuietHours          string                       `koanf:"quiet_hours"`
	QuietHoursByChannel map[string]string            `koanf:"quiet_hours_by_channel"`
	Templates           map[string]*rulesTemplateRaw `koanf:"template"`
	Inbox               *rulesTemplateRaw            `koanf:"inbox"`
	PayloadSchema       any                          `koanf:"payload_schema"`
	PayloadSchemaFile   string                       `koanf:"payload_schema_file"`
	Unknown             map[string]any               `koanf:",remain"`
}

type rulesAudienceRaw struct {
	Group       string         `koanf:"group"`
	Roles       []string       `koanf:"roles"`
	User        string         `koanf:"user"`
	UserType    string         `koanf:"user_type"`
	PayloadPath string         `koanf:"payload_path"`
	Unknown     map[string]any `koanf:",remain"`
}

type rulesRestrictRaw struct {
	Roles   []string       `koanf:"roles"`
	Unknown map[string]any `koanf:",remain"`
}

type rulesTemplateRaw struct {
	Subject string                   `koanf:"subject"`
	Title   string                   `koanf:"title"`
	Body    string                   `koanf:"body"`
	HTML    string                   `koanf:"html"`
	Data    map[string]string        `koanf:"data"`
	Locales map[string]*rulesTextRaw `koanf:"locale"`
	Unknown map[string]any           `koanf:",remain"`
}

type rulesTextRaw struct {
	Subject string            `koanf:"subject"`
	Title   string            `koanf:"title"`
	Body    string            `koanf:"body"`
	HTML    string            `koanf:"html"`
	Data    map[string]string `koanf:"data"`
	Unknown map[string]any    `koanf:",remain"`
}

type rulesDefaultsRaw struct {
	TimeZone   string                       `koanf:"time_zone"`
	Locale     string                       `koanf:"locale"`
	QuietHours *rulesQuietRaw               `koanf:"quiet_hours"`
	Retry      *rulesRetryRaw               `koanf:"retry"`
	UserTypes  map[string]*rulesUserTypeRaw `koanf:"user_type"`
	Unknown    map[string]any               `koanf:",remain"`
}

type rulesUserTypeRaw struct {
	Enabled    *[]string      `koanf:"enabled"`
	QuietHours *rulesQuietRaw `koanf:"quiet_hours"`
	Unknown    map[string]any `koanf:",remain"`
}

type rulesQuietRaw struct {
	Start   string         `koanf:"start"`
	End     string         `koanf:"end"`
	Unknown map[string]any `koanf:",remain"`
}

// rulesFile is one parsed rules file.
type rulesFile struct {
	path      string
	positions rulesPositions
	raw       rulesFileRaw
	// broken is set when the file could not be parsed at all.
	broken bool
	// badPaths are fields that failed to decode; validation problems
	// inside or above them are consequences, not news.
	badPaths [][]string
}

func (f *rulesFile) overlapsBadPath(path []string) bool {
	for _, bad := range f.badPaths {
		n := min(len(bad), len(path))
		if slices.Equal(bad[:n], path[:n]) {
			return true
		}
	}
	return false
}

// rulesCollector gathers problems and places them in files.
type rulesCollector struct{ errs RulesErrors }

func (c *rulesCollector) add(f *rulesFile, path []string, msg string) {
	se := &rules.SpecError{Path: path}
	e := &RulesError{Rule: se.Rule(), Field: se.Field(), Msg: msg}
	if f != nil {
		e.File = f.path
		e.Line = f.positions.line(path)
	}
	c.errs = append(c.errs, e)
}

// RulesFiles expands rules paths and globs into the files they name, in
// order and without duplicates. A plain path that does not exist and a glob
// matching nothing are errors.
func RulesFiles(patterns ...string) ([]string, error) {
	var (
		out  []string
		errs RulesErrors
		seen = map[string]bool{}
	)
	for _, p := range patterns {
		var matches []string
		if strings.ContainsAny(p, "*?[") {
			m, err := filepath.Glob(p)
			if err != nil {
				errs = append(errs, &RulesError{File: p, Msg: "bad glob: " + err.Error()})
				continue
			}
			if len(m) == 0 {
				errs = append(errs, &RulesError{File: p, Msg: "no rules files match"})
				continue
			}
			sort.Strings(m)
			matches = m
		} else {
			if _, err := os.Stat(p); err != nil {
				errs = append(errs, &RulesError{File: p, Msg: "cannot read: " + rulesPathErr(err)})
				continue
			}
			matches = []string{p}
		}
		for _, m := range matches {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	if len(patterns) == 0 {
		errs = append(errs, &RulesError{File: "(none)", Msg: "no rules files given"})
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

func rulesPathErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// LoadRules loads, decodes strictly, merges and validates rules files (HCL
// for .hcl, YAML for .yaml and .yml; paths may be globs), and resolves the
// secret references (env:NAME, file:PATH, raw:TEXT) in providers' config.
// The error is a RulesErrors naming the file, line, rule and field of every
// problem.
func LoadRules(paths ...string) (*rules.RuleSet, error) {
	rs, _, err := LoadRulesWith(RulesOptions{}, paths...)
	return rs, err
}

// RulesOptions tunes LoadRulesWith.
type RulesOptions struct {
	// PluginDir, when not empty, also checks that every provider's binary
	// (herald-plugin-<plugin>) is there, is executable and matches its
	// checksum (`herald rules check --plugin-dir`).
	PluginDir string
	// KeepReferences leaves the secret references of providers' config as
	// written and only checks their syntax, for tools that start no plugin
	// (`rules explain`, `rules check --no-resolve`) on machines that do not
	// hold the secrets.
	KeepReferences bool
}

// LoadRulesWith is LoadRules with options; it also returns the files read.
func LoadRulesWith(opts RulesOptions, paths ...string) (*rules.RuleSet, []string, error) {
	rs, files, _, err := loadRulesFilesWith(paths, opts)
	return rs, files, err
}

// CheckRules is LoadRulesWith that also returns the warnings of rules that
// load (rules.RuleSet.Warnings), placed in their files like errors.
func CheckRules(opts RulesOptions, paths ...string) (*rules.RuleSet, []string, RulesErrors, error) {
	return loadRulesFilesWith(paths, opts)
}

// loadRulesFiles is LoadRules that also returns the files read.
func loadRulesFiles(paths []string) (*rules.RuleSet, []string, error) {
	rs, files, _, err := loadRulesFilesWith(paths, RulesOptions{})
	return rs, files, err
}

func loadRulesFilesWith(paths []string, opts RulesOptions) (*rules.RuleSet, []string, RulesErrors, error) {
	files, err := RulesFiles(paths...)
	if err != nil {
		return nil, files, nil, err
	}
	c := &rulesCollector{}
	parsed := make([]*rulesFile, 0, len(files))
	broken := false
	for _, path := range files {
		f := parseRulesFile(c, path)
		broken = broken || f.broken
		parsed = append(parsed, f)
	}
	if broken {
		// Validating what is left would report references into the
		// unreadable file as errors of their own.
		return nil, files, nil, c.errs.sorted()
	}
	spec, owners := buildRulesSpec(c, parsed, !opts.KeepReferences)
	if opts.PluginDir != "" {
		checkRulesPluginDir(c, spec, owners, opts.PluginDir)
	}
	rs, err := rules.New(spec)
	if err != nil {
		var ses rules.SpecErrors
		if !errors.As(err, &ses) {
			return nil, files, nil, err
		}
		for _, se := range ses {
			f := owners.fileFor(se.Path)
			if f != nil && f.overlapsBadPath(se.Path) {
				continue
			}
			c.add(f, se.Path, se.Msg)
		}
	}
	if len(c.errs) > 0 {
		return nil, files, nil, c.errs.sorted()
	}
	warn := &rulesCollector{}
	for _, w := range rs.Warnings() {
		warn.add(owners.fileFor(w.Path), w.Path, w.Msg)
	}
	return rs, files, warn.errs.sorted(), nil
}

// checkRulesPluginDir checks that the plugin binary of every provider is in
// dir, executable, and matches its checksum when one is given.
func checkRulesPluginDir(c *rulesCollector, spec rules.Spec, owners *rulesOwners, dir string) {
	for _, ch := range spec.Channels {
		f := owners.channels[ch.Name]
		for i, p := range ch.Providers {
			if p.Plugin == "" {
				continue
			}
			path := []string{rules.KeyChannel, ch.Name, rules.KeyProviders, strconv.Itoa(i), rules.KeyPlugin}
			bin := filepath.Join(dir, "herald-plugin-"+p.Plugin)
			st, err := os.Stat(bin)
			switch {
			case err != nil:
				c.add(f, path, fmt.Sprintf("plugin binary %s: %s", bin, rulesPathErr(err)))
				continue
			case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
				c.add(f, path, fmt.Sprintf("plugin binary %s is not an executable file", bin))
				continue
			}
			if p.Checksum == "" {
				continue
			}
			sum, err := rulesFileSHA256(bin)
			if err != nil {
				c.add(f, path, fmt.Sprintf("plugin binary %s: %v", bin, err))
			} else if !strings.EqualFold(sum, p.Checksum) {
				cp := append(path[:len(path)-1:len(path)-1], rules.KeyChecksum)
				c.add(f, cp, fmt.Sprintf("%s has SHA-256 %s", bin, sum))
			}
		}
	}
}

func rulesFileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// parseRulesFile reads one file with koanf and decodes it strictly.
func parseRulesFile(c *rulesCollector, path string) *rulesFile {
	f := &rulesFile{path: path, positions: rulesPositions{}}
	src, err := os.ReadFile(path)
	if err != nil {
		f.broken = true
		c.errs = append(c.errs, &RulesError{File: path, Msg: "cannot read: " + rulesPathErr(err)})
		return f
	}
	var parser koanf.Parser
	var hclParser *rulesHCLParser
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".hcl":
		hclParser = &rulesHCLParser{}
		parser = hclParser
		f.positions = hclRulesPositions(src)
	case ".yaml", ".yml":
		parser = koanfyaml.Parser()
		f.positions = yamlRulesPositions(src)
	default:
		f.broken = true
		c.errs = append(c.errs, &RulesError{File: path, Msg: fmt.Sprintf("unknown rules file type %q: use .hcl, .yaml or .yml", ext)})
		return f
	}
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(src), parser); err != nil {
		f.broken = true
		c.errs = append(c.errs, &RulesError{File: path, Line: rulesParseLine(err), Msg: "syntax error: " + err.Error()})
		return f
	}
	if hclParser != nil {
		for _, p := range hclParser.problems {
			c.add(f, p.path, p.msg)
			c.errs[len(c.errs)-1].Line = f.positions.lineOf(p.path, p.occurrence)
		}
	}
	err = k.UnmarshalWithConf("", &f.raw, koanf.UnmarshalConf{DecoderConfig: rulesDecoderConfig()})
	if err != nil {
		// mapstructure drops a whole map or struct when one field in it
		// has the wrong type. Report the bad fields, take them out and
		// decode again, so that the rest of the file is still checked.
		m := k.Raw()
		for attempt := 0; err != nil && attempt < 100; attempt++ {
			bad := rulesDecodeErrors(c, f, err, nil)
			removed := false
			for _, p := range bad {
				if p == nil || rulesDeletePath(m, p) {
					removed = true
				}
				f.badPaths = append(f.badPaths, p)
			}
			if !removed {
				break
			}
			f.raw = rulesFileRaw{}
			err = rulesDecodeMap(m, &f.raw)
		}
		if err != nil {
			f.broken = true
			return f
		}
	}
	var unknown []rulesPathProblem
	collectUnknownRulesKeys(reflect.ValueOf(&f.raw), nil, &unknown)
	for _, u := range unknown {
		c.add(f, u.path, u.msg)
	}
	return f
}

func rulesDecoderConfig() *mapstructure.DecoderConfig {
	return &mapstructure.DecoderConfig{
		ErrorUnused:      true,
		WeaklyTypedInput: false,
		TagName:          "koanf",
	}
}

// rulesDecodeMap decodes a (repaired) rules map exactly as koanf's
// UnmarshalWithConf does with rulesDecoderConfig.
func rulesDecodeMap(m map[string]any, out *rulesFileRaw) error {
	dc := rulesDecoderConfig()
	dc.Result = out
	d, err := mapstructure.NewDecoder(dc)
	if err != nil {
		return err
	}
	return d.Decode(m)
}

// rulesDecodeErrors reports mapstructure's decoding errors (wrong types)
// with the path each names, and returns those paths.
func rulesDecodeErrors(c *rulesCollector, f *rulesFile, err error, paths [][]string) [][]string {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			paths = rulesDecodeErrors(c, f, e, paths)
		}
		return paths
	}
	var de *mapstructure.DecodeError
	if errors.As(err, &de) {
		inner := de.Unwrap()
		if _, nested := inner.(interface{ Unwrap() []error }); nested {
			return rulesDecodeErrors(c, f, inner, paths)
		}
		var deeper *mapstructure.DecodeError
		if errors.As(inner, &deeper) {
			return rulesDecodeErrors(c, f, inner, paths)
		}
		path := splitDecodePath(de.Name())
		c.add(f, path, inner.Error())
		return append(paths, path)
	}
	c.add(f, nil, err.Error())
	return append(paths, nil)
}

// rulesDeletePath removes the value at path from a decoded rules map (list
// elements become nil, keeping indexes stable). It reports whether it found
// the value.
func rulesDeletePath(m map[string]any, path []string) bool {
	if len(path) == 0 {
		return false
	}
	var cur any = m
	for i, seg := range path {
		last := i == len(path)-1
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[seg]
			if !ok {
				return false
			}
			if last {
				delete(v, seg)
				return true
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(v) {
				return false
			}
			if last {
				v[n] = nil
				return true
			}
			cur = v[n]
		default:
			return false
		}
	}
	return false
}

// collectUnknownRulesKeys walks a decoded raw value and reports every key
// that landed in a ",remain" map.
func collectUnknownRulesKeys(v reflect.Value, path []string, out *[]rulesPathProblem) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			collectUnknownRulesKeys(v.Elem(), path, out)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			tag := t.Field(i).Tag.Get("koanf")
			if tag == ",remain" {
				m := v.Field(i)
				keys := make([]string, 0, m.Len())
				for _, k := range m.MapKeys() {
					keys = append(keys, k.String())
				}
				sort.Strings(keys)
				for _, k := range keys {
					*out = append(*out, rulesPathProblem{path: rulesSubPath(path, k), msg: fmt.Sprintf("unknown field %q", k)})
				}
				continue
			}
			collectUnknownRulesKeys(v.Field(i), rulesSubPath(path, tag), out)
		}
	case reflect.Map:
		if ek := v.Type().Elem().Kind(); ek != reflect.Pointer && ek != reflect.Struct {
			return
		}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		for _, k := range keys {
			collectUnknownRulesKeys(v.MapIndex(reflect.ValueOf(k)), rulesSubPath(path, k), out)
		}
	case reflect.Slice:
		if ek := v.Type().Elem().Kind(); ek != reflect.Pointer && ek != reflect.Struct {
			return
		}
		for i := 0; i < v.Len(); i++ {
			collectUnknownRulesKeys(v.Index(i), rulesSubPath(path, fmt.Sprint(i)), out)
		}
	}
}

// rulesOwners records which file defines each rule.
type rulesOwners struct {
	channels map[string]*rulesFile
	events   map[string]*rulesFile
	defaults *rulesFile
}

func (o *rulesOwners) fileFor(path []string) *rulesFile {
	if len(path) == 0 {
		return nil
	}
	switch path[0] {
	case rules.KeyDefaults:
		return o.defaults
	case rules.KeyChannel:
		if len(path) > 1 {
			return o.channels[path[1]]
		}
	case rules.KeyEvent:
		if len(path) > 1 {
			return o.events[path[1]]
		}
	}
	return nil
}

func rulesWhere(f *rulesFile, path []string) string {
	if l := f.positions.line(path); l > 0 {
		return fmt.Sprintf("%s:%d", f.path, l)
	}
	return f.path
}

// buildRulesSpec merges the files' rules (a rule defined twice is an error
// naming both files) and converts them into a rules.Spec. With resolve, the
// secret references of providers' config are replaced by their values;
// without, only their syntax is checked.
func buildRulesSpec(c *rulesCollector, files []*rulesFile, resolve bool) (rules.Spec, *rulesOwners) {
	owners := &rulesOwners{channels: map[string]*rulesFile{}, events: map[string]*rulesFile{}}
	for _, f := range files {
		for _, name := range rulesSortedKeys(f.raw.Channels) {
			path := []string{rules.KeyChannel, name}
			if prev, dup := owners.channels[name]; dup {
				c.add(f, path, "duplicate channel: also in "+rulesWhere(prev, path))
				continue
			}
			owners.channels[name] = f
		}
		for _, name := range rulesSortedKeys(f.raw.Events) {
			path := []string{rules.KeyEvent, name}
			if prev, dup := owners.events[name]; dup {
				c.add(f, path, "duplicate event type: also in "+rulesWhere(prev, path))
				continue
			}
			owners.events[name] = f
		}
		if f.raw.Defaults != nil {
			path := []string{rules.KeyDefaults}
			if owners.defaults != nil {
				c.add(f, path, "defaults given twice: also in "+rulesWhere(owners.defaults, path))
				continue
			}
			owners.defaults = f
		}
	}

	var spec rules.Spec
	defaultRetry := rules.DefaultRetry
	if f := owners.defaults; f != nil {
		d := f.raw.Defaults
		spec.Defaults = rules.DefaultsSpec{TimeZone: d.TimeZone, Locale: d.Locale}
		if d.QuietHours != nil {
			spec.Defaults.QuietHours = &rules.QuietHours{Start: d.QuietHours.Start, End: d.QuietHours.End}
		}
		defaultRetry = rulesRetryFrom(c, f, d.Retry, defaultRetry, []string{rules.KeyDefaults, rules.KeyRetry})
		if len(d.UserTypes) > 0 {
			spec.Defaults.UserTypes = map[string]rules.UserTypeDefaults{}
			for _, ut := range rulesSortedKeys(d.UserTypes) {
				raw := d.UserTypes[ut]
				var td rules.UserTypeDefaults
				if raw != nil {
					if raw.Enabled != nil {
						td.Enabled = append([]string{}, (*raw.Enabled)...)
						td.EnabledSet = true
					}
					if raw.QuietHours != nil {
						td.QuietHours = &rules.QuietHours{Start: raw.QuietHours.Start, End: raw.QuietHours.End}
					}
				}
				spec.Defaults.UserTypes[ut] = td
			}
		}
	}
	spec.Defaults.Retry = defaultRetry

	for _, name := range rulesSortedKeys(owners.channels) {
		f := owners.channels[name]
		raw := f.raw.Channels[name]
		if raw == nil {
			raw = &rulesChannelRaw{}
		}
		ch := rules.ChannelConfig{
			Name:       name,
			BestEffort: rules.DefaultBestEffort(name),
			Intrusive:  rules.DefaultIntrusive(name),
			UserTypes:  raw.UserTypes,
		}
		if raw.BestEffort != nil {
			ch.BestEffort = *raw.BestEffort
		}
		if raw.Intrusive != nil {
			ch.Intrusive = *raw.Intrusive
		}
		if raw.TextFormat != nil {
			ch.TextFormat = *raw.TextFormat
		}
		base := defaultRetry
		if ch.BestEffort {
			base.MaxAttempts = 1
		}
		ch.Retry = rulesRetryFrom(c, f, raw.Retry, base, []string{rules.KeyChannel, name, rules.KeyRetry})
		ch.Breaker = rulesBreakerFrom(c, f, raw.Breaker, []string{rules.KeyChannel, name, rules.KeyBreaker})
		for i, p := range raw.Providers {
			if p == nil {
				continue
			}
			cfgPath := []string{rules.KeyChannel, name, rules.KeyProviders, strconv.Itoa(i), rules.KeyConfig}
			ch.Providers = append(ch.Providers, rules.Provider{
				Name: p.Name, Plugin: p.Plugin, Priority: p.Priority, Checksum: p.Checksum,
				Config: rulesResolveConfig(c, f, p.Config, cfgPath, resolve),
			})
		}
		spec.Channels = append(spec.Channels, ch)
	}

	for _, name := range rulesSortedKeys(owners.events) {
		f := owners.events[name]
		raw := f.raw.Events[name]
		if raw == nil {
			raw = &rulesEventRaw{}
		}
		spec.Events = append(spec.Events, rulesEventFrom(c, f, name, raw))
	}
	return spec, owners
}

func rulesEventFrom(c *rulesCollector, f *rulesFile, name string, raw *rulesEventRaw) rules.EventSpec {
	base := []string{rules.KeyEvent, name}
	ev := rules.EventSpec{
		Type:                name,
		Description:         raw.Description,
		Severity:            raw.Severity,
		Shared:              raw.Shared,
		Mandatory:           raw.Mandatory,
		Optional:            raw.Optional,
		QuietHours:          raw.QuietHours,
		QuietHoursByChannel: raw.QuietHoursByChannel,
	}
	for _, a := range raw.Audiences {
		if a == nil {
			a = &rulesAudienceRaw{}
		}
		ev.Audiences = append(ev.Audiences, rules.AudienceSpec{
			Group: a.Group, Roles: a.Roles, User: a.User, UserType: a.UserType, PayloadPath: a.PayloadPath,
		})
	}
	if len(raw.Restrict) > 0 {
		ev.Restrict = map[string][]string{}
		for ch, r := range raw.Restrict {
			if r == nil {
				r = &rulesRestrictRaw{}
			}
			ev.Restrict[ch] = r.Roles
		}
	}
	if len(raw.Templates) > 0 {
		ev.Templates = map[string]rules.TemplateSpec{}
		for ch, t := range raw.Templates {
			ev.Templates[ch] = rulesTemplateFrom(t)
		}
	}
	ev.Inbox = rulesTemplateFrom(raw.Inbox)

	schemaPath := rulesSubPath(base, rules.KeyPayloadSchema)
	switch s := raw.PayloadSchema.(type) {
	case nil:
	case string:
		ev.PayloadSchema = []byte(s)
	case map[string]any:
		b, err := json.Marshal(s)
		if err != nil {
			c.add(f, schemaPath, "cannot encode as JSON: "+err.Error())
		}
		ev.PayloadSchema = b
	default:
		c.add(f, schemaPath, fmt.Sprintf("must be a JSON Schema object or a string holding one, got %T", s))
	}
	if raw.PayloadSchemaFile != "" {
		filePath := rulesSubPath(base, rules.KeyPayloadSchemaFile)
		if ev.PayloadSchema != nil {
			c.add(f, filePath, "give "+rules.KeyPayloadSchema+" or "+rules.KeyPayloadSchemaFile+", not both")
		}
		p := raw.PayloadSchemaFile
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(f.path), p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			c.add(f, filePath, fmt.Sprintf("cannot read %s: %s", p, rulesPathErr(err)))
		} else {
			ev.PayloadSchema = b
			schemaPath = filePath
		}
	}
	if len(ev.PayloadSchema) > 0 {
		canon, err := canonicalJSON(ev.PayloadSchema)
		if err != nil {
			c.add(f, schemaPath, "bad JSON Schema: not valid JSON: "+err.Error())
			ev.PayloadSchema = nil
		} else {
			ev.PayloadSchema = canon
		}
	}
	return ev
}

// canonicalJSON re-encodes JSON with sorted keys and no spacing, so the
// same schema written inline in HCL or as a YAML mapping compares equal.
func canonicalJSON(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return json.Marshal(v)
}

func rulesTemplateFrom(t *rulesTemplateRaw) rules.TemplateSpec {
	if t == nil {
		return rules.TemplateSpec{}
	}
	out := rules.TemplateSpec{TemplateText: rules.TemplateText{
		Subject: t.Subject, Title: t.Title, Body: t.Body, HTML: t.HTML, Data: t.Data,
	}}
	if len(t.Locales) > 0 {
		out.Locales = map[string]rules.TemplateText{}
		for l, x := range t.Locales {
			if x == nil {
				x = &rulesTextRaw{}
			}
			out.Locales[l] = rules.TemplateText{Subject: x.Subject, Title: x.Title, Body: x.Body, HTML: x.HTML, Data: x.Data}
		}
	}
	return out
}

// rulesRetryFrom fills a retry policy from a retry block, field by field
// over base.
func rulesRetryFrom(c *rulesCollector, f *rulesFile, raw *rulesRetryRaw, base rules.RetryPolicy, path []string) rules.RetryPolicy {
	out := base
	if raw == nil {
		return out
	}
	if raw.MaxAttempts != nil {
		out.MaxAttempts = *raw.MaxAttempts
	}
	dur := func(key, s string, into *time.Duration) {
		if s == "" {
			return
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			c.add(f, rulesSubPath(path, key), fmt.Sprintf("bad duration %q: want a Go duration such as 2s or 10m", s))
			return
		}
		*into = d
	}
	dur(rules.KeyInitial, raw.Initial, &out.Initial)
	dur(rules.KeyMax, raw.Max, &out.Max)
	if raw.Multiplier != nil {
		out.Multiplier = *raw.Multiplier
	}
	if raw.Jitter != nil {
		out.Jitter = *raw.Jitter
	}
	return out
}

// rulesBreakerFrom reads a channel's breaker block.
func rulesBreakerFrom(c *rulesCollector, f *rulesFile, raw *rulesBreakerRaw, path []string) rules.BreakerConfig {
	var out rules.BreakerConfig
	if raw == nil || raw.Cooldown == "" {
		return out
	}
	d, err := time.ParseDuration(raw.Cooldown)
	if err != nil {
		c.add(f, rulesSubPath(path, rules.KeyCooldown), fmt.Sprintf("bad duration %q: want a Go duration such as 2s or 10m", raw.Cooldown))
		return out
	}
	out.Cooldown = d
	return out
}

func rulesSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rulesResolveConfig returns a provider's config with every secret
// reference (a string value, or a string in a list or nested map) replaced
// by what it stands for; file: paths are relative to the rules file. A
// reference that does not resolve is reported at its field, naming the
// reference and never a value. Without resolve only the syntax is checked
// and the config is returned as written.
func rulesResolveConfig(c *rulesCollector, f *rulesFile, cfg map[string]any, path []string, resolve bool) map[string]any {
	if cfg == nil {
		return nil
	}
	base := filepath.Dir(f.path)
	var walk func(v any, path []string) any
	walk = func(v any, path []string) any {
		switch t := v.(type) {
		case string:
			if !resolve {
				if err := secret.Check(t); err != nil {
					c.add(f, path, err.Error())
				}
				return t
			}
			val, _, err := secret.Resolve(t, base)
			if err != nil {
				c.add(f, path, err.Error())
				return t
			}
			return val
		case []any:
			out := make([]any, len(t))
			for i, x := range t {
				out[i] = walk(x, rulesSubPath(path, strconv.Itoa(i)))
			}
			return out
		case []string:
			out := make([]string, len(t))
			for i, x := range t {
				out[i], _ = walk(x, rulesSubPath(path, strconv.Itoa(i))).(string)
			}
			return out
		case map[string]any:
			out := make(map[string]any, len(t))
			for _, k := range rulesSortedKeys(t) {
				out[k] = walk(t[k], rulesSubPath(path, k))
			}
			return out
		}
		return v
	}
	out, _ := walk(cfg, path).(map[string]any)
	return out
}
