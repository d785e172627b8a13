package rules

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	_ "time/tzdata" // Recipients' zones must resolve even on hosts without zoneinfo.

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
)

// ErrNoRule means the event's type has no rule. It prompts the caller to
// mark the event FAILED: retrying cannot help until the rules change.
var ErrNoRule = errors.New("no rule for event type")

// RuleSet is a compiled, validated set of rules. It is immutable once built
// and safe for concurrent use.
type RuleSet struct {
	spec     Spec
	channels map[string]channel.Config
	events   map[string]*compiledEvent
	// defaultZone is the zone of recipients with none (or a bad one).
	defaultZone *time.Location
	defaultQH   *window
	typeQH      map[string]*window
}

type compiledEvent struct {
	spec      EventSpec
	audiences []compiledAudience
	mandatory map[string]bool
	optional  map[string]bool
	// considered is mandatory ∪ optional, sorted.
	considered []string
	templates  map[string]*compiledTemplate
	inbox      *compiledTemplate
	schema     *jsonschema.Schema
	// posts are the place channels' destination templates, by channel;
	// postChannels their names, sorted.
	posts        map[string]*template.Template
	postChannels []string
	// escalations are the waiting channels, Unless filled in.
	escalations map[string]EscalationSpec
	// digest is the rule's digest (nil: none).
	digest *compiledDigest
	// throttle is the rule's throttle (nil: none).
	throttle *compiledThrottle
}

// compiledDigest is a rule's digest, compiled.
type compiledDigest struct {
	spec DigestSpec
	// key renders the digest key (nil: the event type).
	key *template.Template
	// channels are the channels collected.
	channels map[string]bool
	// maxItems is spec.MaxItems or MaxDigestItems.
	maxItems int
	// schedule is the parsed spec.Schedule (nil: none).
	schedule *Schedule
}

type compiledAudience struct {
	spec     AudienceSpec
	group    *template.Template
	user     *template.Template
	rolePrio map[string]int
	path     []string
	// groupsPath is GroupsPath split (nil: none).
	groupsPath []string
}

type compiledTemplate struct {
	base    compiledText
	locales map[string]compiledText
}

type compiledText struct {
	subject, title, body *template.Template
	html                 *htmltemplate.Template
	data                 map[string]*template.Template
}

// SpecError is one problem in a Spec. Path names the field from the root of
// a rules file: ["event", "RESERVATION_REQUESTED", "template", "EMAIL",
// "body"].
type SpecError struct {
	Path []string
	Msg  string
}

// Rule names the rule the error is in: `event "X"`, `channel "X"` or
// `defaults`.
func (e *SpecError) Rule() string {
	switch {
	case len(e.Path) >= 2 && (e.Path[0] == KeyEvent || e.Path[0] == KeyChannel):
		return fmt.Sprintf("%s %q", e.Path[0], e.Path[1])
	case len(e.Path) >= 1:
		return e.Path[0]
	}
	return ""
}

