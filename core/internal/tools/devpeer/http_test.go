package devpeer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

var httpClient = &http.Client{Timeout: 10 * time.Second}

// call sends a request and decodes the JSON answer into a map.
func call(t *testing.T, req *http.Request) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s %s: answer %d is not a JSON object: %q", req.Method, req.URL, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, body
}

func newReq(t *testing.T, method, u, contentType string, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

// --- FCM HTTP v1 ---

func fcmReq(t *testing.T, base, project, bearer string, body any) *http.Request {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req := newReq(t, http.MethodPost, base+"/v1/projects/"+project+"/messages:send", "application/json; charset=UTF-8", string(b))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return req
}

func TestFCMPeerSendsAndValidates(t *testing.T) {
	p, sink := startPeers(t)
	msg := map[string]any{"message": map[string]any{
		"token":        "device-staff1-a",
		"notification": map[string]any{"title": "New reservation", "body": "Ada, 4 people at 20:00"},
		"data":         map[string]any{"herald_idempotency_key": "k-1", "reservation_id": "77"},
		"android":      map[string]any{"collapse_key": "k-1"},
		"apns":         map[string]any{"headers": map[string]any{"apns-collapse-id": "k-1"}},
	}}
	code, _, body := call(t, fcmReq(t, p.HTTPURL(), "herald-demo", "dummy-token", msg))
	if code != http.StatusOK {
		t.Fatalf("send: %d %v", code, body)
	}
	name, _ := body["name"].(string)
	if !strings.HasPrefix(name, "projects/herald-demo/messages/0:") {
		t.Fatalf("name = %q, want projects/herald-demo/messages/0:...", name)
	}
	sink.waitLine(t, "fcm", "accepted", "project=herald-demo", "token=device-staff1-a",
		`title="New reservation"`, `body="Ada, 4 people at 20:00"`, "name="+name, "idempotency_key=k-1")

	// A second message gets a different name.
	code, _, body2 := call(t, fcmReq(t, p.HTTPURL(), "herald-demo", "dummy-token", msg))
	if code != http.StatusOK || body2["name"] == name {
		t.Errorf("second send: %d %v, want a new name", code, body2)
	}

	// validate_only to a topic: the plugin's health check.
	health := map[string]any{"validate_only": true, "message": map[string]any{"topic": "herald-health", "data": map[string]any{"herald_health": "1"}}}
	code, _, body = call(t, fcmReq(t, p.HTTPURL(), "herald-demo", "dummy-token", health))
	if code != http.StatusOK || body["name"] != "projects/herald-demo/messages/fake_message_id" {
		t.Errorf("validate_only: %d %v", code, body)
	}
	sink.waitLine(t, "fcm", "validated", "topic=herald-health")
}

func TestFCMPeerErrors(t *testing.T) {
	p, sink := startPeers(t)
	ok := map[string]any{"message": map[string]any{"token": "t"}}
	cases := []struct {
		name      string
		bearer    string
		body      any
		code      int
		status    string
		errorCode string
	}{
		{"no bearer", "", ok, 401, "UNAUTHENTICATED", ""},
		{"no message", "x", map[string]any{}, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"no target", "x", map[string]any{"message": map[string]any{"data": map[string]any{"a": "b"}}}, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"two targets", "x", map[string]any{"message": map[string]any{"token": "t", "topic": "news"}}, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"non-string data", "x", map[string]any{"message": map[string]any{"token": "t", "data": map[string]any{"pax": 4}}}, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"unknown field", "x", map[string]any{"message": map[string]any{"token": "t", "priority": "high"}}, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
		{"reserved data key", "x", map[string]any{"message": map[string]any{"token": "t", "data": map[string]any{"from": "me"}}}, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := call(t, fcmReq(t, p.HTTPURL(), "herald-demo", tc.bearer, tc.body))
			if code != tc.code {
				t.Fatalf("code %d, want %d: %v", code, tc.code, body)
			}
			e, _ := body["error"].(map[string]any)
			if e == nil || e["status"] != tc.status || e["code"] != float64(tc.code) || e["message"] == "" {
				t.Fatalf("error body %v, want status %s", body, tc.status)
			}
			if tc.errorCode != "" {
				det, _ := e["details"].([]any)
				if len(det) != 1 || det[0].(map[string]any)["errorCode"] != tc.errorCode ||
					det[0].(map[string]any)["@type"] != "type.googleapis.com/google.firebase.fcm.v1.FcmError" {
					t.Fatalf("details %v, want FcmError %s", det, tc.errorCode)
				}
			}
		})
	}
	if n := countLines(sink, "fcm", "rejected"); n != len(cases) {
		t.Errorf("%d rejected fcm lines, want %d:\n%s", n, len(cases), strings.Join(sink.lines(), "\n"))
	}
	if n := countLines(sink, "fcm", "accepted"); n != 0 {
		t.Errorf("%d accepted fcm lines, want 0", n)
	}
}

// --- Twilio ---

func twilioReq(t *testing.T, base, sid, user, pass string, form url.Values) *http.Request {
	t.Helper()
	req := newReq(t, http.MethodPost, base+"/2010-04-01/Accounts/"+sid+"/Messages.json", "application/x-www-form-urlencoded", form.Encode())
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	return req
}

func TestTwilioPeerCreatesMessages(t *testing.T) {
	p, sink := startPeers(t)
	const sid = "ACdemo00000000000000000000000000"
	form := url.Values{"To": {"+15005550101"}, "From": {"+15005550006"}, "Body": {"Reservation: Ada, 4 at 20:00"},
		"StatusCallback": {"http://127.0.0.1:8080/hooks/twilio"}}
	code, _, body := call(t, twilioReq(t, p.HTTPURL(), sid, sid, "dummy-auth-token", form))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	msgSid, _ := body["sid"].(string)
	if !regexp.MustCompile(`^SM[0-9a-f]{32}$`).MatchString(msgSid) {
		t.Fatalf("sid = %q, want SM + 32 hex", msgSid)
	}
	for k, want := range map[string]any{"account_sid": sid, "to": "+15005550101", "from": "+15005550006",
		"status": "queued", "direction": "outbound-api", "api_version": "2010-04-01", "num_segments": "1",
		"uri": "/2010-04-01/Accounts/" + sid + "/Messages/" + msgSid + ".json"} {
		if body[k] != want {
			t.Errorf("%s = %v, want %v", k, body[k], want)
		}
	}
	if _, err := time.Parse(twilioDate, body["date_created"].(string)); err != nil {
		t.Errorf("date_created: %v", err)
	}
	sink.waitLine(t, "twilio", "accepted", "account="+sid, "from=+15005550006", "to=+15005550101",
		`body="Reservation: Ada, 4 at 20:00"`, "sid="+msgSid, "status_callback=http://127.0.0.1:8080/hooks/twilio")

	// An API key as the user, a Messaging Service instead of From.
	form = url.Values{"To": {"+393331234567"}, "MessagingServiceSid": {"MGdemo"}, "Body": {"ciao"}}
	code, _, body = call(t, twilioReq(t, p.HTTPURL(), sid, "SKdemo", "secret", form))
	if code != http.StatusCreated || body["status"] != "accepted" || body["from"] != nil {
		t.Errorf("messaging service: %d %v", code, body)
	}
	sink.waitLine(t, "twilio", "to=+393331234567", "messaging_service=MGdemo")

	// The credential check some plugins run.
	req := newReq(t, http.MethodGet, p.HTTPURL()+"/2010-04-01/Accounts/"+sid+".json", "", "")
	req.SetBasicAuth(sid, "dummy-auth-token")
	code, _, body = call(t, req)
	if code != http.StatusOK || body["sid"] != sid || body["status"] != "active" {
		t.Errorf("fetch account: %d %v", code, body)
	}
}

func TestTwilioPeerErrors(t *testing.T) {
	p, sink := startPeers(t)
	const sid = "ACdemo"
	good := url.Values{"To": {"+15005550101"}, "From": {"+15005550006"}, "Body": {"hi"}}
	without := func(k string) url.Values {
		f := url.Values{}
		for kk, v := range good {
			if kk != k {
				f[kk] = v
			}
		}
		return f
	}
	with := func(k, v string) url.Values {
		f := without(k)
		f.Set(k, v)
		return f
	}
	cases := []struct {
		name       string
		user, pass string
		form       url.Values
		status     int
		code       float64
	}{
		{"no auth", "", "", good, 401, 20003},
		{"other account", "ACother", "tok", good, 401, 20003},
		{"empty password", sid, "", good, 401, 20003},
		{"no To", sid, "tok", without("To"), 400, 21604},
		{"bad To", sid, "tok", with("To", "0039 333"), 400, 21211},
		{"no From", sid, "tok", without("From"), 400, 21603},
		{"bad From", sid, "tok", with("From", "not/a/number!"), 400, 21212},
		{"no Body", sid, "tok", without("Body"), 400, 21602},
		{"long Body", sid, "tok", with("Body", strings.Repeat("x", 1601)), 400, 21617},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := call(t, twilioReq(t, p.HTTPURL(), sid, tc.user, tc.pass, tc.form))
			if status != tc.status || body["code"] != tc.code || body["status"] != float64(tc.status) ||
				body["message"] == "" || body["more_info"] != fmt.Sprintf("https://www.twilio.com/docs/errors/%d", int(tc.code)) {
				t.Fatalf("answer %d %v, want %d code %v", status, body, tc.status, tc.code)
			}
			if status == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}
	if n := countLines(sink, "twilio", "rejected"); n != len(cases) {
		t.Errorf("%d rejected twilio lines, want %d:\n%s", n, len(cases), strings.Join(sink.lines(), "\n"))
	}
}

// --- Slack Web API ---

func TestSlackPeerWithSlackGo(t *testing.T) {
	p, sink := startPeers(t)
	api := slack.New("xoxb-demo-token", slack.OptionAPIURL(p.HTTPURL()+"/api/"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	at, err := api.AuthTestContext(ctx)
	if err != nil {
		t.Fatalf("auth.test: %v", err)
	}
	if at.TeamID != slackTeamID || at.UserID != slackUserID || at.BotID != slackBotID {
		t.Errorf("auth.test = %+v", at)
	}
	sink.waitLine(t, "slack", "auth.test ok")

	ch, ts, err := api.PostMessageContext(ctx, "#ops", slack.MsgOptionText(":briefcase: assignment 9 for Acme", false))
	if err != nil {
		t.Fatalf("chat.postMessage: %v", err)
	}
	if !regexp.MustCompile(`^C[0-9A-F]{10}$`).MatchString(ch) || !regexp.MustCompile(`^\d+\.\d{6}$`).MatchString(ts) {
		t.Fatalf("channel %q ts %q", ch, ts)
	}
	sink.waitLine(t, "slack", "posted", "channel=#ops", "id="+ch, `text=":briefcase: assignment 9 for Acme"`, "ts="+ts)

	// The same name maps to the same ID; an ID is kept.
	ch2, ts2, err := api.PostMessageContext(ctx, "ops", slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "*hi*", false, false), nil, nil)))
	if err != nil || ch2 != ch || ts2 == ts {
		t.Errorf("second post: %q %q %v", ch2, ts2, err)
	}
	ch3, _, err := api.PostMessageContext(ctx, "C0123ABCD", slack.MsgOptionText("x", false))
	if err != nil || ch3 != "C0123ABCD" {
		t.Errorf("post to an ID: %q %v", ch3, err)
	}

	// Errors come back as slack-go errors naming Slack's code.
	if _, _, err := api.PostMessageContext(ctx, "#ops"); err == nil || err.Error() != "no_text" {
		t.Errorf("post without text: err %v, want no_text", err)
	}
	if _, _, err := api.PostMessageContext(ctx, "", slack.MsgOptionText("x", false)); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("post without channel: err %v, want channel_not_found", err)
	}
	bad := slack.New("not-a-slack-token", slack.OptionAPIURL(p.HTTPURL()+"/api/"))
	if _, _, err := bad.PostMessageContext(ctx, "#ops", slack.MsgOptionText("x", false)); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("post with a bad token: err %v, want invalid_auth", err)
	}
	sink.waitLine(t, "slack", "rejected", "method=chat.postMessage", "invalid_auth")
}

