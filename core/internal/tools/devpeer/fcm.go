package devpeer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// fcmPeer speaks FCM HTTP v1 messages:send.
type fcmPeer struct {
	log *lineLog
	seq atomic.Uint64
}

// fcmSendRequest is the body of messages:send. Data values must be strings,
// as in FCM, so a non-string value fails decoding with INVALID_ARGUMENT.
type fcmSendRequest struct {
	ValidateOnly bool `json:"validate_only"`
	Message      *struct {
		Name         string            `json:"name"`
		Token        string            `json:"token"`
		Topic        string            `json:"topic"`
		Condition    string            `json:"condition"`
		Data         map[string]string `json:"data"`
		Notification *struct {
			Title string `json:"title"`
			Body  string `json:"body"`
			Image string `json:"image"`
		} `json:"notification"`
		Android json.RawMessage `json:"android"`
		Webpush json.RawMessage `json:"webpush"`
		APNS    json.RawMessage `json:"apns"`
		FCM     json.RawMessage `json:"fcm_options"`
	} `json:"message"`
}

// fcmError answers in the google.rpc.Status shape FCM uses, with the
// FcmError detail the plugins read the error code from.
func fcmError(w http.ResponseWriter, code int, status, errorCode, msg string) {
	body := map[string]any{"code": code, "message": msg, "status": status}
	if errorCode != "" {
		body["details"] = []any{map[string]any{
			"@type":     "type.googleapis.com/google.firebase.fcm.v1.FcmError",
			"errorCode": errorCode,
		}}
	}
	writeJSON(w, code, "application/json; charset=UTF-8", map[string]any{"error": body})
}

func (f *fcmPeer) send(w http.ResponseWriter, r *http.Request) {
	project := r.PathValue("project")
	reject := func(code int, status, errorCode, msg string) {
		f.log.printf("fcm", "rejected project=%s: %d %s: %s", project, code, status, msg)
		fcmError(w, code, status, errorCode, msg)
	}
	auth := r.Header.Get("Authorization")
	scheme, bearer, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(bearer) == "" {
		reject(http.StatusUnauthorized, "UNAUTHENTICATED", "",
			"Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		reject(http.StatusRequestEntityTooLarge, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Request payload size exceeds the limit.")
		return
	}
	var req fcmSendRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		reject(http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Invalid JSON payload received. "+err.Error())
		return
	}
	m := req.Message
	if m == nil {
		reject(http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Request contains an invalid argument: message is required.")
		return
	}
	targets := 0
	for _, t := range []string{m.Token, m.Topic, m.Condition} {
		if t != "" {
			targets++
		}
	}
	if targets != 1 {
		reject(http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Request contains an invalid argument: exactly one of token, topic or condition must be set.")
		return
	}
	for k := range m.Data {
		if k == "from" || k == "notification" || k == "message_type" || strings.HasPrefix(k, "google.") || strings.HasPrefix(k, "gcm.") {
			reject(http.StatusBadRequest, "INVALID_ARGUMENT", "INVALID_ARGUMENT", fmt.Sprintf("Invalid data payload key: %s (reserved)", k))
			return
		}
	}

	target := "token=" + clip(m.Token, 40)
	switch {
	case m.Topic != "":
		target = "topic=" + m.Topic
	case m.Condition != "":
		target = "condition=" + clip(m.Condition, 40)
	}
	title, text := "", ""
	if m.Notification != nil {
		title, text = m.Notification.Title, m.Notification.Body
	}
	// FCM answers a dry run with this placeholder id.
	id := "fake_message_id"
	verb := "validated"
	if !req.ValidateOnly {
		id = fmt.Sprintf("0:%d%%%s", f.seq.Add(1), randomHex(8))
		verb = "accepted"
	}
	name := "projects/" + project + "/messages/" + id
	line := fmt.Sprintf("%s project=%s %s title=%q body=%q data_keys=%d name=%s",
		verb, project, target, clip(title, 80), clip(text, 120), len(m.Data), name)
	if key := m.Data["herald_idempotency_key"]; key != "" {
		line += " idempotency_key=" + key
	}
	if req.ValidateOnly {
		// The push plugin's health check is a dry run (validate_only).
		f.log.healthf("fcm", "validate "+project+" "+target, "%s", line)
	} else {
		f.log.printf("fcm", "%s", line)
	}
	writeJSON(w, http.StatusOK, "application/json; charset=UTF-8", map[string]string{"name": name})
}
