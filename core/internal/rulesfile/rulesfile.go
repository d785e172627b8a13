// Package rulesfile reads rules files (HCL2 or YAML, chosen by file
// extension) into a rules.Spec and compiles it: it decodes strictly
// (unknown fields are errors), enforces the size and depth limits of
// parse.go, resolves the secret references (env:NAME, file:PATH, raw:TEXT)
// in providers' config, derives the JSON Schema that `herald rules schema`
// prints, and watches the files for the daemon's hot reload (watch.go).
// Errors name the file, the line, the rule and the field.
package rulesfile

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
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/secret"
)

// Error is one problem in a rules file. It names the file, the line
// when the parser gives one, the rule (`event "X"`, `channel "X"`,
// `defaults`) and the field inside the rule.
type Error struct {
	File string
	// Line and Column are where the problem is (1-based; 0 when the
	// problem is about the file as a whole).
	Line   int
	Column int
	Rule   string
	Field  string
	Msg    string
	// Snippet is the source line with a caret under the column, for
	// `herald rules check` to show under the message ("" when unknown).
	Snippet string
}

func (e *Error) Error() string {
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

// Errors lists every problem found while loading rules files, sorted
// by file and line. Load returns it as its error.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].File != es[j].File {
			return es[i].File < es[j].File
		}
		return es[i].Line < es[j].Line
	})
	return es
}

// The raw structs mirror a rules file; their tags are the schema (see
// decode.go). Decoding is strict: an unknown field is an error.

type rulesFileRaw struct {
	Channels map[string]*rulesChannelRaw `hcl:"channel,labeled" doc:"Channels by type (EMAIL, PUSH, SMS, SLACK, WEBSOCKET or any type a plugin declares)."`
	Events   map[string]*rulesEventRaw   `hcl:"event,labeled" doc:"Event rules by event type."`
	Defaults *rulesDefaultsRaw           `hcl:"defaults,block" doc:"Defaults for every recipient: time zone, locale, quiet hours, retry, per-user-type channels."`
}

type rulesChannelRaw struct {
	Providers  []*rulesProviderRaw `hcl:"providers,attr" doc:"The plugins that deliver this channel, tried by priority (lowest first) with failover."`
	BestEffort *bool               `hcl:"best_effort,attr" doc:"Best-effort channels are not retried (default: the class the channel's plugin declares; persistent when none is declared)."`
	Intrusive  *bool               `hcl:"intrusive,attr" doc:"Intrusive channels obey quiet hours (default: true for persistent channels, false for best-effort ones)."`
	UserTypes  []string            `hcl:"user_types,attr" doc:"The user types this channel supports (empty: all; default: the user types the channel's plugin declares)."`
	Retry      *rulesRetryRaw      `hcl:"retry,block"`
	Breaker    *rulesBreakerRaw    `hcl:"breaker,block"`
	TextFormat *string             `hcl:"text_format,attr" doc:"How message text is written for this channel."`
	Place      bool                `hcl:"place,attr" doc:"A place channel: its destination is a place (a Slack channel, a webhook, a Teams room), posted to once per event by post blocks, never once per recipient."`
}

type rulesBreakerRaw struct {
	Cooldown string `hcl:"cooldown,attr" doc:"A Go duration such as 30s."`
}

type rulesProviderRaw struct {
	Plugin   string         `hcl:"plugin,attr" doc:"The plugin binary herald-plugin-<plugin>."`
	Name     string         `hcl:"name,attr"`
	Priority int            `hcl:"priority,attr"`
	Checksum string         `hcl:"checksum,attr" doc:"SHA-256 of the plugin binary, in hex; checked before it starts."`
	Config   map[string]any `hcl:"config,attr" doc:"The plugin's config; string values may be secret references (env:NAME, file:PATH, raw:TEXT)."`
}

type rulesRetryRaw struct {
	MaxAttempts *int     `hcl:"max_attempts,attr"`
	Initial     string   `hcl:"initial,attr" doc:"A Go duration such as 2s."`
	Max         string   `hcl:"max,attr" doc:"A Go duration such as 10m."`
	Multiplier  *float64 `hcl:"multiplier,attr"`
	Jitter      *float64 `hcl:"jitter,attr"`
}

