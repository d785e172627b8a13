package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/plugins/internal/retryafter"
	"github.com/heraldhq/herald/sdk"
)

// APNs limits.
const (
	// MaxAPNsPayload is the largest notification payload APNs takes
	// (VoIP pushes may have 5120 bytes; the plugin keeps to the common
	// limit).
	MaxAPNsPayload = 4096
	// APNsTokenRefresh is how old a provider token gets before the plugin
	// signs a new one: APNs refuses tokens older than one hour and
	// throttles providers that sign new ones more often than every 20
	// minutes.
	APNsTokenRefresh = 50 * time.Minute
)

// apnsTokens signs and caches the ES256 provider tokens of APNs' token
// auth.
type apnsTokens struct {
	key           *ecdsa.PrivateKey
	keyID, teamID string

	mu     sync.Mutex
	tok    string
	issued time.Time
}

// token returns a provider token issued less than APNsTokenRefresh ago,
// signing a new one when needed.
func (a *apnsTokens) token(now time.Time) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != "" && now.Sub(a.issued) < APNsTokenRefresh && !now.Before(a.issued) {
		return a.tok, nil
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": a.teamID, "iat": now.Unix()})
	t.Header["kid"] = a.keyID
	s, err := t.SignedString(a.key)
	if err != nil {
		return "", fmt.Errorf("push: apns: sign provider token: %w", err)
	}
	a.tok, a.issued = s, now
	return s, nil
}

// invalidate drops the cached token after APNs refused it.
func (a *apnsTokens) invalidate(tok string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok == tok {
		a.tok = ""
	}
}

