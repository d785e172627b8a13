package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"maps"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
)

// templateFuncs are available in every template.
var templateFuncs = template.FuncMap{
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	"title": func(s string) string {
		r, n := utf8.DecodeRuneInString(s)
		if n == 0 {
			return s
		}
		return string(unicode.ToUpper(r)) + s[n:]
	},
	"trim": strings.TrimSpace,
	"join": func(sep string, v any) string {
		list, ok := v.([]any)
		if !ok {
			return fmt.Sprint(v)
		}
		parts := make([]string, len(list))
		for i, x := range list {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, sep)
	},
	// default returns def when v is missing or empty: {{ default "guest" .payload.name }}.
	"default": func(def, v any) any {
		if v == nil {
			return def
		}
		if s, ok := v.(string); ok && s == "" {
			return def
		}
		return v
	},
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

// decodePayload parses a payload keeping numbers exact (json.Number), so an
// id 12345678901 renders as written.
func decodePayload(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("payload is not valid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("payload is not valid JSON: trailing data")
	}
	return v, nil
}

func eventData(ev Event) map[string]any {
	return map[string]any{
		"id":             ev.EventID,
		"type":           ev.Type,
		"tenant_id":      ev.TenantID,
		"aggregate_type": ev.AggregateType,
		"aggregate_id":   ev.AggregateID,
		"occurred_at":    ev.OccurredAt,
	}
}

// audienceData is what audience templates see: .payload and .event.
func audienceData(ev Event, payload any) map[string]any {
	return map[string]any{"payload": payload, "event": eventData(ev)}
}

// renderKey renders an audience key (missing payload fields are errors).
func renderKey(t *template.Template, data any) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	s := strings.TrimSpace(b.String())
	if s == "" {
		return "", errors.New("rendered empty")
	}
	return s, nil
}

// payloadUserIDs follows path in the payload to a list of user ids
// (strings, numbers, or objects with a user_id field).
func payloadUserIDs(payload any, path []string) ([]string, error) {
	list, err := payloadList(payload, path)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(list))
	for i, x := range list {
		id, err := userIDOf(x)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", strings.Join(path, "."), i, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// payloadList follows path in the payload to a list.
func payloadList(payload any, path []string) ([]any, error) {
	v := payload
	for i, seg := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an object", strings.Join(path[:i], "."))
		}
		if v, ok = m[seg]; !ok {
			return nil, fmt.Errorf("payload has no %s", strings.Join(path[:i+1], "."))
		}
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a list", strings.Join(path, "."))
	}
	return list, nil
}

func userIDOf(x any) (string, error) {
	switch x := x.(type) {
	case string:
		if x != "" {
			return x, nil
		}
	case json.Number:
		return x.String(), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case map[string]any:
		if id, ok := x["user_id"]; ok {
			return userIDOf(id)
		}
	}
	return "", fmt.Errorf("not a user id: %v", x)
}

func recipientData(r directory.Recipient) map[string]any {
	return map[string]any{
		"user_id":    r.UserID,
		"user_type":  r.UserType,
		"email":      r.Email,
		"phone":      r.Phone,
		"locale":     r.Locale,
		"time_zone":  r.TimeZone,
		"attributes": r.Attributes,
	}
}

// Render produces the content of ev for recipient r on channel, or for the
// in-app inbox when channel is "". Templates see .payload, .event,
// .recipient and .channel. The recipient's locale picks a variant ("pt-BR",
// then "pt", then the default text); a channel without a template uses the
// inbox title and body. The inbox's Data is the rendered data block, or the
// payload when the rule gives none.
func (rs *RuleSet) Render(ev Event, r directory.Recipient, channel string) (Rendered, error) {
	return rs.RenderPrepared(PrepareEvent(ev), r, channel)
}

// PreparedEvent is an event whose payload is decoded once, to render it
// for many recipients and channels. It is read-only once made.
type PreparedEvent struct {
	ev      Event
	payload any
	event   map[string]any
	err     error

	mu sync.Mutex
	// cache holds what templates that do not look at the recipient
	// rendered for this event, per template and channel.
	cache map[cacheKey]string
	// slackPayload and slackEvent are payload and event with their
	// strings escaped for Slack, made on first use.
	slackPayload any
	slackEvent   any
}