type rulesEventRaw struct {
	Description         string                       `hcl:"description,attr"`
	Severity            string                       `hcl:"severity,attr" doc:"info, warning or critical."`
	Shared              bool                         `hcl:"shared,attr" doc:"One inbox row shared by every recipient; the first to act handles it."`
	Audiences           []*rulesAudienceRaw          `hcl:"audience,blocks" doc:"Who is reached: exactly one of group, groups_path, user, user_type and payload_path per audience."`
	Mandatory           []string                     `hcl:"mandatory,attr" doc:"Channels always sent."`
	Optional            []string                     `hcl:"optional,attr" doc:"Channels sent when the group and the user enable them."`
	Restrict            map[string]*rulesRestrictRaw `hcl:"restrict,labeled" doc:"Channels limited to some roles, by channel."`
	QuietHours          string                       `hcl:"quiet_hours,attr" doc:"drop, defer or ignore: what quiet hours do to intrusive channels."`
	QuietHoursByChannel map[string]string            `hcl:"quiet_hours_by_channel,attr" doc:"quiet_hours for single channels."`
	Escalate            map[string]*rulesEscalateRaw `hcl:"escalate,labeled" doc:"Channels that wait, by channel: sent only if the in-app notification was not read or acted on within after."`
	Templates           map[string]*rulesTemplateRaw `hcl:"template,labeled" doc:"Message templates by channel (Go text/template; html is html/template)."`
	Inbox               *rulesTemplateRaw            `hcl:"inbox,block" doc:"The in-app inbox row's template."`
	PayloadSchema       any                          `hcl:"payload_schema,attr" schema:"object|string" doc:"A JSON Schema the payload must satisfy: an object, or a string holding one."`
	PayloadSchemaFile   string                       `hcl:"payload_schema_file,attr" doc:"A JSON Schema file, relative to the rules file."`
	Posts               map[string]*rulesPostRaw     `hcl:"post,labeled" doc:"Place channels the event is posted to, by channel: one post per event per destination."`
	Throttle            *rulesThrottleRaw            `hcl:"throttle,block" doc:"At most limit notifications per window reach a recipient on each throttled channel; the rest are SKIPPED."`
	Digest              *rulesDigestRaw              `hcl:"digest,block" doc:"Collect the event's notifications per recipient and key over a window and send one message rendered from all of them."`
}

type rulesThrottleRaw struct {
	Channels []string `hcl:"channels,attr" doc:"The channels throttled (default: every channel of the rule)."`
	Key      string   `hcl:"key,attr" doc:"Each key has its own count, a template such as alert:{{ .payload.alert_id }} (default: the event type)."`
	Limit    int      `hcl:"limit,attr" doc:"How many may go out per window (1 to 10000)."`
	Per      string   `hcl:"per,attr" doc:"The window, a Go duration from 1s to 168h such as 10m."`
	Over     string   `hcl:"over,attr" doc:"drop (default): what goes over the limit is SKIPPED with last_error throttled; digest: it waits and goes out as one digest per recipient and key when the window ends (the channel's template sees .items)."`
}

type rulesDigestRaw struct {
	Channels []string `hcl:"channels,attr" doc:"The channels collected (default: every channel of the rule)."`
	Key      string   `hcl:"key,attr" doc:"What is collected together, a template such as restaurant:{{ .payload.restaurant_id }} (default: the event type)."`
	Window   string   `hcl:"window,attr" doc:"How long a window stays open after its first item, a Go duration from 1s to 168h such as 5m."`
	Schedule string   `hcl:"schedule,attr" doc:"Instead of window: close at the next daily HH:MM or weekly DAY HH:MM (DAY mon to sun) after the first item, in the recipient's time zone, e.g. daily 08:00."`
	MaxItems *int     `hcl:"max_items,attr" doc:"Close a window as soon as it holds this many items (1 to 1000; default 1000)."`
	Inbox    string   `hcl:"inbox,attr" doc:"per_event (default): the in-app inbox keeps one row per event; per_digest: one row per recipient and window, written when it closes."`
}

type rulesPostRaw struct {
	To string `hcl:"to,attr" doc:"A template naming the directory group whose destination for the channel gets the post, e.g. restaurant:{{ .payload.restaurant_id }}."`
}