func TestSlackPeerJSONAndErrors(t *testing.T) {
	p, sink := startPeers(t)
	base := p.HTTPURL() + "/api/"

	body, _ := json.Marshal(map[string]any{"channel": "U0AGENT1", "text": "hello", "thread_ts": "1.000001"})
	req := newReq(t, http.MethodPost, base+"chat.postMessage", "application/json; charset=utf-8", string(body))
	req.Header.Set("Authorization", "Bearer xoxb-json")
	code, _, resp := call(t, req)
	if code != 200 || resp["ok"] != true || !strings.HasPrefix(resp["channel"].(string), "D") {
		t.Fatalf("json post: %d %v", code, resp)
	}
	msg, _ := resp["message"].(map[string]any)
	if msg["text"] != "hello" || msg["ts"] != resp["ts"] {
		t.Errorf("message %v", msg)
	}
	sink.waitLine(t, "slack", "posted", "channel=U0AGENT1", "thread_ts=1.000001")

	cases := []struct {
		name string
		req  *http.Request
		code int
		err  string
	}{
		{"no token", newReq(t, http.MethodPost, base+"chat.postMessage", "application/x-www-form-urlencoded", "channel=%23ops&text=hi"), 200, "not_authed"},
		// A token in a JSON body does not count: JSON calls need the header.
		{"json token in body", newReq(t, http.MethodPost, base+"chat.postMessage", "application/json", `{"token":"xoxb-1","channel":"#ops","text":"hi"}`), 200, "not_authed"},
		{"bad blocks", newReq(t, http.MethodPost, base+"chat.postMessage", "application/x-www-form-urlencoded", "token=xoxb-1&channel=%23ops&blocks=%7Bnope"), 200, "invalid_blocks"},
		{"bad json", newReq(t, http.MethodPost, base+"chat.postMessage", "application/json", `{"channel":`), 200, "invalid_json"},
		{"unknown method", newReq(t, http.MethodPost, base+"chat.teleport", "application/x-www-form-urlencoded", "token=xoxb-1"), 404, "unknown_method"},
		{"wrong verb", newReq(t, http.MethodDelete, base+"chat.postMessage", "", ""), 405, "invalid_request_method"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, resp := call(t, tc.req)
			if code != tc.code || resp["ok"] != false || resp["error"] != tc.err {
				t.Fatalf("answer %d %v, want %d %s", code, resp, tc.code, tc.err)
			}
		})
	}
	if n := countLines(sink, "slack", "rejected"); n != len(cases) {
		t.Errorf("%d rejected slack lines, want %d:\n%s", n, len(cases), strings.Join(sink.lines(), "\n"))
	}
}