// Field names the field inside the rule, dot separated ("" for the rule
// itself).
func (e *SpecError) Field() string {
	switch {
	case len(e.Path) >= 2 && (e.Path[0] == KeyEvent || e.Path[0] == KeyChannel):
		return strings.Join(e.Path[2:], ".")
	case len(e.Path) >= 1:
		return strings.Join(e.Path[1:], ".")
	}
	return ""
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.Rule())
	if f := e.Field(); f != "" {
		b.WriteString(": ")
		b.WriteString(f)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// SpecErrors lists every problem New found.
type SpecErrors []*SpecError

func (es SpecErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

type specChecker struct{ errs SpecErrors }

func (c *specChecker) add(msg string, path ...string) {
	c.errs = append(c.errs, &SpecError{Path: slices.Clone(path), Msg: msg})
}

func (c *specChecker) addf(path []string, format string, args ...any) {
	c.add(fmt.Sprintf(format, args...), path...)
}

func extend(base []string, more ...string) []string {
	out := make([]string, 0, len(base)+len(more))
	return append(append(out, base...), more...)
}

// New validates spec and compiles it into a RuleSet. The error is a
// SpecErrors listing every problem found.
func New(spec Spec) (*RuleSet, error) {
	spec = cloneSpec(spec)
	c := &specChecker{}
	rs := &RuleSet{
		spec:     spec,
		channels: make(map[string]channel.Config, len(spec.Channels)),
		events:   make(map[string]*compiledEvent, len(spec.Events)),
		typeQH:   map[string]*window{},
	}
	rs.compileDefaults(c)
	rs.spec.setDefaults()
	for _, ch := range rs.spec.Channels {
		if _, dup := rs.channels[ch.Name]; dup {
			c.add("duplicate channel", KeyChannel, ch.Name)
			continue
		}
		checkChannel(c, ch)
		rs.channels[ch.Name] = ch.Resolve(nil)
	}
	for ut, d := range rs.spec.Defaults.UserTypes {
		for _, ch := range d.Enabled {
			if _, ok := rs.channels[ch]; !ok {
				c.addf([]string{KeyDefaults, KeyUserType, ut, KeyEnabled}, "channel %q has no channel block", ch)
			}
		}
	}
	for _, ev := range rs.spec.Events {
		if _, dup := rs.events[ev.Type]; dup {
			c.add("duplicate event type", KeyEvent, ev.Type)
			continue
		}
		rs.events[ev.Type] = rs.compileEvent(c, ev)
	}
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	slices.SortFunc(rs.spec.Channels, func(a, b channel.Config) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(rs.spec.Events, func(a, b EventSpec) int { return strings.Compare(a.Type, b.Type) })
	return rs, nil
}

func (rs *RuleSet) compileDefaults(c *specChecker) {
	d := &rs.spec.Defaults
	if d.TimeZone == "" {
		d.TimeZone = DefaultTimeZone
	}
	if d.Locale == "" {
		d.Locale = DefaultLocale
	}
	loc, err := time.LoadLocation(d.TimeZone)
	if err != nil {
		c.addf([]string{KeyDefaults, KeyTimeZone}, "unknown time zone %q", d.TimeZone)
		loc = time.UTC
	}
	rs.defaultZone = loc
	if d.QuietHours != nil {
		rs.defaultQH = checkWindow(c, *d.QuietHours, []string{KeyDefaults, KeyQuietHours})
	}
	for ut, td := range d.UserTypes {
		if td.QuietHours != nil {
			rs.typeQH[ut] = checkWindow(c, *td.QuietHours, []string{KeyDefaults, KeyUserType, ut, KeyQuietHours})
		}
	}
	if d.Retry == (channel.RetryPolicy{}) {
		d.Retry = channel.DefaultRetry
	}
	checkRetry(c, d.Retry, []string{KeyDefaults, KeyRetry})
}

func checkWindow(c *specChecker, qh directory.QuietHours, path []string) *window {
	w, err := parseWindow(qh)
	if err != nil {
		var we *directory.QuietHoursError
		if errors.As(err, &we) {
			c.add(we.Msg, extend(path, we.Field)...)
		} else {
			c.add(err.Error(), path...)
		}
		return nil
	}
	return w
}

func checkRetry(c *specChecker, r channel.RetryPolicy, path []string) {
	if r.MaxAttempts < 1 {
		c.addf(extend(path, KeyMaxAttempts), "must be at least 1, got %d", r.MaxAttempts)
	}
	if r.Initial <= 0 {
		c.addf(extend(path, KeyInitial), "must be positive, got %s", r.Initial)
	}
	if r.Max < r.Initial {
		c.addf(extend(path, KeyMax), "must be at least initial (%s), got %s", r.Initial, r.Max)
	}
	if r.Multiplier < 1 {
		c.addf(extend(path, KeyMultiplier), "must be at least 1, got %g", r.Multiplier)
	}
	if r.Jitter < 0 || r.Jitter > 1 {
		c.addf(extend(path, KeyJitter), "must be between 0 and 1, got %g", r.Jitter)
	}
}

func checkChannel(c *specChecker, ch channel.Config) {
	base := []string{KeyChannel, ch.Name}
	if ch.Name == "" {
		c.add("channel name is empty", base...)
	}
	if len(ch.Providers) == 0 {
		c.add("no provider: the channel needs at least one plugin", extend(base, KeyProviders)...)
	}
	names := map[string]bool{}
	for i, p := range ch.Providers {
		pp := extend(base, KeyProviders, strconv.Itoa(i))
		if p.Plugin == "" {
			c.add("plugin is required", extend(pp, KeyPlugin)...)
		}
		if names[p.Name] {
			c.addf(extend(pp, KeyName), "duplicate provider name %q", p.Name)
		}
		names[p.Name] = true
		if p.Checksum != "" {
			if b, err := hex.DecodeString(p.Checksum); err != nil || len(b) != 32 {
				c.add("must be a SHA-256 in hex (64 characters)", extend(pp, KeyChecksum)...)
			}
		}
	}
	for i, ut := range ch.Set.UserTypes {
		if ut == "" {
			c.add("empty user type", extend(base, KeyUserTypes, strconv.Itoa(i))...)
		}
	}
	switch ch.TextFormat {
	case "", channel.TextPlain, channel.TextSlack:
	default:
		c.addf(extend(base, KeyTextFormat), "must be %q or %q, got %q", channel.TextPlain, channel.TextSlack, ch.TextFormat)
	}
	if ch.Set.BestEffort != nil && *ch.Set.BestEffort && ch.Retry.MaxAttempts > 1 {
		c.addf(extend(base, KeyRetry, KeyMaxAttempts), "best-effort channels are not retried (set %s = false to retry)", KeyBestEffort)
	}
	checkRetry(c, ch.Retry, extend(base, KeyRetry))
	if ch.Place {
		if ch.Set.UserTypesSet {
			c.addf(extend(base, KeyUserTypes), "a place channel (%s = true) reaches no person: user types do not apply", KeyPlace)
		}
		if ch.Set.Intrusive != nil && *ch.Set.Intrusive {
			c.addf(extend(base, KeyIntrusive), "a place channel (%s = true) is never held by quiet hours: they are a person's", KeyPlace)
		}
	}
	if ch.Breaker.Cooldown < 0 {
		c.addf(extend(base, KeyBreaker, KeyCooldown), "must not be negative, got %s", ch.Breaker.Cooldown)
	}
}

// setDefaults fills what the spec leaves empty: severity info, quiet hours
// drop, and the retry policy of channels without one (a single attempt for
// best-effort channels). compileDefaults has run.
func (s *Spec) setDefaults() {
	for i := range s.Events {
		ev := &s.Events[i]
		if ev.Severity == "" {
			ev.Severity = SeverityInfo
		}
		if ev.QuietHours == "" {
			ev.QuietHours = QuietDrop
		}
	}
	for i := range s.Channels {
		ch := &s.Channels[i]
		if ch.Retry == (channel.RetryPolicy{}) {
			ch.Retry = s.Defaults.Retry
			if ch.Set.BestEffort != nil && *ch.Set.BestEffort {
				ch.Retry.MaxAttempts = 1
			}
		}
		for j := range ch.Providers {
			if ch.Providers[j].Name == "" {
				ch.Providers[j].Name = ch.Providers[j].Plugin
			}
		}
		slices.SortStableFunc(ch.Providers, func(a, b channel.Provider) int { return a.Priority - b.Priority })
		if ch.TextFormat == "" {
			ch.TextFormat = channel.TextPlain
			for _, p := range ch.Providers {
				if p.Plugin == "slack" {
					ch.TextFormat = channel.TextSlack
				}
			}
		}
	}
}

func (rs *RuleSet) compileEvent(c *specChecker, ev EventSpec) *compiledEvent {
	base := []string{KeyEvent, ev.Type}
	ce := &compiledEvent{
		spec:      ev,
		mandatory: map[string]bool{},
		optional:  map[string]bool{},
		templates: map[string]*compiledTemplate{},
	}
	if ev.Type == "" {
		c.add("event type is empty", base...)
	}
	switch ev.Severity {
	case SeverityInfo, SeverityWarning, SeverityCritical:
	default:
		c.addf(extend(base, KeySeverity), "must be %s, %s or %s, got %q", SeverityInfo, SeverityWarning, SeverityCritical, ev.Severity)
	}
	if len(ev.Audiences) == 0 && len(ev.Posts) == 0 {
		c.add("no audience: the event reaches nobody (give an audience, or post to a place)", extend(base, KeyAudience)...)
	}
	for i, a := range ev.Audiences {
		ce.audiences = append(ce.audiences, compileAudience(c, a, extend(base, KeyAudience, strconv.Itoa(i))))
	}
	checkChannelList := func(key string, list []string, into map[string]bool) {
		for _, ch := range list {
			if into[ch] {
				c.addf(extend(base, key), "channel %q listed twice", ch)
				continue
			}
			into[ch] = true
			if cfg, ok := rs.channels[ch]; !ok {
				c.addf(extend(base, key), "channel %q has no channel block (no plugin provides it)", ch)
			} else if cfg.Place {
				c.addf(extend(base, key), "channel %q is a place channel (%s = true): it reaches a place, not each recipient; "+
					"address it with %s %q { %s = \"<group key>\" } instead", ch, KeyPlace, KeyPost, ch, KeyTo)
			}
		}
	}
	checkChannelList(KeyMandatory, ev.Mandatory, ce.mandatory)
	checkChannelList(KeyOptional, ev.Optional, ce.optional)
	for ch := range ce.mandatory {
		if ce.optional[ch] {
			c.addf(extend(base, KeyOptional), "channel %q is also mandatory", ch)
		}
	}
	rs.compilePosts(c, ce, base)
	uses := func(ch string) bool {
		_, posted := ce.spec.Posts[ch]
		return ce.mandatory[ch] || ce.optional[ch] || posted
	}
	for ch := range ce.mandatory {
		ce.considered = append(ce.considered, ch)
	}
	for ch := range ce.optional {
		if !ce.mandatory[ch] {
			ce.considered = append(ce.considered, ch)
		}
	}
	sort.Strings(ce.considered)
	for _, ch := range sortedKeys(ev.Restrict) {
		p := extend(base, KeyRestrict, ch)
		switch {
		case ce.mandatory[ch]:
			c.addf(p, "channel %q is mandatory; a role restriction would drop it (make it optional)", ch)
		case !ce.optional[ch]:
			c.addf(p, "channel %q is not used by the event", ch)
		}
		if len(ev.Restrict[ch]) == 0 {
			c.add("no roles: the restriction would drop the channel for everyone", extend(p, KeyRoles)...)
		}
	}
	checkQuietMode(c, ev.QuietHours, extend(base, KeyQuietHours))
	for _, ch := range sortedKeys(ev.QuietHoursByChannel) {
		p := extend(base, KeyQuietHoursByChannel, ch)
		if !uses(ch) {
			c.addf(p, "channel %q is not used by the event", ch)
		} else if _, place := ce.spec.Posts[ch]; place {
			c.addf(p, "channel %q posts to a place: quiet hours are a person's and never hold a post", ch)
		}
		checkQuietMode(c, ev.QuietHoursByChannel[ch], p)
	}
	ce.escalations = rs.compileEscalations(c, ev, uses, base)
	for _, ch := range sortedKeys(ev.Templates) {
		p := extend(base, KeyTemplate, ch)
		if !uses(ch) {
			c.addf(p, "channel %q is not used by the event", ch)
		}
		ce.templates[ch] = compileTemplate(c, ev.Templates[ch], p)
	}
	ce.inbox = compileTemplate(c, ev.Inbox, extend(base, KeyInbox))
	ce.digest = compileDigest(c, ce, base)
	ce.throttle = compileThrottle(c, ce, base)
	checkItemsUse(c, ce, base)
	if len(ev.PayloadSchema) > 0 {
		sch, err := compileSchema(ev.Type, ev.PayloadSchema)
		if err != nil {
			c.addf(extend(base, KeyPayloadSchema), "bad JSON Schema: %v", err)
		}
		ce.schema = sch
	}
	return ce
}

// compilePosts checks and compiles the event's post blocks: each names a
// place channel, and its to template must always render a group key.
func (rs *RuleSet) compilePosts(c *specChecker, ce *compiledEvent, base []string) {
	ce.posts = map[string]*template.Template{}
	for _, ch := range sortedKeys(ce.spec.Posts) {
		p := extend(base, KeyPost, ch)
		cfg, ok := rs.channels[ch]
		switch {
		case !ok:
			c.addf(p, "channel %q has no channel block (no plugin provides it)", ch)
		case !cfg.Place:
			c.addf(p, "channel %q is a person's channel: a post needs a channel with %s = true "+
				"(a person's channel goes in %s or %s)", ch, KeyPlace, KeyMandatory, KeyOptional)
		}
		to := ce.spec.Posts[ch].To
		tp := extend(p, KeyTo)
		if strings.TrimSpace(to) == "" {
			c.addf(tp, "%s is required: a template naming the group whose destination gets the post, "+
				"such as \"restaurant:{{ .payload.restaurant_id }}\"", KeyTo)
			continue
		}
		t, err := parseTextTemplate(KeyTo, to)
		if err != nil {
			c.addf(tp, "bad template: %v", err)
			continue
		}
		if mayRenderEmpty(t) {
			c.addf(tp, "%q can render empty (all of its text comes from {{ }}); give it literal text outside "+
				"the braces, such as \"restaurant:{{ .payload.restaurant_id }}\"", to)
			continue
		}
		ce.posts[ch] = t
		ce.postChannels = append(ce.postChannels, ch)
	}
}

// mayRenderEmpty reports whether t can render only spaces: none of its
// top-level text (always written, whatever the data) is more than spaces.
func mayRenderEmpty(t *template.Template) bool {
	if t.Tree == nil || t.Tree.Root == nil {
		return true
	}
	for _, n := range t.Tree.Root.Nodes {
		if tn, ok := n.(*parse.TextNode); ok && strings.TrimSpace(string(tn.Text)) != "" {
			return false
		}
	}
	return true
}

func checkQuietMode(c *specChecker, mode string, path []string) {
	switch mode {
	case QuietDrop, QuietDefer, QuietIgnore:
	default:
		c.addf(path, "must be %s, %s or %s, got %q", QuietDrop, QuietDefer, QuietIgnore, mode)
	}
}

func compileAudience(c *specChecker, a AudienceSpec, path []string) compiledAudience {
	ca := compiledAudience{spec: a, rolePrio: map[string]int{}}
	kinds := 0
	for _, set := range []bool{a.Group != "" || a.GroupsPath != "", a.User != "", a.UserType != "", a.PayloadPath != ""} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		c.addf(path, "set exactly one of %s, %s, %s and %s", KeyGroup, KeyUser, KeyUserType, KeyPayloadPath)
	}
	if len(a.Roles) > 0 && a.Group == "" && a.GroupsPath == "" {
		c.addf(extend(path, KeyRoles), "roles only filter a %s audience", KeyGroup)
	}
	for i, r := range a.Roles {
		if _, dup := ca.rolePrio[r]; dup {
			c.addf(extend(path, KeyRoles), "role %q listed twice", r)
			continue
		}
		ca.rolePrio[r] = i
	}
	var err error
	if a.Group != "" {
		if ca.group, err = parseTextTemplate(KeyGroup, a.Group); err != nil {
			c.addf(extend(path, KeyGroup), "bad template: %v", err)
		}
	}
	if a.User != "" {
		if ca.user, err = parseTextTemplate(KeyUser, a.User); err != nil {
			c.addf(extend(path, KeyUser), "bad template: %v", err)
		}
	}
	if a.GroupsPath != "" {
		ca.groupsPath = strings.Split(a.GroupsPath, ".")
		if slices.Contains(ca.groupsPath, "") {
			c.addf(extend(path, KeyGroupsPath), "bad path %q: empty segment", a.GroupsPath)
		}
	}
	if a.PayloadPath != "" {
		ca.path = strings.Split(a.PayloadPath, ".")
		if slices.Contains(ca.path, "") {
			c.addf(extend(path, KeyPayloadPath), "bad path %q: empty segment", a.PayloadPath)
		}
	}
	return ca
}

func compileTemplate(c *specChecker, ts TemplateSpec, path []string) *compiledTemplate {
	ct := &compiledTemplate{
		base:    compileText(c, ts.TemplateText, path),
		locales: map[string]compiledText{},
	}
	for _, l := range sortedKeys(ts.Locales) {
		lp := extend(path, KeyLocale, l)
		norm := normalizeLocale(l)
		if norm == "" {
			c.add("empty locale", lp...)
			continue
		}
		if _, dup := ct.locales[norm]; dup {
			c.addf(lp, "locale %q given twice", norm)
			continue
		}
		ct.locales[norm] = compileText(c, ts.Locales[l], lp)
	}
	return ct
}

func compileText(c *specChecker, tt TemplateText, path []string) compiledText {
	var out compiledText
	text := func(key, src string) *template.Template {
		if src == "" {
			return nil
		}
		t, err := parseTextTemplate(key, src)
		if err != nil {
			c.addf(extend(path, key), "bad template: %v", err)
			return nil
		}
		return t
	}
	out.subject = text(KeySubject, tt.Subject)
	out.title = text(KeyTitle, tt.Title)
	out.body = text(KeyBody, tt.Body)
	if tt.HTML != "" {
		t, err := parseHTMLTemplate(KeyHTML, tt.HTML)
		if err != nil {
			c.addf(extend(path, KeyHTML), "bad template: %v", err)
		} else {
			out.html = t
		}
	}
	if len(tt.Data) > 0 {
		out.data = map[string]*template.Template{}
		for _, k := range sortedKeys(tt.Data) {
			t, err := parseTextTemplate(k, tt.Data[k])
			if err != nil {
				c.addf(extend(path, KeyData, k), "bad template: %v", err)
				continue
			}
			out.data[k] = t
		}
	}
	return out
}

// parseTextTemplate parses a text template. A field it reads that the data
// lacks (a missing payload key) is an error when it runs, never "<no
// value>".
func parseTextTemplate(name, src string) (*template.Template, error) {
	return template.New(name).Funcs(templateFuncs).Option("missingkey=error").Parse(src)
}

// parseHTMLTemplate is parseTextTemplate for html/template.
func parseHTMLTemplate(name, src string) (*htmltemplate.Template, error) {
	return htmltemplate.New(name).Funcs(templateFuncs).Option("missingkey=error").Parse(src)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// normalizeLocale lower-cases a locale and writes "pt_BR" as "pt-br".
func normalizeLocale(l string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(l), "_", "-"))
}

// Spec returns a copy of the rule set's spec, with defaults applied.
func (rs *RuleSet) Spec() Spec { return cloneSpec(rs.spec) }

// Channels returns the configured channels, sorted by name, each with its
// class, intrusiveness and user types in force (Resolved).
func (rs *RuleSet) Channels() []channel.Config {
	out := make([]channel.Config, len(rs.spec.Channels))
	for i, ch := range rs.spec.Channels {
		out[i] = cloneChannel(rs.channels[ch.Name])
	}
	return out
}

// WithDeclared returns a copy of rs in which each channel's class and user
// types come from what its plugin declared (declared maps a channel name
// to its plugin's declaration; a channel missing from it has none), unless
// the rules set them: the plugin host passes its plugins' Describe answers
// here when it loads or reloads them. rs is unchanged; the copy shares
// everything else with it.
func (rs *RuleSet) WithDeclared(declared map[string]channel.Declared) *RuleSet {
	out := *rs
	out.channels = make(map[string]channel.Config, len(rs.channels))
	for _, ch := range rs.spec.Channels {
		if d, ok := declared[ch.Name]; ok {
			out.channels[ch.Name] = ch.Resolve(&d)
		} else {
			out.channels[ch.Name] = ch.Resolve(nil)
		}
	}
	return &out
}

// Channel returns the named channel's configuration.
func (rs *RuleSet) Channel(name string) (channel.Config, bool) {
	ch, ok := rs.channels[name]
	if !ok {
		return channel.Config{}, false
	}
	return cloneChannel(ch), true
}

// EventTypes returns the event types that have a rule, sorted.
func (rs *RuleSet) EventTypes() []string {
	out := make([]string, len(rs.spec.Events))
	for i, ev := range rs.spec.Events {
		out[i] = ev.Type
	}
	return out
}

// Event returns the rule of one event type.
func (rs *RuleSet) Event(eventType string) (EventSpec, bool) {
	ce, ok := rs.events[eventType]
	if !ok {
		return EventSpec{}, false
	}
	return cloneEvent(ce.spec), true
}

func (rs *RuleSet) event(eventType string) (*compiledEvent, error) {
	ce, ok := rs.events[eventType]
	if !ok {
		return nil, fmt.Errorf("rules: event type %q: %w", eventType, ErrNoRule)
	}
	return ce, nil
}

func cloneSpec(s Spec) Spec {
	out := Spec{Defaults: s.Defaults}
	for _, ch := range s.Channels {
		out.Channels = append(out.Channels, cloneChannel(ch))
	}
	for _, ev := range s.Events {
		out.Events = append(out.Events, cloneEvent(ev))
	}
	if s.Defaults.QuietHours != nil {
		qh := *s.Defaults.QuietHours
		out.Defaults.QuietHours = &qh
	}
	if s.Defaults.UserTypes != nil {
		out.Defaults.UserTypes = map[string]UserTypeDefaults{}
		for k, v := range s.Defaults.UserTypes {
			v.Enabled = slices.Clone(v.Enabled)
			if v.QuietHours != nil {
				qh := *v.QuietHours
				v.QuietHours = &qh
			}
			out.Defaults.UserTypes[k] = v
		}
	}
	return out
}

func cloneChannel(ch channel.Config) channel.Config {
	ch = ch.Clone()
	if ch.Providers != nil {
		ps := make([]channel.Provider, len(ch.Providers))
		for i, p := range ch.Providers {
			if p.Config != nil {
				p.Config, _ = cloneValue(p.Config).(map[string]any)
			}
			ps[i] = p
		}
		ch.Providers = ps
	}
	return ch
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = cloneValue(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = cloneValue(x)
		}
		return out
	}
	return v
}

