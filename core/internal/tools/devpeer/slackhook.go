package devpeer

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// SlackWebhookPath is the path pattern of the incoming-webhook stand-in:
// Slack's own https://hooks.slack.com/services/T…/B…/<secret>.
const SlackWebhookPath = "/services/{team}/{bot}/{secret}"

// Webhook secrets the stand-in answers with Slack's errors, so that a demo
// can show how Herald classifies them.
const (
	// SlackHookRevoked answers 404 no_service, as a removed or revoked hook.
	SlackHookRevoked = "revoked"
	// SlackHookArchived answers 410 channel_is_archived.
	SlackHookArchived = "archived"
	// SlackHookRateLimited answers 429 with Retry-After: 30.
	SlackHookRateLimited = "ratelimited"
)

// slackMaxBlocks is the most blocks Slack accepts in one message.
const slackMaxBlocks = 50

var (
	slackTeamPart = regexp.MustCompile(`^T[A-Z0-9]{2,}$`)
	slackBotPart  = regexp.MustCompile(`^B[A-Z0-9]{2,}$`)
)

// slackHookPeer speaks Slack's incoming-webhook shape: a POST of a JSON
// message to /services/T…/B…/<secret>, answered with plain text: "ok", or
// an error code (invalid_payload, no_text, invalid_blocks, no_service, …)
// with Slack's status.
type slackHookPeer struct {
	log *lineLog
}

func (s *slackHookPeer) post(w http.ResponseWriter, r *http.Request) {
	team, bot, secret := r.PathValue("team"), r.PathValue("bot"), r.PathValue("secret")
	hook := team + "/" + bot
	fail := func(status int, code, why string) {
		s.log.printf("slack", "webhook rejected hook=%s: %d %s%s", clip(hook, 40), status, code, why)
		slackText(w, status, code)
	}
	if !slackTeamPart.MatchString(team) || !slackBotPart.MatchString(bot) || secret == "" {
		fail(http.StatusNotFound, "no_service", " (want /services/T…/B…/<secret>)")
		return
	}
	switch secret {
	case SlackHookRevoked:
		fail(http.StatusNotFound, "no_service", " (this stand-in's revoked hook)")
		return
	case SlackHookArchived:
		fail(http.StatusGone, "channel_is_archived", " (this stand-in's archived channel)")
		return
	case SlackHookRateLimited:
		w.Header().Set("Retry-After", "30")
		fail(http.StatusTooManyRequests, "rate_limited", " (this stand-in's rate-limited hook; Retry-After: 30)")
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		fail(http.StatusRequestEntityTooLarge, "invalid_payload", " (body too large)")
		return
	}
	var msg map[string]json.RawMessage
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		err = json.Unmarshal(raw, &msg)
	case "application/x-www-form-urlencoded":
		// Slack also takes payload=<json> as a form.
		var form url.Values
		if form, err = url.ParseQuery(string(raw)); err == nil {
			err = json.Unmarshal([]byte(form.Get("payload")), &msg)
		}
	default:
		fail(http.StatusBadRequest, "invalid_payload", " (Content-Type "+mt+", want application/json)")
		return
	}
	if err != nil || msg == nil {
		fail(http.StatusBadRequest, "invalid_payload", " (not a JSON object)")
		return
	}
	var text string
	if t, ok := msg["text"]; ok && json.Unmarshal(t, &text) != nil {
		fail(http.StatusBadRequest, "invalid_payload", " (text is not a string)")
		return
	}
	nblocks := 0
	if b, ok := msg["blocks"]; ok && string(b) != "null" {
		var blocks []map[string]json.RawMessage
		if json.Unmarshal(b, &blocks) != nil {
			fail(http.StatusBadRequest, "invalid_blocks", " (blocks is not an array of objects)")
			return
		}
		if len(blocks) > slackMaxBlocks {
			fail(http.StatusBadRequest, "invalid_blocks", fmt.Sprintf(" (%d blocks, at most %d)", len(blocks), slackMaxBlocks))
			return
		}
		for i, bl := range blocks {
			var typ string
			if json.Unmarshal(bl["type"], &typ) != nil || typ == "" {
				fail(http.StatusBadRequest, "invalid_blocks", fmt.Sprintf(" (block %d has no type)", i))
				return
			}
		}
		nblocks = len(blocks)
	}
	if strings.TrimSpace(text) == "" && nblocks == 0 {
		// What Slack answers an empty message, and so what Herald's health
		// probe expects from a live hook.
		s.log.healthf("slack", "webhook "+hook, "webhook probe hook=%s answered 400 no_text (hook is live)", hook)
		slackText(w, http.StatusBadRequest, "no_text")
		return
	}
	if !utf8.ValidString(text) {
		fail(http.StatusBadRequest, "invalid_payload", " (text is not UTF-8)")
		return
	}
	if utf8.RuneCountInString(text) > 40000 {
		fail(http.StatusBadRequest, "msg_too_long", "")
		return
	}
	line := fmt.Sprintf("webhook posted hook=%s text=%q", hook, clip(text, 120))
	if nblocks > 0 {
		line += fmt.Sprintf(" blocks=%d", nblocks)
	}
	var meta struct {
		EventType    string         `json:"event_type"`
		EventPayload map[string]any `json:"event_payload"`
	}
	if m, ok := msg["metadata"]; ok && json.Unmarshal(m, &meta) == nil && meta.EventType != "" {
		line += " metadata=" + meta.EventType
		if key, ok := meta.EventPayload["idempotency_key"].(string); ok {
			line += " idempotency_key=" + key
		}
	}
	s.log.printf("slack", "%s", line)
	slackText(w, http.StatusOK, "ok")
}

// slackText answers as an incoming webhook does: plain text.
func slackText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text)
}
