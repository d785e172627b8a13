package devpeer

import (
	"encoding/json"
	"net/http"
)

// MaxBodyBytes bounds one HTTP request body.
const MaxBodyBytes = 1 << 20

// newHTTPHandler routes the provider shapes:
//
//	POST /v1/projects/{project}/messages:send          FCM HTTP v1
//	POST /2010-04-01/Accounts/{sid}/Messages.json      Twilio Messages
//	GET  /2010-04-01/Accounts/{sid}.json               Twilio Accounts (credential check)
//	POST /api/{method}                                 Slack Web API
//	POST /services/{team}/{bot}/{secret}               Slack incoming webhooks
//
// Anything else is answered 404 and logged, so a plugin pointed at the
// wrong path shows up in the log rather than as a silent failure.
func newHTTPHandler(log *lineLog) http.Handler {
	mux := http.NewServeMux()
	f := &fcmPeer{log: log}
	mux.HandleFunc("POST /v1/projects/{project}/messages:send", f.send)
	t := &twilioPeer{log: log}
	mux.HandleFunc("POST /2010-04-01/Accounts/{sid}/Messages.json", t.createMessage)
	mux.HandleFunc("GET /2010-04-01/Accounts/{file}", t.fetchAccount)
	s := &slackPeer{log: log}
	mux.HandleFunc("/api/{method}", s.call)
	mux.HandleFunc("POST "+SlackWebhookPath, (&slackHookPeer{log: log}).post)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("herald devpeers: local stand-ins for FCM, Twilio and Slack (development only)\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.printf("http", "404 %s %s: no provider shape at this path", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		mux.ServeHTTP(w, r)
	})
}

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
