package devpeer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// Identities the Slack peer reports for its bot.
const (
	slackTeamID = "T0HERALDDEV"
	slackUserID = "U0HERALDDEV"
	slackBotID  = "B0HERALDDEV"
)

// slackPeer speaks the Slack Web API at /api/{method}.
type slackPeer struct {
	log *lineLog
	seq atomic.Uint64
}

// conversationID matches Slack conversation and user IDs.
var conversationID = regexp.MustCompile(`^[CGDUW][A-Z0-9]{2,}$`)

// slackArgs is a Web API call's arguments, from a form body and query, or
// from a JSON body.
type slackArgs struct {
	form url.Values
	json map[string]any
}

// get returns an argument as a string; JSON arrays and objects come back
// as their JSON text, as they would be sent in a form.
func (a slackArgs) get(name string) string {
	if a.json != nil {
		v, ok := a.json[name]
		if !ok || v == nil {
			return ""
		}
		if s, ok := v.(string); ok {
			return s
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	if vs := a.form[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// slackReply answers a Web API call. Slack answers errors with HTTP 200 and
// {"ok": false, "error": "<code>"}.
func slackReply(w http.ResponseWriter, status int, body map[string]any) {
	writeJSON(w, status, "application/json; charset=utf-8", body)
}

func (s *slackPeer) call(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	fail := func(status int, code string, args ...string) {
		s.log.printf("slack", "rejected method=%s: %s%s", method, code, strings.Join(args, ""))
		slackReply(w, status, map[string]any{"ok": false, "error": code})
	}
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		fail(http.StatusMethodNotAllowed, "invalid_request_method")
		return
	}
	var args slackArgs
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method == http.MethodPost && mt == "application/json" {
		if err := json.NewDecoder(r.Body).Decode(&args.json); err != nil {
			fail(http.StatusOK, "invalid_json", " (", err.Error(), ")")
			return
		}
		if args.json == nil {
			args.json = map[string]any{}
		}
	} else {
		if err := r.ParseForm(); err != nil {
			fail(http.StatusOK, "invalid_form_data")
			return
		}
		args.form = r.Form
	}

	// The token comes as a bearer header or, for form calls, a token
	// argument (what slack-go's chat.postMessage sends).
	token := ""
	if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(cred)
	}
	if token == "" && args.json == nil {
		token = args.get("token")
	}

	switch method {
	case "api.test":
		s.log.healthf("slack", "api.test", "api.test")
		slackReply(w, http.StatusOK, map[string]any{"ok": true, "args": map[string]any{}})
		return
	case "chat.postMessage", "auth.test":
	default:
		fail(http.StatusNotFound, "unknown_method")
		return
	}
	if token == "" {
		fail(http.StatusOK, "not_authed")
		return
	}
	if !strings.HasPrefix(token, "xox") {
		fail(http.StatusOK, "invalid_auth", " (tokens start with xoxb-, xoxp-, ...)")
		return
	}
	switch method {
	case "auth.test":
		s.log.healthf("slack", "auth.test", "auth.test ok team=%s user=%s", slackTeamID, slackUserID)
		slackReply(w, http.StatusOK, map[string]any{
			"ok": true, "url": "http://" + r.Host + "/", "team": "Herald Dev", "user": "herald",
			"team_id": slackTeamID, "user_id": slackUserID, "bot_id": slackBotID, "is_enterprise_install": false,
		})
	case "chat.postMessage":
		s.postMessage(w, args, fail)
	}
}

func (s *slackPeer) postMessage(w http.ResponseWriter, args slackArgs, fail func(int, string, ...string)) {
	channel := args.get("channel")
	text, blocks, attachments := args.get("text"), args.get("blocks"), args.get("attachments")
	if channel == "" {
		fail(http.StatusOK, "channel_not_found", " (no channel)")
		return
	}
	if blocks != "" {
		var v []json.RawMessage
		if json.Unmarshal([]byte(blocks), &v) != nil {
			fail(http.StatusOK, "invalid_blocks")
			return
		}
	}
	if attachments != "" {
		var v []json.RawMessage
		if json.Unmarshal([]byte(attachments), &v) != nil {
			fail(http.StatusOK, "invalid_attachments")
			return
		}
	}
	var meta struct {
		EventType    string         `json:"event_type"`
		EventPayload map[string]any `json:"event_payload"`
	}
	if m := args.get("metadata"); m != "" {
		if json.Unmarshal([]byte(m), &meta) != nil {
			fail(http.StatusOK, "invalid_metadata_format")
			return
		}
		if meta.EventType == "" || meta.EventPayload == nil {
			fail(http.StatusOK, "invalid_metadata_schema", " (metadata needs event_type and event_payload)")
			return
		}
	}
	if strings.TrimSpace(text) == "" && blocks == "" && attachments == "" {
		fail(http.StatusOK, "no_text")
		return
	}
	if len([]rune(text)) > 40000 {
		fail(http.StatusOK, "msg_too_long")
		return
	}
	id := resolveChannel(channel)
	ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), s.seq.Add(1)%1000000)
	line := fmt.Sprintf("posted channel=%s id=%s text=%q ts=%s", channel, id, clip(text, 120), ts)
	if blocks != "" {
		line += " blocks=yes"
	}
	if thread := args.get("thread_ts"); thread != "" {
		line += " thread_ts=" + thread
	}
	if meta.EventType != "" {
		line += " metadata=" + meta.EventType
		if key, ok := meta.EventPayload["idempotency_key"].(string); ok {
			line += " idempotency_key=" + key
		}
	}
	s.log.printf("slack", "%s", line)
	slackReply(w, http.StatusOK, map[string]any{
		"ok":      true,
		"channel": id,
		"ts":      ts,
		"message": map[string]any{
			"type": "message", "subtype": "bot_message", "text": text, "ts": ts,
			"user": slackUserID, "bot_id": slackBotID, "team": slackTeamID,
		},
	})
}

// resolveChannel turns a channel argument into a conversation ID as Slack
// does: IDs stay, "#name" and "name" map to a stable C... ID, user IDs to a
// stable D... (direct message) ID.
func resolveChannel(ch string) string {
	switch {
	case conversationID.MatchString(ch) && ch[0] != 'U' && ch[0] != 'W':
		return ch
	case conversationID.MatchString(ch):
		return "D" + stableID(ch)
	}
	return "C" + stableID(strings.TrimPrefix(ch, "#"))
}

func stableID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return strings.ToUpper(hex.EncodeToString(sum[:5]))
}