type rulesAudienceRaw struct {
	Group       string   `hcl:"group,attr" doc:"A group key template, e.g. restaurant:{{ .payload.restaurant_id }}."`
	Roles       []string `hcl:"roles,attr" doc:"Only members with these roles, in priority order for max_recipients."`
	GroupsPath  string   `hcl:"groups_path,attr" doc:"A dotted path to a list in the payload naming groups: each item is a group key, or .item of the group template."`
	User        string   `hcl:"user,attr" doc:"A user id template."`
	UserType    string   `hcl:"user_type,attr" doc:"Every user of this type."`
	PayloadPath string   `hcl:"payload_path,attr" doc:"Recipients listed inline in the payload at this path."`
}

type rulesRestrictRaw struct {
	Roles []string `hcl:"roles,attr"`
}

type rulesEscalateRaw struct {
	After  string    `hcl:"after,attr" doc:"The wait, a Go duration such as 10m (at most 168h)."`
	Unless *[]string `hcl:"unless,attr" doc:"What cancels it: read, acted (default: read, and acted for a shared event)."`
}

type rulesTemplateRaw struct {
	Subject string                   `hcl:"subject,attr"`
	Title   string                   `hcl:"title,attr"`
	Body    string                   `hcl:"body,attr"`
	HTML    string                   `hcl:"html,attr"`
	Data    map[string]string        `hcl:"data,attr"`
	Locales map[string]*rulesTextRaw `hcl:"locale,labeled" doc:"Variants by locale."`
}

type rulesTextRaw struct {
	Subject string            `hcl:"subject,attr"`
	Title   string            `hcl:"title,attr"`
	Body    string            `hcl:"body,attr"`
	HTML    string            `hcl:"html,attr"`
	Data    map[string]string `hcl:"data,attr"`
}

type rulesDefaultsRaw struct {
	TimeZone   string                       `hcl:"time_zone,attr" doc:"An IANA time zone, e.g. Europe/Rome."`
	Locale     string                       `hcl:"locale,attr"`
	QuietHours *rulesQuietRaw               `hcl:"quiet_hours,block"`
	Retry      *rulesRetryRaw               `hcl:"retry,block"`
	UserTypes  map[string]*rulesUserTypeRaw `hcl:"user_type,labeled"`
}

type rulesUserTypeRaw struct {
	Enabled    *[]string      `hcl:"enabled,attr"`
	QuietHours *rulesQuietRaw `hcl:"quiet_hours,block"`
}

type rulesQuietRaw struct {
	Start string `hcl:"start,attr"`
	End   string `hcl:"end,attr"`
}

