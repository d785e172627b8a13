package pushpeer

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// APNsPath is where the APNs peer takes notifications: POST
// <base>/3/device/{token}, over HTTP/2.
const APNsPath = "/3/device/"

// APNsMessage is one notification the APNs peer accepted.
type APNsMessage struct {
	// Token is the device token.
	Token string
	// Header holds the request's apns-* headers.
	Header http.Header
	// Payload is the JSON body.
	Payload map[string]any
	// ID is the apns-id the peer answered with.
	ID string
}

// APNs is an APNs provider API: it checks the provider token (ES256 JWT
// with kid KeyID and iss TeamID, signed by Key, issued less than an hour
// ago), the apns-* headers and the payload, and answers with APNs' own
// status codes and reasons. Log, when set, gets one line per request.
type APNs struct {
	Key    *ecdsa.PublicKey
	KeyID  string
	TeamID string
	// Topic, when set, is the only apns-topic accepted.
	Topic string
	Log   func(line string)
	// AnyKey accepts any signature (herald devpeers, which does not know
	// the operator's key); kid and iss are still checked for presence.
	AnyKey bool

	mu      sync.Mutex
	msgs    []APNsMessage
	scripts map[string]*Reply
	tokens  map[string]bool // provider tokens seen
}

// NewAPNsKey makes a token signing key as Apple issues it: PEM of a
// PKCS #8 EC P-256 private key (the .p8 file), and its public key.
func NewAPNsKey() ([]byte, *ecdsa.PublicKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), &k.PublicKey, nil
}

// Script makes the peer answer notifications to token with r (Reason is
// APNs' reason, such as "Unregistered").
func (p *APNs) Script(token string, r Reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.scripts == nil {
		p.scripts = map[string]*Reply{}
	}
	p.scripts[token] = &r
}

// Messages returns the notifications accepted so far.
func (p *APNs) Messages() []APNsMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]APNsMessage(nil), p.msgs...)
}

// ProviderTokens returns how many distinct provider tokens the peer saw.
func (p *APNs) ProviderTokens() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.tokens)
}

func (p *APNs) logf(format string, args ...any) {
	if p.Log != nil {
		p.Log(fmt.Sprintf(format, args...))
	}
}

