package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sdk/plugintest"
)

const testSecret = "0123456789abcdef-secret"

// receiver is a local HTTP endpoint that checks signatures and records
// what it accepted. Requests to /fail get 503.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  map[string]string // delivery id → idempotency key
	body map[string]Payload
	bad  int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{got: map[string]string{}, body: map[string]Payload{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		if !Verify([]byte(testSecret), b, req.Header.Get(SignatureHeader)) {
			r.mu.Lock()
			r.bad++
			r.mu.Unlock()
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if req.URL.Path == "/fail" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var p Payload
		if err := json.Unmarshal(b, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got[req.Header.Get(DeliveryHeader)] = req.Header.Get(IdempotencyHeader)
		r.body[p.DeliveryID] = p
		r.mu.Unlock()
		w.Header().Set(MessageIDHeader, "msg-"+p.DeliveryID)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) seen(testing.TB) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.got))
	for k, v := range r.got {
		out[k] = v
	}
	return out
}

func TestConformance(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "herald-plugin-webhook")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	rcv := newReceiver(t)
	plugintest.Run(t, bin, plugintest.Features{
		ChannelType: "WEBHOOK",
		Config:      map[string]any{"url": rcv.URL + "/hook", "secret": testSecret},
		BadConfigs: []plugintest.BadConfig{
			{Name: "not http", Config: map[string]any{"url": "ftp://example.test/x"}, Field: "url"},
			{Name: "relative url", Config: map[string]any{"url": "/hook"}, Field: "url"},
			{Name: "short secret", Config: map[string]any{"secret": "short"}, Field: "secret"},
			{Name: "zero timeout", Config: map[string]any{"timeout": "0s"}, Field: "timeout"},
		},
		FailingConfig: map[string]any{"url": rcv.URL + "/fail", "secret": testSecret},
		ProviderSeen:  rcv.seen,
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.bad != 0 {
		t.Errorf("%d requests carried a bad signature", rcv.bad)
	}
}

func TestPostClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		status int
		header map[string]string
		want   sdk.Result
	}{
		"202 sent with message id": {status: 202, header: map[string]string{MessageIDHeader: "m1"}, want: sdk.Sent("d", "m1")},
		"204 sent":                 {status: 204, want: sdk.Sent("d", "")},
		"429 rate limited":         {status: 429, header: map[string]string{"Retry-After": "7"}, want: sdk.RateLimited("d", "webhook: receiver answered 429 Too Many Requests: slow", 7*time.Second)},
		"503 retry":                {status: 503, want: sdk.Retry("d", "webhook: receiver answered 503 Service Unavailable: slow", 0)},
		"500 retry with hint":      {status: 500, header: map[string]string{"Retry-After": "2"}, want: sdk.Retry("d", "webhook: receiver answered 500 Internal Server Error: slow", 2*time.Second)},
		"408 retry":                {status: 408, want: sdk.Retry("d", "webhook: receiver answered 408 Request Timeout: slow", 0)},
		"400 permanent":            {status: 400, want: sdk.Permanent("d", "webhook: receiver answered 400 Bad Request: slow", "http_400")},
		"410 permanent":            {status: 410, want: sdk.Permanent("d", "webhook: receiver answered 410 Gone: slow", "http_410")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				if tc.status >= 300 {
					_, _ = io.WriteString(w, "slow")
				}
			}))
			defer srv.Close()
			w := New()
			cfg, err := sdk.CheckConfig(configSpecs, map[string]any{"url": srv.URL, "secret": testSecret})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Configure(context.Background(), sdk.ConfigureRequest{Config: cfg}); err != nil {
				t.Fatal(err)
			}
			gotResp, err := w.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "d", IdempotencyKey: "k"}}})
			got := gotResp.Results
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]sdk.Result{tc.want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnreachableReceiverIsRetryable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	w := New()
	cfg, err := sdk.CheckConfig(configSpecs, map[string]any{"url": url, "secret": testSecret, "timeout": "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Configure(context.Background(), sdk.ConfigureRequest{Config: cfg}); err != nil {
		t.Fatal(err)
	}
	gotResp, err := w.Send(context.Background(), sdk.SendRequest{Deliveries: []sdk.Delivery{{DeliveryID: "d"}}})
	got := gotResp.Results
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Outcome != sdk.OutcomeRetryable || got[0].Unclassified {
		t.Errorf("results = %+v, want one classified retryable", got)
	}
	if rep, _ := w.Health(context.Background(), sdk.HealthRequest{}); rep.Healthy {
		t.Errorf("health = %+v, want unhealthy", rep)
	}
}

func TestSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"delivery_id":"d"}`)
	tests := map[string]struct {
		secret, body []byte
		header       string
		want         bool
	}{
		"valid":        {secret: []byte("k"), body: body, header: Sign([]byte("k"), body), want: true},
		"other secret": {secret: []byte("k2"), body: body, header: Sign([]byte("k"), body)},
		"tampered":     {secret: []byte("k"), body: []byte(`{"delivery_id":"e"}`), header: Sign([]byte("k"), body)},
		"empty":        {secret: []byte("k"), body: body, header: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := Verify(tc.secret, tc.body, tc.header); got != tc.want {
				t.Errorf("Verify = %v, want %v", got, tc.want)
			}
		})
	}
	// A known vector: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
	const want = "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
	if got := Sign([]byte("key"), []byte("The quick brown fox jumps over the lazy dog")); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		in   string
		want time.Duration
	}{
		"empty":     {in: "", want: 0},
		"seconds":   {in: "30", want: 30 * time.Second},
		"http date": {in: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second},
		"past date": {in: now.Add(-time.Minute).Format(http.TimeFormat), want: 0},
		"garbage":   {in: "soon", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := retryAfter(tc.in, now); got != tc.want {
				t.Errorf("retryAfter(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