// rulesFile is one parsed rules file.
type rulesFile struct {
	path      string
	src       []byte
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
type rulesCollector struct{ errs Errors }

func (c *rulesCollector) add(f *rulesFile, path []string, msg string) {
	var rng hcl.Range
	if f != nil {
		rng, _ = f.positions.at(path)
	}
	c.addAt(f, path, rng, msg)
}

// addAt is add at a known range.
func (c *rulesCollector) addAt(f *rulesFile, path []string, rng hcl.Range, msg string) {
	se := &rules.SpecError{Path: path}
	e := &Error{Rule: se.Rule(), Field: se.Field(), Msg: msg, Line: rng.Start.Line, Column: rng.Start.Column}
	if f != nil {
		e.File = f.path
		e.Snippet = rulesSnippet(f.src, rng)
	}
	c.errs = append(c.errs, e)
}

// Files expands rules paths and globs into the files they name, in
// order and without duplicates. A plain path that does not exist and a glob
// matching nothing are errors.
func Files(patterns ...string) ([]string, error) {
	var (
		out  []string
		errs Errors
		seen = map[string]bool{}
	)
	for _, p := range patterns {
		var matches []string
		if strings.ContainsAny(p, "*?[") {
			m, err := filepath.Glob(p)
			if err != nil {
				errs = append(errs, &Error{File: p, Msg: "bad glob: " + err.Error()})
				continue
			}
			if len(m) == 0 {
				errs = append(errs, &Error{File: p, Msg: "no rules files match"})
				continue
			}
			sort.Strings(m)
			matches = m
		} else {
			if _, err := os.Stat(p); err != nil {
				errs = append(errs, &Error{File: p, Msg: "cannot read: " + rulesPathErr(err)})
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
		errs = append(errs, &Error{File: "(none)", Msg: "no rules files given"})
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

// Load loads, decodes strictly, merges and validates rules files (HCL
// for .hcl, YAML for .yaml and .yml; paths may be globs), and resolves the
// secret references (env:NAME, file:PATH, raw:TEXT) in providers' config.
// The error is a Errors naming the file, line, rule and field of every
// problem.
func Load(paths ...string) (*rules.RuleSet, error) {
	rs, _, err := LoadWith(Options{}, paths...)
	return rs, err
}

// Options tunes LoadWith.
type Options struct {
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

// LoadWith is Load with options; it also returns the files read.
func LoadWith(opts Options, paths ...string) (*rules.RuleSet, []string, error) {
	rs, files, _, err := loadRulesFilesWith(paths, opts)
	return rs, files, err
}

// Check is LoadWith that also returns the warnings of rules that
// load (rules.RuleSet.Warnings), placed in their files like errors.
func Check(opts Options, paths ...string) (*rules.RuleSet, []string, Errors, error) {
	return loadRulesFilesWith(paths, opts)
}

// loadRulesFiles is Load that also returns the files read.
func loadRulesFiles(paths []string) (*rules.RuleSet, []string, error) {
	rs, files, _, err := loadRulesFilesWith(paths, Options{})
	return rs, files, err
}

func loadRulesFilesWith(paths []string, opts Options) (*rules.RuleSet, []string, Errors, error) {
	files, err := Files(paths...)
	if err != nil {
		return nil, files, nil, err
	}
	c := &rulesCollector{}
	parsed := make([]*rulesFile, 0, len(files))
	for _, path := range files {
		parsed = append(parsed, parseRulesFile(c, path))
	}
	rs, warnings, err := loadParsedRules(c, parsed, opts)
	return rs, files, warnings, err
}

// loadParsedRules merges and validates parsed files.
func loadParsedRules(c *rulesCollector, parsed []*rulesFile, opts Options) (*rules.RuleSet, Errors, error) {
	broken := false
	for _, f := range parsed {
		broken = broken || f.broken
	}
	if broken {
		// Validating what is left would report references into the
		// unreadable file as errors of their own.
		return nil, nil, c.errs.sorted()
	}
	spec, owners := buildRulesSpec(c, parsed, !opts.KeepReferences)
	if opts.PluginDir != "" {
		checkRulesPluginDir(c, spec, owners, opts.PluginDir)
	}
	rs, err := rules.New(spec)
	if err != nil {
		var ses rules.SpecErrors
		if !errors.As(err, &ses) {
			return nil, nil, err
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
		return nil, nil, c.errs.sorted()
	}
	warn := &rulesCollector{}
	for _, w := range rs.Warnings() {
		warn.add(owners.fileFor(w.Path), w.Path, w.Msg)
	}
	return rs, warn.errs.sorted(), nil
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

// parseRulesFile reads one file and decodes it strictly.
func parseRulesFile(c *rulesCollector, path string) *rulesFile {
	src, err := readRulesSource(path)
	if err != nil {
		c.errs = append(c.errs, &Error{File: path, Msg: err.Error()})
		return &rulesFile{path: path, positions: rulesPositions{}, broken: true}
	}
	return parseRulesSource(c, path, src)
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
	defaultRetry := channel.DefaultRetry
	if f := owners.defaults; f != nil {
		d := f.raw.Defaults
		spec.Defaults = rules.DefaultsSpec{TimeZone: d.TimeZone, Locale: d.Locale}
		if d.QuietHours != nil {
			spec.Defaults.QuietHours = &directory.QuietHours{Start: d.QuietHours.Start, End: d.QuietHours.End}
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
						td.QuietHours = &directory.QuietHours{Start: raw.QuietHours.Start, End: raw.QuietHours.End}
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
		ch := channel.Config{Name: name, Set: channel.Overrides{
			BestEffort: raw.BestEffort, Intrusive: raw.Intrusive,
			UserTypes: raw.UserTypes, UserTypesSet: raw.UserTypes != nil,
		}}
		if raw.TextFormat != nil {
			ch.TextFormat = *raw.TextFormat
		}
		ch.Place = raw.Place
		base := defaultRetry
		if raw.BestEffort != nil && *raw.BestEffort {
			base.MaxAttempts = 1
		}
		ch.Retry = rulesRetryFrom(c, f, raw.Retry, base, []string{rules.KeyChannel, name, rules.KeyRetry})
		ch.Breaker = rulesBreakerFrom(c, f, raw.Breaker, []string{rules.KeyChannel, name, rules.KeyBreaker})
		for i, p := range raw.Providers {
			if p == nil {
				continue
			}
			cfgPath := []string{rules.KeyChannel, name, rules.KeyProviders, strconv.Itoa(i), rules.KeyConfig}
			ch.Providers = append(ch.Providers, channel.Provider{
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
			Group: a.Group, GroupsPath: a.GroupsPath, Roles: a.Roles, User: a.User, UserType: a.UserType, PayloadPath: a.PayloadPath,
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
	if len(raw.Escalate) > 0 {
		ev.Escalations = map[string]rules.EscalationSpec{}
		for _, ch := range rulesSortedKeys(raw.Escalate) {
			e := raw.Escalate[ch]
			if e == nil {
				e = &rulesEscalateRaw{}
			}
			var es rules.EscalationSpec
			if e.Unless != nil {
				es.Unless, es.UnlessSet = append([]string{}, (*e.Unless)...), true
			}
			if e.After != "" {
				d, err := time.ParseDuration(e.After)
				if err != nil {
					c.add(f, rulesSubPath(base, rules.KeyEscalate, ch, rules.KeyAfter),
						fmt.Sprintf("bad duration %q: want a Go duration such as 10m or 1h30m", e.After))
					f.badPaths = append(f.badPaths, rulesSubPath(base, rules.KeyEscalate, ch, rules.KeyAfter))
				}
				es.After = d
			}
			ev.Escalations[ch] = es
		}
	}
	if len(raw.Templates) > 0 {
		ev.Templates = map[string]rules.TemplateSpec{}
		for ch, t := range raw.Templates {
			ev.Templates[ch] = rulesTemplateFrom(t)
		}
	}
	ev.Inbox = rulesTemplateFrom(raw.Inbox)
	if len(raw.Posts) > 0 {
		ev.Posts = map[string]rules.PostSpec{}
		for ch, p := range raw.Posts {
			if p == nil {
				p = &rulesPostRaw{}
			}
			ev.Posts[ch] = rules.PostSpec{To: p.To}
		}
	}
	if th := raw.Throttle; th != nil {
		ev.Throttle = &rules.ThrottleSpec{Channels: th.Channels, Key: th.Key, Limit: th.Limit, Over: th.Over}
		if th.Per != "" {
			per, err := time.ParseDuration(th.Per)
			if err != nil {
				c.add(f, rulesSubPath(base, rules.KeyThrottle, rules.KeyPer), fmt.Sprintf("bad duration %q: want a Go duration such as 30s, 10m or 1h", th.Per))
				per = rules.MinThrottlePer
			}
			ev.Throttle.Per = per
		}
	}
	if d := raw.Digest; d != nil {
		ev.Digest = &rules.DigestSpec{Channels: d.Channels, Key: d.Key, Inbox: d.Inbox, Schedule: d.Schedule}
		if d.MaxItems != nil {
			ev.Digest.MaxItems = *d.MaxItems
			if *d.MaxItems == 0 {
				c.add(f, rulesSubPath(base, rules.KeyDigest, rules.KeyMaxItems), fmt.Sprintf("must be between 1 and %d, got 0", rules.MaxDigestItems))
			}
		}
		if d.Window != "" {
			w, err := time.ParseDuration(d.Window)
			switch {
			case err != nil:
				c.add(f, rulesSubPath(base, rules.KeyDigest, rules.KeyWindow), fmt.Sprintf("bad duration %q: want a Go duration such as 30s, 5m or 1h", d.Window))
			case w == 0:
				c.add(f, rulesSubPath(base, rules.KeyDigest, rules.KeyWindow), fmt.Sprintf("must be between 1s and 168h (7 days), got %s", d.Window))
			}
			ev.Digest.Window = w
		}
	}

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
		b, err := readRulesSource(p)
		if err != nil {
			c.add(f, filePath, fmt.Sprintf("cannot read %s: %s", p, strings.TrimPrefix(err.Error(), "cannot read: ")))
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
func rulesRetryFrom(c *rulesCollector, f *rulesFile, raw *rulesRetryRaw, base channel.RetryPolicy, path []string) channel.RetryPolicy {
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
func rulesBreakerFrom(c *rulesCollector, f *rulesFile, raw *rulesBreakerRaw, path []string) channel.Breaker {
	var out channel.Breaker
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