func TestUnknownPathIsLogged(t *testing.T) {
	p, sink := startPeers(t)
	resp, err := httpClient.Post(p.HTTPURL()+"/v2/send", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d, want 404", resp.StatusCode)
	}
	sink.waitLine(t, "http", "404 POST /v2/send")
}

func TestTwilioPeerHonoursIdempotencyToken(t *testing.T) {
	p, sink := startPeers(t)
	const sid = "AC0123456789abcdef0123456789abcdef"
	form := url.Values{"To": {"+15005550101"}, "From": {"+15005550006"}, "Body": {"once"}}
	send := func(token string) map[string]any {
		req := twilioReq(t, p.HTTPURL(), sid, sid, "tok", form)
		req.Header.Set(HeaderTwilioIdempotency, token)
		code, _, body := call(t, req)
		if code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, body)
		}
		return body
	}
	first := send("delivery-1")
	again := send("delivery-1")
	other := send("delivery-2")
	if again["sid"] != first["sid"] {
		t.Errorf("repeated token got sid %v, want the first message's %v", again["sid"], first["sid"])
	}
	if other["sid"] == first["sid"] {
		t.Errorf("a new token reused sid %v", first["sid"])
	}
	sink.waitLine(t, "twilio", "repeat", "idempotency_token=delivery-1", fmt.Sprintf("sid=%v", first["sid"]))
	sink.waitLine(t, "twilio", "accepted", "idempotency_token=delivery-2")
	if n := countLines(sink, "twilio", "accepted"); n != 2 {
		t.Errorf("%d accepted twilio lines, want 2 (the repeat creates nothing)", n)
	}
}