var (
	hexToken = regexp.MustCompile(`^[0-9a-fA-F]{64,200}$`)
	uuidRe   = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

var pushTypes = map[string]bool{"alert": true, "background": true, "voip": true, "complication": true,
	"fileprovider": true, "mdm": true, "liveactivity": true, "location": true, "pushtotalk": true}

// ServeHTTP takes POST /3/device/{token}.
func (p *APNs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, APNsPath)
	if !ok {
		http.NotFound(w, r)
		return
	}
	id := r.Header.Get("apns-id")
	reject := func(code int, reason string) {
		p.logf("rejected token=%s: %d %s", token, code, reason)
		body := map[string]any{"reason": reason}
		if code == http.StatusGone {
			body["timestamp"] = time.Now().UnixMilli()
		}
		w.Header().Set("Content-Type", "application/json")
		if id != "" {
			w.Header().Set("apns-id", id)
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}
	switch {
	case r.Method != http.MethodPost:
		reject(http.StatusMethodNotAllowed, "MethodNotAllowed")
		return
	case r.ProtoMajor != 2:
		reject(http.StatusBadRequest, "BadRequest: HTTP/2 required")
		return
	case !hexToken.MatchString(token):
		reject(http.StatusBadRequest, "BadDeviceToken")
		return
	case id != "" && !uuidRe.MatchString(id):
		reject(http.StatusBadRequest, "BadMessageId")
		return
	}
	if reason := p.checkToken(r.Header.Get("Authorization")); reason != "" {
		reject(http.StatusForbidden, reason)
		return
	}
	topic := r.Header.Get("apns-topic")
	switch {
	case topic == "":
		reject(http.StatusBadRequest, "MissingTopic")
		return
	case p.Topic != "" && topic != p.Topic:
		reject(http.StatusBadRequest, "TopicDisallowed")
		return
	}
	pushType := r.Header.Get("apns-push-type")
	if pushType != "" && !pushTypes[pushType] {
		reject(http.StatusBadRequest, "InvalidPushType")
		return
	}
	prio := r.Header.Get("apns-priority")
	if prio != "" && prio != "10" && prio != "5" && prio != "1" {
		reject(http.StatusBadRequest, "BadPriority")
		return
	}
	if pushType == "background" && prio == "10" {
		reject(http.StatusBadRequest, "BadPriority")
		return
	}
	if exp := r.Header.Get("apns-expiration"); exp != "" {
		if _, err := strconv.ParseInt(exp, 10, 64); err != nil {
			reject(http.StatusBadRequest, "BadExpirationDate")
			return
		}
	}
	if len(r.Header.Get("apns-collapse-id")) > 64 {
		reject(http.StatusBadRequest, "BadCollapseId")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	if err != nil || len(body) > 4096 {
		reject(http.StatusRequestEntityTooLarge, "PayloadTooLarge")
		return
	}
	var payload map[string]any
	if err := json.Unmarshal(body, &payload); err != nil {
		reject(http.StatusBadRequest, "BadPayload")
		return
	}
	if _, ok := payload["aps"].(map[string]any); !ok {
		reject(http.StatusBadRequest, "PayloadEmpty")
		return
	}
	p.mu.Lock()
	if sc := nextReply(p.scripts, token); sc != nil {
		p.mu.Unlock()
		if sc.RetryAfter != "" {
			w.Header().Set("Retry-After", sc.RetryAfter)
		}
		reject(sc.Status, cmp.Or(sc.Reason, http.StatusText(sc.Status)))
		return
	}
	if id == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		id = fmt.Sprintf("%X-%X-%X-%X-%X", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
	hdr := http.Header{}
	for k, v := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "apns-") {
			hdr[k] = v
		}
	}
	p.msgs = append(p.msgs, APNsMessage{Token: token, Header: hdr, Payload: payload, ID: id})
	p.mu.Unlock()
	p.logf("accepted token=%s topic=%s push_type=%s priority=%s collapse_id=%s apns_id=%s payload=%s", token, topic,
		pushType, prio, r.Header.Get("apns-collapse-id"), id, body)
	w.Header().Set("apns-id", id)
	w.WriteHeader(http.StatusOK)
}

// checkToken checks a provider token; it returns APNs' reason for
// refusing it, or "".
func (p *APNs) checkToken(header string) string {
	raw, ok := strings.CutPrefix(header, "bearer ")
	if !ok || raw == "" {
		return "MissingProviderToken"
	}
	var claims jwt.MapClaims
	var tok *jwt.Token
	var err error
	if p.AnyKey {
		tok, _, err = jwt.NewParser().ParseUnverified(raw, &claims)
		if err == nil && tok.Method.Alg() != "ES256" {
			err = jwt.ErrTokenSignatureInvalid
		}
	} else {
		tok, err = jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return p.Key, nil },
			jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuedAt())
	}
	if err != nil {
		return "InvalidProviderToken"
	}
	kid, _ := tok.Header["kid"].(string)
	iss, _ := claims["iss"].(string)
	iat, err := claims.GetIssuedAt()
	switch {
	case kid == "" || (!p.AnyKey && kid != p.KeyID):
		return "InvalidProviderToken"
	case iss == "" || (!p.AnyKey && iss != p.TeamID):
		return "InvalidProviderToken"
	case err != nil || iat == nil:
		return "InvalidProviderToken"
	case time.Since(iat.Time) > time.Hour:
		return "ExpiredProviderToken"
	}
	p.mu.Lock()
	if p.tokens == nil {
		p.tokens = map[string]bool{}
	}
	p.tokens[raw] = true
	p.mu.Unlock()
	return ""
}
