// Package pushpeer holds protocol peers for the push services Herald's
// PUSH plugin speaks besides FCM: a Web Push service (RFC 8030) that checks
// the VAPID JWT (RFC 8292) and decrypts the aes128gcm payload (RFC 8188,
// RFC 8291) with the subscription's private key, and an APNs provider API
// (HTTP/2, token auth) that checks the JWT and the apns-* headers. The
// plugin's tests run against them, and `herald devpeers` serves them as
// stand-ins that log what a device would show.
//
// Subscriptions of the Web Push peer are derived from their id: the
// browser's key pair and auth secret come from a hash of the id, so a
// directory can list a subscription (DevSubscription) that the peer then
// decrypts without any registration step. They are for tests and demos
// only: anybody who knows the id knows the keys.
package pushpeer

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// WebPushPath is where the Web Push peer takes messages: POST
// <base>/webpush/{id}.
const WebPushPath = "/webpush/"

// MaxBody is the largest request body a peer reads (push services accept
// at least 4096 bytes of payload; anything much larger is refused).
const MaxBody = 64 << 10

// Subscription is a browser's push subscription as a directory lists it.
type Subscription struct {
	// ID names the subscription; the endpoint ends with it.
	ID string
	// Endpoint is the URL the application server posts to.
	Endpoint string
	// P256dh is base64url of the browser's public key (65 bytes).
	P256dh string
	// Auth is base64url of the 16-byte authentication secret.
	Auth string

	priv *ecdh.PrivateKey
	auth []byte
}

// DevSubscription returns the subscription with the given id at
// baseURL (scheme://host[:port]): its keys are derived from the id.
func DevSubscription(baseURL, id string) Subscription {
	priv, auth := subscriptionKeys(id)
	return Subscription{
		ID:       id,
		Endpoint: strings.TrimRight(baseURL, "/") + WebPushPath + id,
		P256dh:   base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()),
		Auth:     base64.RawURLEncoding.EncodeToString(auth),
		priv:     priv,
		auth:     auth,
	}
}

// subscriptionKeys derives the browser's key pair and auth secret of a
// subscription id.
func subscriptionKeys(id string) (*ecdh.PrivateKey, []byte) {
	for i := 0; ; i++ {
		seed := sha256.Sum256([]byte(fmt.Sprintf("herald pushpeer webpush key %d %s", i, id)))
		if priv, err := ecdh.P256().NewPrivateKey(seed[:]); err == nil {
			a := sha256.Sum256([]byte("herald pushpeer webpush auth " + id))
			return priv, a[:16]
		}
	}
}

// WebPushMessage is one message the Web Push peer accepted.
type WebPushMessage struct {
	// Subscription is the id of the subscription it was posted to.
	Subscription string
	// Plaintext is the decrypted payload.
	Plaintext []byte
	// TTL, Urgency and Topic are the request's headers (Urgency "" when
	// absent, which means normal).
	TTL     int
	Urgency string
	Topic   string
	// Subject is the VAPID JWT's sub claim.
	Subject string
	// Location is the message resource the peer answered with.
	Location string
}

// Reply is a scripted answer for a subscription or device token: the peer
// answers Status (with Retry-After when set) instead of accepting, Times
// times (0: every time).
type Reply struct {
	Status     int
	RetryAfter string
	Reason     string
	Times      int
}

// WebPush is a Web Push service. Set VAPIDPublicKey to require that key
// (the application server's, base64url); without it any correctly signed
// key is accepted. Log, when set, gets one line per request.
type WebPush struct {
	VAPIDPublicKey string
	Log            func(line string)

	mu      sync.Mutex
	msgs    []WebPushMessage
	scripts map[string]*Reply
	seq     int
}

// NewWebPush returns a Web Push peer requiring vapidPublicKey ("" for
// any).
func NewWebPush(vapidPublicKey string) *WebPush {
	return &WebPush{VAPIDPublicKey: vapidPublicKey, scripts: map[string]*Reply{}}
}