func cloneEvent(ev EventSpec) EventSpec {
	ev.Audiences = slices.Clone(ev.Audiences)
	for i := range ev.Audiences {
		ev.Audiences[i].Roles = slices.Clone(ev.Audiences[i].Roles)
	}
	ev.Mandatory = slices.Clone(ev.Mandatory)
	ev.Optional = slices.Clone(ev.Optional)
	if ev.Restrict != nil {
		r := make(map[string][]string, len(ev.Restrict))
		for k, v := range ev.Restrict {
			r[k] = slices.Clone(v)
		}
		ev.Restrict = r
	}
	if ev.QuietHoursByChannel != nil {
		m := make(map[string]string, len(ev.QuietHoursByChannel))
		for k, v := range ev.QuietHoursByChannel {
			m[k] = v
		}
		ev.QuietHoursByChannel = m
	}
	if ev.Escalations != nil {
		m := make(map[string]EscalationSpec, len(ev.Escalations))
		for k, v := range ev.Escalations {
			v.Unless = slices.Clone(v.Unless)
			m[k] = v
		}
		ev.Escalations = m
	}
	if ev.Templates != nil {
		m := make(map[string]TemplateSpec, len(ev.Templates))
		for k, v := range ev.Templates {
			m[k] = cloneTemplate(v)
		}
		ev.Templates = m
	}
	ev.Inbox = cloneTemplate(ev.Inbox)
	ev.PayloadSchema = bytes.Clone(ev.PayloadSchema)
	if ev.Posts != nil {
		m := make(map[string]PostSpec, len(ev.Posts))
		for k, v := range ev.Posts {
			m[k] = v
		}
		ev.Posts = m
	}
	if ev.Digest != nil {
		d := *ev.Digest
		d.Channels = slices.Clone(d.Channels)
		ev.Digest = &d
	}
	if ev.Throttle != nil {
		th := *ev.Throttle
		th.Channels = slices.Clone(th.Channels)
		ev.Throttle = &th
	}
	return ev
}

func cloneTemplate(t TemplateSpec) TemplateSpec {
	t.TemplateText = cloneText(t.TemplateText)
	if t.Locales != nil {
		m := make(map[string]TemplateText, len(t.Locales))
		for k, v := range t.Locales {
			m[k] = cloneText(v)
		}
		t.Locales = m
	}
	return t
}

func cloneText(t TemplateText) TemplateText {
	if t.Data != nil {
		m := make(map[string]string, len(t.Data))
		for k, v := range t.Data {
			m[k] = v
		}
		t.Data = m
	}
	return t
}