// escaped returns the payload and event data with their strings escaped
// for Slack.
func (pe *PreparedEvent) escaped() (any, any) {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.slackEvent == nil {
		pe.slackPayload = escapeValues(pe.payload, escapeSlack)
		pe.slackEvent = escapeValues(pe.event, escapeSlack)
	}
	return pe.slackPayload, pe.slackEvent
}

// slackEscaper escapes what Slack's mrkdwn reads as markup (its formatting
// rules: &, < and > become entities), so "<!channel>" or "<https://x|y>"
// in a value is shown as text.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func escapeSlack(s string) string { return slackEscaper.Replace(s) }

// escapeValues returns v with every string in it passed through esc; maps
// and lists are copied, v is left alone.
func escapeValues(v any, esc func(string) string) any {
	switch x := v.(type) {
	case string:
		return esc(x)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = escapeValues(e, esc)
		}
		return m
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = esc(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = escapeValues(e, esc)
		}
		return l
	case []string:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = esc(e)
		}
		return l
	}
	return v
}

type cacheKey struct {
	t       *template.Template
	channel string
}

// PrepareEvent decodes ev's payload for RenderPrepared.
func PrepareEvent(ev Event) *PreparedEvent {
	payload, err := decodePayload(ev.Payload)
	return &PreparedEvent{ev: ev, payload: payload, event: eventData(ev), err: err, cache: map[cacheKey]string{}}
}

// exec renders t, once per event and channel when t reads only the
// payload, the event and the channel.
func (pe *PreparedEvent) exec(t *template.Template, data map[string]any, channel string) (string, error) {
	if t == nil || !recipientFree(t) {
		return execText(t, data)
	}
	k := cacheKey{t, channel}
	pe.mu.Lock()
	s, ok := pe.cache[k]
	pe.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := execText(t, data)
	if err == nil {
		pe.mu.Lock()
		pe.cache[k] = s
		pe.mu.Unlock()
	}
	return s, err
}

// recipientFreeMemo remembers recipientFree per compiled template.
var recipientFreeMemo sync.Map

// recipientFree reports whether t's output cannot depend on the recipient:
// every field it reads starts at .payload, .event or .channel, and it uses
// no variables, no bare dot, no sub-templates. Anything else counts as
// depending on the recipient.
func recipientFree(t *template.Template) bool {
	if v, ok := recipientFreeMemo.Load(t); ok {
		return v.(bool)
	}
	free := t.Tree != nil && len(t.Templates()) <= 1 && nodeRecipientFree(t.Tree.Root)
	recipientFreeMemo.Store(t, free)
	return free
}

func nodeRecipientFree(n parse.Node) bool {
	switch n := n.(type) {
	case nil:
		return true
	case *parse.ListNode:
		if n == nil {
			return true
		}
		for _, c := range n.Nodes {
			if !nodeRecipientFree(c) {
				return false
			}
		}
		return true
	case *parse.ActionNode:
		return nodeRecipientFree(n.Pipe)
	case *parse.PipeNode:
		if n == nil {
			return true
		}
		if len(n.Decl) > 0 {
			return false
		}
		for _, c := range n.Cmds {
			if !nodeRecipientFree(c) {
				return false
			}
		}
		return true
	case *parse.CommandNode:
		for _, a := range n.Args {
			if !nodeRecipientFree(a) {
				return false
			}
		}
		return true
	case *parse.IfNode:
		return nodeRecipientFree(n.Pipe) && nodeRecipientFree(n.List) && nodeRecipientFree(n.ElseList)
	case *parse.FieldNode:
		switch n.Ident[0] {
		case "payload", "event", "channel":
			return true
		}
		return false
	case *parse.TextNode, *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode,
		*parse.IdentifierNode, *parse.CommentNode:
		return true
	}
	// range, with, template, variables, dot, chains and anything newer.
	return false
}

// RenderPrepared is Render for a prepared event. A channel the rule's
// digest collects renders as a digest of this one event.
func (rs *RuleSet) RenderPrepared(pe *PreparedEvent, r directory.Recipient, ch string) (Rendered, error) {
	return rs.render(pe, r, ch, nil)
}