// Script makes the peer answer posts to subscription id with r.
func (p *WebPush) Script(id string, r Reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scripts[id] = &r
}

// Messages returns the messages accepted so far.
func (p *WebPush) Messages() []WebPushMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]WebPushMessage(nil), p.msgs...)
}

func (p *WebPush) logf(format string, args ...any) {
	if p.Log != nil {
		p.Log(fmt.Sprintf(format, args...))
	}
}

// ServeHTTP takes POST /webpush/{id}.
func (p *WebPush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, WebPushPath)
	if !ok || id == "" || strings.Contains(id, "/") {
		http.NotFound(w, r)
		return
	}
	reject := func(code int, msg string) {
		p.logf("rejected subscription=%s: %d %s", id, code, msg)
		http.Error(w, msg, code)
	}
	if r.Method != http.MethodPost {
		reject(http.StatusMethodNotAllowed, "POST only")
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	sub, err := p.checkVAPID(r.Header.Get("Authorization"), scheme+"://"+r.Host)
	if err != nil {
		reject(http.StatusUnauthorized, "vapid: "+err.Error())
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get("TTL"))
	if err != nil || ttl < 0 {
		reject(http.StatusBadRequest, "TTL header missing or not a non-negative integer")
		return
	}
	urgency := r.Header.Get("Urgency")
	switch urgency {
	case "", "very-low", "low", "normal", "high":
	default:
		reject(http.StatusBadRequest, "Urgency must be very-low, low, normal or high")
		return
	}
	topic := r.Header.Get("Topic")
	if len(topic) > 32 || strings.Trim(topic, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		reject(http.StatusBadRequest, "Topic must be at most 32 base64url characters")
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		reject(http.StatusUnsupportedMediaType, "Content-Encoding must be aes128gcm, got "+strconv.Quote(ce))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil || len(body) > MaxBody {
		reject(http.StatusRequestEntityTooLarge, "payload too large")
		return
	}
	s := DevSubscription("", id)
	plain, err := Decrypt(body, s.priv, s.auth)
	if err != nil {
		reject(http.StatusBadRequest, "decrypt: "+err.Error())
		return
	}
	p.mu.Lock()
	if sc := nextReply(p.scripts, id); sc != nil {
		p.mu.Unlock()
		if sc.RetryAfter != "" {
			w.Header().Set("Retry-After", sc.RetryAfter)
		}
		reject(sc.Status, cmp.Or(sc.Reason, http.StatusText(sc.Status)))
		return
	}
	p.seq++
	loc := fmt.Sprintf("%s://%s/webpush-messages/%d", scheme, r.Host, p.seq)
	p.msgs = append(p.msgs, WebPushMessage{Subscription: id, Plaintext: plain, TTL: ttl, Urgency: urgency, Topic: topic, Subject: sub, Location: loc})
	p.mu.Unlock()
	p.logf("accepted subscription=%s ttl=%d urgency=%s topic=%s sub=%s payload=%s", id, ttl, cmp.Or(urgency, "normal"), topic, sub, plain)
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusCreated)
}