func TestSlackPeerMetadataAndUserTargets(t *testing.T) {
	p, sink := startPeers(t)
	api := slack.New("xoxb-demo-token", slack.OptionAPIURL(p.HTTPURL()+"/api/"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// What the slack plugin sends: text plus Herald's ids in the metadata.
	meta := slack.SlackMetadata{EventType: "herald_notification", EventPayload: map[string]any{"idempotency_key": "k-9", "delivery_id": "d-9"}}
	ch, _, err := api.PostMessageContext(ctx, "W0ENTERPRISE", slack.MsgOptionText("*New assignment*\nAssignment 9", false), slack.MsgOptionMetadata(meta))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	if !strings.HasPrefix(ch, "D") {
		t.Errorf("a user target answered channel %q, want a D... direct message id", ch)
	}
	sink.waitLine(t, "slack", "posted", "channel=W0ENTERPRISE", "metadata=herald_notification", "idempotency_key=k-9")

	form := url.Values{"token": {"xoxb-1"}, "channel": {"#ops"}, "text": {"x"}, "metadata": {`{"event_type":"e"}`}}
	code, _, resp := call(t, newReq(t, http.MethodPost, p.HTTPURL()+"/api/chat.postMessage", "application/x-www-form-urlencoded", form.Encode()))
	if code != 200 || resp["error"] != "invalid_metadata_schema" {
		t.Errorf("metadata without payload: %d %v", code, resp)
	}
	form.Set("metadata", "{")
	code, _, resp = call(t, newReq(t, http.MethodPost, p.HTTPURL()+"/api/chat.postMessage", "application/x-www-form-urlencoded", form.Encode()))
	if code != 200 || resp["error"] != "invalid_metadata_format" {
		t.Errorf("broken metadata: %d %v", code, resp)
	}
}

func TestTwilioPeerReadsOnlyFormBodies(t *testing.T) {
	p, _ := startPeers(t)
	req := newReq(t, http.MethodPost, p.HTTPURL()+"/2010-04-01/Accounts/ACdemo/Messages.json", "application/json",
		`{"To":"+15005550101","From":"+15005550006","Body":"hi"}`)
	req.SetBasicAuth("ACdemo", "tok")
	code, _, body := call(t, req)
	if code != http.StatusBadRequest || body["code"] != float64(21604) {
		t.Errorf("JSON body: %d %v, want 400 code 21604 (Twilio reads form parameters only)", code, body)
	}
}

// TestHealthChecksAreLoggedOncePerChange checks that the credential checks
// plugins repeat every few seconds print one line, not one per check, and
// that a passing check after a rejection prints again.
func TestHealthChecksAreLoggedOncePerChange(t *testing.T) {
	p, sink := startPeers(t)
	const sid = "ACdemo00000000000000000000000000"
	fetch := func(auth bool) {
		t.Helper()
		req := newReq(t, http.MethodGet, p.HTTPURL()+"/2010-04-01/Accounts/"+sid+".json", "", "")
		if auth {
			req.SetBasicAuth(sid, "dummy-auth-token")
		}
		call(t, req)
	}
	count := func(part string) int {
		n := 0
		for _, l := range sink.lines() {
			if strings.Contains(l, part) {
				n++
			}
		}
		return n
	}
	for range 3 {
		fetch(true)
	}
	if n := count("account fetched"); n != 1 {
		t.Fatalf("%d 'account fetched' lines after 3 checks, want 1:\n%s", n, strings.Join(sink.lines(), "\n"))
	}
	fetch(false)
	sink.waitLine(t, "twilio", "rejected")
	fetch(true)
	if n := count("account fetched"); n != 2 {
		t.Fatalf("%d 'account fetched' lines after a rejection and a pass, want 2:\n%s", n, strings.Join(sink.lines(), "\n"))
	}
}