// render is RenderPrepared with the items of a digest (nil: none, or the
// event alone on a digest channel).
func (rs *RuleSet) render(pe *PreparedEvent, r directory.Recipient, ch string, items []any) (Rendered, error) {
	ev := pe.ev
	ce, err := rs.event(ev.Type)
	if err != nil {
		return Rendered{}, err
	}
	if pe.err != nil {
		return Rendered{}, fmt.Errorf("rules: event %s: %w", ev.Type, pe.err)
	}
	data := map[string]any{
		"payload":   pe.payload,
		"event":     pe.event,
		"recipient": recipientData(r),
		"channel":   ch,
	}
	if items == nil && ((ch != "" && (ce.digest != nil && ce.digest.channels[ch] || ce.throttle.folds(ch))) || (ch == "" && ce.perDigest())) {
		items = []any{map[string]any{"payload": pe.payload, "event": pe.event}}
	}
	if items != nil {
		data["items"] = items
	}
	if cc, ok := rs.channels[ch]; ok && cc.TextFormat == channel.TextSlack {
		// Values are escaped, the template's own text is not: a payload
		// cannot mention <!channel> or forge a link, the operator can.
		data["payload"], data["event"] = pe.escaped()
		data["recipient"] = escapeValues(data["recipient"], escapeSlack)
		if items != nil {
			data["items"] = escapeValues(items, escapeSlack)
		}
	}
	locale := normalizeLocale(r.Locale)
	if locale == "" {
		locale = normalizeLocale(rs.spec.Defaults.Locale)
	}
	inbox := ce.inbox.pick(locale)
	var out Rendered
	fail := func(field string, t templateOf, err error) (Rendered, error) {
		return Rendered{}, &RenderError{EventType: ev.Type, Channel: ch, Field: field, RecipientFree: t.recipientFree(), Err: err}
	}
	// A per_digest inbox template may read .items: a channel sent per
	// event renders it (its fallback) as the digest of this one event.
	inboxData := data
	if _, ok := data["items"]; !ok && ce.perDigest() {
		inboxData = maps.Clone(data)
		inboxData["items"] = []any{map[string]any{"payload": data["payload"], "event": data["event"]}}
	}
	if out.Title, err = pe.exec(inbox.title, inboxData, ch); err != nil {
		return fail(KeyTitle, textOf{inbox.title}, err)
	}
	if out.Title == "" {
		out.Title = ev.Type
	}
	if out.Body, err = pe.exec(inbox.body, inboxData, ch); err != nil {
		return fail(KeyBody, textOf{inbox.body}, err)
	}
	if ch == "" {
		var derr *dataError
		if out.Data, derr = execData(inbox.data, data); derr != nil {
			return fail(KeyData+"."+derr.key, textOf{inbox.data[derr.key]}, derr.err)
		}
		switch {
		case out.Data != nil:
		case items != nil && ce.perDigest():
			if out.Data, err = digestData(items); err != nil {
				return Rendered{}, fmt.Errorf("rules: event %s: inbox data: %w", ev.Type, err)
			}
		case len(bytes.TrimSpace(ev.Payload)) > 0:
			out.Data = bytes.Clone(ev.Payload)
		}
		return out, nil
	}
	if _, posted := ce.posts[ch]; !ce.mandatory[ch] && !ce.optional[ch] && !posted {
		return Rendered{}, fmt.Errorf("rules: event %s does not use channel %s", ev.Type, ch)
	}
	out.Subject = out.Title
	ct, ok := ce.templates[ch]
	if !ok {
		return out, nil
	}
	t := ct.pick(locale)
	if t.title != nil {
		if out.Title, err = pe.exec(t.title, data, ch); err != nil {
			return fail(KeyTitle, textOf{t.title}, err)
		}
	}
	if t.subject != nil {
		if out.Subject, err = pe.exec(t.subject, data, ch); err != nil {
			return fail(KeySubject, textOf{t.subject}, err)
		}
	} else if t.title != nil {
		out.Subject = out.Title
	}
	if t.body != nil {
		if out.Body, err = pe.exec(t.body, data, ch); err != nil {
			return fail(KeyBody, textOf{t.body}, err)
		}
	}
	if t.html != nil {
		var b strings.Builder
		if err := t.html.Execute(&b, data); err != nil {
			return fail(KeyHTML, htmlOf{t.html}, err)
		}
		out.HTML = b.String()
	}
	var derr *dataError
	if out.Data, derr = execData(t.data, data); derr != nil {
		return fail(KeyData+"."+derr.key, textOf{t.data[derr.key]}, derr.err)
	}
	return out, nil
}

