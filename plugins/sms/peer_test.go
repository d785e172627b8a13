package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The account the Twilio peer knows.
const (
	peerSID   = "AC0123456789abcdef0123456789abcdef"
	peerToken = "twilio-test-token"
)

// Numbers the Twilio peer answers with an error.
const (
	numInvalid     = "+15005550001" // 400, code 21211 (invalid To)
	numNotMobile   = "+15005550009" // 400, code 21614 (not a mobile number)
	numRateLimited = "+15005550429" // 429, code 20429, Retry-After: 4
	numServerError = "+15005550500" // 500, no body code
	numUnavailable = "+15005550503" // 503, Retry-After: 2
)

// sentSMS is one message the peer created.
type sentSMS struct {
	SID                 string
	To, From, Body      string
	MessagingServiceSid string
	IdempotencyToken    string
}

// twilioPeer is a local HTTP server speaking the shape of Twilio's Messages
// API: basic auth, form-encoded create, 201 with the message resource, JSON
// error bodies, and I-Twilio-Idempotency-Token de-duplication.
type twilioPeer struct {
	srv *httptest.Server

	mu       sync.Mutex
	messages []sentSMS
	byToken  map[string]string
	posts    int
}

func startTwilioPeer(t *testing.T) *twilioPeer {
	t.Helper()
	p := &twilioPeer{byToken: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2010-04-01/Accounts/{sid}/Messages.json", p.create)
	mux.HandleFunc("GET /2010-04-01/Accounts/{file}", p.account)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *twilioPeer) created() []sentSMS {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sentSMS(nil), p.messages...)
}

func twilioErr(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"code": code, "message": msg, "status": status,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code),
	})
}

func (p *twilioPeer) authorized(w http.ResponseWriter, r *http.Request, sid string) bool {
	user, pass, ok := r.BasicAuth()
	if !ok || user != peerSID || pass != peerToken || sid != peerSID {
		twilioErr(w, http.StatusUnauthorized, 20003, "Authenticate")
		return false
	}
	return true
}

func (p *twilioPeer) account(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(w, r, strings.TrimSuffix(r.PathValue("file"), ".json")) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"sid": peerSID, "status": "active"})
}

func (p *twilioPeer) create(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.posts++
	p.mu.Unlock()
	if !p.authorized(w, r, r.PathValue("sid")) {
		return
	}
	if err := r.ParseForm(); err != nil {
		twilioErr(w, http.StatusBadRequest, 20001, "bad form")
		return
	}
	f := r.PostForm
	switch f.Get("To") {
	case numInvalid:
		twilioErr(w, http.StatusBadRequest, 21211, fmt.Sprintf("The 'To' number %s is not a valid phone number.", numInvalid))
		return
	case numNotMobile:
		twilioErr(w, http.StatusBadRequest, 21614, "'To' number is not a valid mobile number")
		return
	case numRateLimited:
		w.Header().Set("Retry-After", "4")
		twilioErr(w, http.StatusTooManyRequests, 20429, "Too Many Requests")
		return
	case numServerError:
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case numUnavailable:
		w.Header().Set("Retry-After", "2")
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if f.Get("Body") == "" || (f.Get("From") == "") == (f.Get("MessagingServiceSid") == "") {
		twilioErr(w, http.StatusBadRequest, 21602, "Message body is required / exactly one sender")
		return
	}
	key := r.Header.Get(HeaderIdempotency)
	p.mu.Lock()
	sid, dup := p.byToken[key]
	if !dup {
		sid = fmt.Sprintf("SM%032x", len(p.messages)+1)
		if key != "" {
			p.byToken[key] = sid
		}
		p.messages = append(p.messages, sentSMS{
			SID: sid, To: f.Get("To"), From: f.Get("From"), Body: f.Get("Body"),
			MessagingServiceSid: f.Get("MessagingServiceSid"), IdempotencyToken: key,
		})
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"sid": sid, "account_sid": peerSID, "to": f.Get("To"), "from": f.Get("From"),
		"body": f.Get("Body"), "status": "queued", "num_segments": "1",
	})
}