// apnsID is a UUID derived from the idempotency key and the device, sent
// as apns-id: APNs echoes it, and it is the same on every retry.
func apnsID(key, token string) string {
	h := sha256.Sum256([]byte(key + "\x00" + token))
	h[6] = h[6]&0x0f | 0x80 // version 8: custom
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

var apnsPushTypes = map[string]bool{"alert": true, "background": true, "voip": true, "complication": true,
	"fileprovider": true, "mdm": true, "liveactivity": true, "location": true, "pushtotalk": true}

// sendAPNs posts the notification for one device token over HTTP/2.
func (s sender) sendAPNs(ctx context.Context, d sdk.Delivery, dev sdk.Device) tokenOutcome {
	cfg := s.cfg
	data, opts := splitData(d.Content.Data)
	heraldFields(d, data)
	bad := func(key, msg string) tokenOutcome {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: CodeInvalidOption,
			reason: fmt.Sprintf("push: apns: template data %s=%q: %s", key, opts[key], msg)}
	}
	pushType := cfg.APNsPushType
	if v, ok := opts[OptAPNsPushType]; ok {
		if !apnsPushTypes[v] {
			return bad(OptAPNsPushType, "want alert, background, voip, complication, fileprovider, mdm, liveactivity, location or pushtotalk")
		}
		pushType = v
	}
	priority := cfg.APNsPriority
	if v, ok := opts[OptAPNsPriority]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || (n != 10 && n != 5 && n != 1) {
			return bad(OptAPNsPriority, "want 10, 5 or 1")
		}
		priority = n
	}
	if pushType == "background" && priority == 10 {
		priority = 5 // APNs refuses background pushes at priority 10
	}
	topic := cfg.APNsTopic
	if v, ok := opts[OptAPNsTopic]; ok {
		if v == "" || strings.ContainsAny(v, " \t\r\n/") {
			return bad(OptAPNsTopic, "want a bundle id such as com.example.app")
		}
		topic = v
	}
	key := idempotencyKey(d)
	collapse := ""
	if len(key) <= 64 {
		collapse = key
	}
	if v, ok := opts[OptAPNsCollapseID]; ok {
		if v == "" || len(v) > 64 {
			return bad(OptAPNsCollapseID, "want 1 to 64 bytes")
		}
		collapse = v
	}
	var expiration string
	if cfg.APNsExpiration > 0 {
		expiration = strconv.FormatInt(time.Now().Add(cfg.APNsExpiration).Unix(), 10)
	}
	if v, ok := opts[OptAPNsExpiration]; ok {
		dur, err := time.ParseDuration(v)
		switch {
		case v == "0":
			expiration = "0"
		case err == nil && dur >= 0:
			expiration = strconv.FormatInt(time.Now().Add(dur).Unix(), 10)
		default:
			return bad(OptAPNsExpiration, "want a duration from now such as 1h, or 0 (deliver now or never)")
		}
	}

	title := d.Content.Title
	if title == "" {
		title = d.Content.Subject
	}
	aps := map[string]any{}
	if pushType == "background" {
		aps["content-available"] = 1
	} else {
		alert := map[string]string{}
		if title != "" {
			alert["title"] = title
		}
		if d.Content.Body != "" {
			alert["body"] = d.Content.Body
		}
		aps["alert"] = alert
	}
	body := map[string]any{}
	for k, v := range data {
		body[k] = v
	}
	body["aps"] = aps
	buf, err := json.Marshal(body)
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: "encode", reason: "push: apns: encode payload: " + err.Error()}
	}
	if len(buf) > MaxAPNsPayload {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: CodePayloadTooLarge,
			reason: fmt.Sprintf("push: apns: payload of %d bytes, APNs takes at most %d", len(buf), MaxAPNsPayload)}
	}
	if dev.Token == "" || strings.Trim(dev.Token, "0123456789abcdefABCDEF") != "" {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: "BadDeviceToken", reason: "push: apns: the device token is not hex"}
	}
	bearer, err := s.apns.token(time.Now())
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: err.Error()}
	}
	u := strings.TrimRight(cfg.APNsEndpoint, "/") + "/3/device/" + dev.Token
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(buf))
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomePermanent, code: "BadDeviceToken", reason: "push: apns: request: " + err.Error()}
	}
	id := apnsID(key, dev.Token)
	req.Header.Set("Authorization", "bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("apns-id", id)
	req.Header.Set("apns-topic", topic)
	req.Header.Set("apns-push-type", pushType)
	req.Header.Set("apns-priority", strconv.Itoa(priority))
	if collapse != "" {
		req.Header.Set("apns-collapse-id", collapse)
	}
	if expiration != "" {
		req.Header.Set("apns-expiration", expiration)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return tokenOutcome{kind: sdk.OutcomeRetryable, reason: "push: apns: post: " + err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode == http.StatusOK {
		return tokenOutcome{kind: sdk.OutcomeSent, name: cmp.Or(resp.Header.Get("apns-id"), id)}
	}
	var apnsErr struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(raw, &apnsErr)
	code := cmp.Or(apnsErr.Reason, fmt.Sprintf("http_%d", resp.StatusCode))
	if resp.ProtoMajor != 2 {
		code += " (not HTTP/2)"
	}
	reason := fmt.Sprintf("push: apns %s: %s", resp.Status, code)
	switch {
	case resp.StatusCode == http.StatusGone || code == "Unregistered":
		return tokenOutcome{kind: sdk.OutcomePermanent, gone: true, code: sdk.CodeDeviceGone,
			reason: reason + ": the device token is no longer active for the topic"}
	case resp.StatusCode == http.StatusTooManyRequests:
		return tokenOutcome{kind: sdk.OutcomeRateLimited, code: code, reason: reason, retryAfter: retryafter.From(resp.Header, DefaultRateLimitWait)}
	case resp.StatusCode >= 500:
		return tokenOutcome{kind: sdk.OutcomeRetryable, code: code, reason: reason, retryAfter: retryafter.From(resp.Header, 0)}
	case resp.StatusCode == http.StatusForbidden:
		// ExpiredProviderToken, InvalidProviderToken, MissingProviderToken:
		// sign a new token next time; the deliveries wait meanwhile.
		s.apns.invalidate(bearer)
		return tokenOutcome{kind: sdk.OutcomeRetryable, code: code, reason: reason}
	}
	return tokenOutcome{kind: sdk.OutcomePermanent, code: code, reason: reason}
}