// pick merges the locale's variant over the default text, field by field.
func (ct *compiledTemplate) pick(locale string) compiledText {
	out := ct.base
	variant, ok := ct.locales[locale]
	if !ok {
		lang, _, _ := strings.Cut(locale, "-")
		variant, ok = ct.locales[lang]
	}
	if !ok {
		return out
	}
	if variant.subject != nil {
		out.subject = variant.subject
	}
	if variant.title != nil {
		out.title = variant.title
	}
	if variant.body != nil {
		out.body = variant.body
	}
	if variant.html != nil {
		out.html = variant.html
	}
	if variant.data != nil {
		merged := make(map[string]*template.Template, len(out.data)+len(variant.data))
		for k, v := range out.data {
			merged[k] = v
		}
		for k, v := range variant.data {
			merged[k] = v
		}
		out.data = merged
	}
	return out
}

func execText(t *template.Template, data any) (string, error) {
	if t == nil {
		return "", nil
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// dataError is a data template that failed, by key.
type dataError struct {
	key string
	err error
}

func execData(ts map[string]*template.Template, data any) (json.RawMessage, *dataError) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(ts))
	for _, k := range sortedKeys(ts) {
		s, err := execText(ts[k], data)
		if err != nil {
			return nil, &dataError{key: k, err: err}
		}
		out[k] = s
	}
	b, _ := json.Marshal(out) // a map of strings always marshals
	return b, nil
}

// RenderError is a template that could not be rendered, e.g. one that reads
// a payload field the event lacks (templates run with missingkey=error).
type RenderError struct {
	// EventType is the event's type.
	EventType string
	// Channel is the channel rendered ("" for the inbox).
	Channel string
	// Field is the template's field: title, subject, body, html or
	// data.<key>.
	Field string
	// RecipientFree says that the template reads only .payload, .event and
	// .channel, so it fails for every recipient of the event alike.
	RecipientFree bool
	// Err is text/template's error, which names the missing key.
	Err error
}

func (e *RenderError) Error() string {
	what := "inbox"
	if e.Channel != "" {
		what = "channel " + e.Channel
	}
	return fmt.Sprintf("rules: event %s: render %s %s: %v", e.EventType, what, e.Field, e.Err)
}

func (e *RenderError) Unwrap() error { return e.Err }

// templateOf is a compiled template, text or HTML.
type templateOf interface{ recipientFree() bool }

type textOf struct{ t *template.Template }

func (t textOf) recipientFree() bool { return t.t != nil && recipientFree(t.t) }

type htmlOf struct{ t *htmltemplate.Template }

func (h htmlOf) recipientFree() bool {
	return h.t.Tree != nil && len(h.t.Templates()) <= 1 && nodeRecipientFree(h.t.Tree.Root)
}

// formatTime is how explain output and reasons print instants.
func formatTime(t time.Time) string { return t.Format(time.RFC3339) }

// DigestData is the data of a per_digest inbox row whose inbox template
// sets none: how many events it stands for and their ids, oldest first.
type DigestData struct {
	Digest struct {
		Count    int      `json:"count"`
		EventIDs []string `json:"event_ids"`
	} `json:"digest"`
}

// digestData is the default data of a per_digest inbox row rendered from
// items (each with .event).
func digestData(items []any) (json.RawMessage, error) {
	var d DigestData
	d.Digest.Count = len(items)
	d.Digest.EventIDs = make([]string, 0, len(items))
	for _, it := range items {
		m, _ := it.(map[string]any)
		ev, _ := m["event"].(map[string]any)
		id, _ := ev["id"].(string)
		d.Digest.EventIDs = append(d.Digest.EventIDs, id)
	}
	return json.Marshal(d)
}
