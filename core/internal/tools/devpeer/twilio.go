package devpeer

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// twilioPeer speaks the Twilio Programmable Messaging API (2010-04-01).
type twilioPeer struct {
	log *lineLog
	// created remembers the message created for each idempotency token.
	created recent[map[string]any]
}

// HeaderTwilioIdempotency is the header the sms plugin sends with each
// message's idempotency key; a request that repeats a token is answered
// with the message the first request created, and nothing new is created.
const HeaderTwilioIdempotency = "I-Twilio-Idempotency-Token"

// twilioDate is the RFC 2822 form Twilio uses for date fields.
const twilioDate = "Mon, 02 Jan 2006 15:04:05 -0700"

// e164 matches the phone numbers Twilio accepts in To and From.
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

// twilioError answers in Twilio's REST error shape.
func twilioError(w http.ResponseWriter, status, code int, msg string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="Twilio API"`)
	}
	writeJSON(w, status, "application/json", map[string]any{
		"code":      code,
		"message":   msg,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code),
		"status":    status,
	})
}

// authenticate checks HTTP basic auth the way Twilio does: the user is the
// account SID of the URL (or an API key SID, "SK..."), the password is any
// non-empty secret here. It reports the user when it answers nothing.
func (t *twilioPeer) authenticate(w http.ResponseWriter, r *http.Request, peer, sid string) (string, bool) {
	user, pass, ok := r.BasicAuth()
	if !ok || user == "" || pass == "" {
		t.log.printf(peer, "rejected account=%s: 401 20003 Authenticate (no basic auth)", sid)
		twilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return "", false
	}
	if user != sid && !strings.HasPrefix(user, "SK") {
		t.log.printf(peer, "rejected account=%s: 401 20003 Authenticate (basic auth user %s is neither the account nor an API key)", sid, user)
		twilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return "", false
	}
	return user, true
}

// createMessage is POST /2010-04-01/Accounts/{sid}/Messages.json.
func (t *twilioPeer) createMessage(w http.ResponseWriter, r *http.Request) {
	sid := r.PathValue("sid")
	if _, ok := t.authenticate(w, r, "twilio", sid); !ok {
		return
	}
	reject := func(status, code int, msg string) {
		t.log.printf("twilio", "rejected account=%s: %d %d %s", sid, status, code, msg)
		twilioError(w, status, code, msg)
	}
	// Twilio reads parameters from a form body only; any other body reads
	// as no parameters, so the first required one is reported missing.
	f := url.Values{}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		if err := r.ParseForm(); err != nil {
			reject(http.StatusBadRequest, 21604, "A 'To' phone number is required.")
			return
		}
		f = r.PostForm
	}
	to, from, msid := f.Get("To"), f.Get("From"), f.Get("MessagingServiceSid")
	body, media, content := f.Get("Body"), f["MediaUrl"], f.Get("ContentSid")
	switch {
	case to == "":
		reject(http.StatusBadRequest, 21604, "A 'To' phone number is required.")
		return
	case !e164.MatchString(strings.TrimPrefix(to, "whatsapp:")):
		reject(http.StatusBadRequest, 21211, fmt.Sprintf("Invalid 'To' Phone Number: %s", to))
		return
	case from == "" && msid == "":
		reject(http.StatusBadRequest, 21603, "A 'From' or 'MessagingServiceSid' parameter is required to send a message")
		return
	case from != "" && !e164.MatchString(strings.TrimPrefix(from, "whatsapp:")) && !alphanumericSender(from):
		reject(http.StatusBadRequest, 21212, fmt.Sprintf("Invalid From Number (caller ID): %s", from))
		return
	case body == "" && len(media) == 0 && content == "":
		reject(http.StatusBadRequest, 21602, "Message body is required.")
		return
	case len([]rune(body)) > 1600:
		reject(http.StatusBadRequest, 21617, "The concatenated message body exceeds the 1600 character limit.")
		return
	}

	msgSid := "SM" + randomHex(16)
	now := time.Now().UTC().Format(twilioDate)
	status := "queued"
	if from == "" {
		status = "accepted" // a Messaging Service picks the sender later
	}
	var fromField any = from
	if from == "" {
		fromField = nil
	}
	var msidField any = msid
	if msid == "" {
		msidField = nil
	}
	resource := map[string]any{
		"account_sid":           sid,
		"api_version":           "2010-04-01",
		"body":                  body,
		"date_created":          now,
		"date_updated":          now,
		"date_sent":             nil,
		"direction":             "outbound-api",
		"error_code":            nil,
		"error_message":         nil,
		"from":                  fromField,
		"messaging_service_sid": msidField,
		"num_media":             fmt.Sprint(len(media)),
		"num_segments":          fmt.Sprint(smsSegments(body)),
		"price":                 nil,
		"price_unit":            "USD",
		"sid":                   msgSid,
		"status":                status,
		"subresource_uris":      map[string]string{"media": "/2010-04-01/Accounts/" + sid + "/Messages/" + msgSid + "/Media.json"},
		"to":                    to,
		"uri":                   "/2010-04-01/Accounts/" + sid + "/Messages/" + msgSid + ".json",
	}
	token := r.Header.Get(HeaderTwilioIdempotency)
	if token != "" {
		if first, repeat := t.created.getOrPut(sid+"\x00"+token, resource); repeat {
			t.log.printf("twilio", "repeat account=%s to=%s idempotency_token=%s sid=%v (answered with the first request's message; nothing new created)",
				sid, to, token, first["sid"])
			writeJSON(w, http.StatusCreated, "application/json", first)
			return
		}
	}
	line := fmt.Sprintf("accepted account=%s from=%s to=%s body=%q sid=%s", sid, from, to, clip(body, 120), msgSid)
	if token != "" {
		line += " idempotency_token=" + token
	}
	if msid != "" {
		line += " messaging_service=" + msid
	}
	if cb := f.Get("StatusCallback"); cb != "" {
		line += " status_callback=" + cb
	}
	t.log.printf("twilio", "%s", line)
	writeJSON(w, http.StatusCreated, "application/json", resource)
}

// fetchAccount is GET /2010-04-01/Accounts/{sid}.json, which SMS plugins
// commonly call to check their credentials.
func (t *twilioPeer) fetchAccount(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	sid, ok := strings.CutSuffix(file, ".json")
	if !ok || sid == "" {
		t.log.printf("twilio", "404 GET %s", r.URL.Path)
		twilioError(w, http.StatusNotFound, 20404, fmt.Sprintf("The requested resource %s was not found", r.URL.Path))
		return
	}
	if _, ok := t.authenticate(w, r, "twilio", sid); !ok {
		return
	}
	t.log.healthf("twilio", "account", "account fetched account=%s", sid)
	now := time.Now().UTC().Format(twilioDate)
	writeJSON(w, http.StatusOK, "application/json", map[string]any{
		"sid":               sid,
		"owner_account_sid": sid,
		"friendly_name":     "Herald dev peer",
		"status":            "active",
		"type":              "Full",
		"date_created":      now,
		"date_updated":      now,
		"uri":               "/2010-04-01/Accounts/" + sid + ".json",
	})
}

// alphanumericSender matches the alphanumeric sender IDs Twilio allows in
// From: up to 11 characters, letters, digits and spaces, at least one letter.
func alphanumericSender(s string) bool {
	if len(s) == 0 || len(s) > 11 {
		return false
	}
	letter := false
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			letter = true
		case c >= '0' && c <= '9', c == ' ':
		default:
			return false
		}
	}
	return letter
}

// smsSegments estimates how many SMS segments a body needs: 160/153
// characters in GSM-7 (approximated as ASCII), 70/67 otherwise.
func smsSegments(body string) int {
	n := len([]rune(body))
	single, multi := 160, 153
	for _, c := range body {
		if c > 127 {
			single, multi = 70, 67
			break
		}
	}
	if n <= single {
		return 1
	}
	return (n + multi - 1) / multi
}