// checkVAPID checks an Authorization header of the vapid scheme (RFC
// 8292): the key k is a P-256 point (the configured one, if any), the JWT
// t is ES256-signed with it, its aud is the push resource's origin, its
// exp is in the future and at most 24 hours away, and sub is a mailto: or
// https: URI. It returns sub.
func (p *WebPush) checkVAPID(header, origin string) (string, error) {
	rest, ok := strings.CutPrefix(header, "vapid ")
	if !ok {
		return "", errors.New("want Authorization: vapid t=<jwt>, k=<key>")
	}
	var t, k string
	for _, part := range strings.Split(rest, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "t":
			t = val
		case "k":
			k = val
		}
	}
	if t == "" || k == "" {
		return "", errors.New("want both t= and k=")
	}
	if p.VAPIDPublicKey != "" && strings.TrimRight(k, "=") != strings.TrimRight(p.VAPIDPublicKey, "=") {
		return "", errors.New("k is not the application server key this subscription was made with")
	}
	kb, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(k, "="))
	if err != nil {
		return "", fmt.Errorf("k: %w", err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), kb)
	if err != nil {
		return "", fmt.Errorf("k: %w", err)
	}
	var claims jwt.RegisteredClaims
	_, err = jwt.ParseWithClaims(t, &claims, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithAudience(origin), jwt.WithExpirationRequired())
	if err != nil {
		return "", fmt.Errorf("jwt: %w", err)
	}
	if claims.ExpiresAt.After(time.Now().Add(24 * time.Hour)) {
		return "", errors.New("jwt: exp is more than 24 hours away")
	}
	if !strings.HasPrefix(claims.Subject, "mailto:") && !strings.HasPrefix(claims.Subject, "https:") {
		return "", fmt.Errorf("jwt: sub %q is not a mailto: or https: URI", claims.Subject)
	}
	return claims.Subject, nil
}

// Decrypt decrypts an aes128gcm body (RFC 8188) sent to a web push
// subscription (RFC 8291): the header's key id is the application
// server's ephemeral public key, the key and nonce are derived from the
// ECDH secret with the subscription's private key and auth secret. It
// returns the plaintext without padding.
func Decrypt(body []byte, priv *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("body shorter than the aes128gcm header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if rs < 18 {
		return nil, fmt.Errorf("record size %d below 18", rs)
	}
	if idlen != 65 || len(body) < 21+idlen {
		return nil, fmt.Errorf("key id of %d bytes, want the 65-byte application server key", idlen)
	}
	asPub, err := ecdh.P256().NewPublicKey(body[21 : 21+idlen])
	if err != nil {
		return nil, fmt.Errorf("key id: %w", err)
	}
	secret, err := priv.ECDH(asPub)
	if err != nil {
		return nil, err
	}
	info := append(append([]byte("WebPush: info\x00"), priv.PublicKey().Bytes()...), asPub.Bytes()...)
	ikm, err := hkdf.Key(sha256.New, secret, auth, string(info), 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	ct := body[21+idlen:]
	if len(ct) == 0 {
		return nil, errors.New("no records")
	}
	var out []byte
	for seq := uint64(0); len(ct) > 0; seq++ {
		n := min(int(rs), len(ct))
		rec := ct[:n]
		ct = ct[n:]
		iv := append([]byte(nil), nonce...)
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		for i := range 8 {
			iv[4+i] ^= s[i]
		}
		plain, err := gcm.Open(nil, iv, rec, nil)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", seq, err)
		}
		// Strip the padding: zeros, then the delimiter (2 on the last
		// record, 1 on the others).
		end := len(plain) - 1
		for end >= 0 && plain[end] == 0 {
			end--
		}
		if end < 0 {
			return nil, fmt.Errorf("record %d: no padding delimiter", seq)
		}
		last := len(ct) == 0
		if (last && plain[end] != 2) || (!last && plain[end] != 1) {
			return nil, fmt.Errorf("record %d: padding delimiter %d", seq, plain[end])
		}
		out = append(out, plain[:end]...)
	}
	return out, nil
}

// VAPIDKeys is an application server's key pair, base64url.
type VAPIDKeys struct {
	Public, Private string
}

// GenerateVAPIDKeys makes a VAPID key pair.
func GenerateVAPIDKeys() (VAPIDKeys, error) {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return VAPIDKeys{}, err
	}
	return VAPIDKeys{Public: base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()),
		Private: base64.RawURLEncoding.EncodeToString(priv.Bytes())}, nil
}

// nextReply takes the scripted reply for key, if any, counting down its
// Times and forgetting it after the last. The caller holds the peer's lock.
func nextReply(scripts map[string]*Reply, key string) *Reply {
	sc := scripts[key]
	if sc != nil && sc.Times > 0 {
		sc.Times--
		if sc.Times == 0 {
			delete(scripts, key)
		}
	}
	return sc
}
