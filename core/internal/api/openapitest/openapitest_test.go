package openapitest

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fake is a server that answers each "METHOD path" with a fixed response,
// as a drifted herald would.
type fake map[string]struct {
	status      int
	contentType string
	body        string
}

func (f fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, ok := f[r.Method+" "+r.URL.Path]
	if !ok {
		w.Header().Set("Content-Type", ProblemType)
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"not found","status":404}`)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

const event = `{"event_id":"e1","project_id":"default","type":"T","status":"PENDING","attempts":0,"created_at":"2026-11-22T10:00:00Z","deliveries":[]}`

const badRequest = `{"type":"about:blank","title":"malformed body","status":400,"detail":"x","field":"event_id"}`

// TestValidatorNamesOperationAndProblem drives requests through the
// validating transport against servers that keep to the document and
// servers that drift, hostile requests among them.
func TestValidatorNamesOperationAndProblem(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		srv          fake
		method, path string
		auth, body   string
		want         string // "" : no mismatch; else a part of the one mismatch
	}{
		"event accepted": {srv: fake{"POST /v1/events": {201, "application/json", event}},
			method: "POST", path: "/v1/events", auth: "Bearer hk_x", body: `{"event_id":"e1","type":"T","payload":{}}`},
		"wrong type refused": {srv: fake{"POST /v1/events": {400, ProblemType, badRequest}},
			method: "POST", path: "/v1/events", auth: "Bearer hk_x", body: `{"event_id":5,"type":"T"}`},
		"wrong type accepted": {srv: fake{"POST /v1/events": {201, "application/json", event}},
			method: "POST", path: "/v1/events", auth: "Bearer hk_x", body: `{"event_id":5,"type":"T"}`,
			want: "(postEvent): the document refuses the request"},
		"unknown field accepted": {srv: fake{"POST /v1/events": {201, "application/json", event}},
			method: "POST", path: "/v1/events", auth: "Bearer hk_x", body: `{"event_id":"e1","type":"T","evil":true}`,
			want: "(postEvent): the document refuses the request"},
		"no credential accepted": {srv: fake{"POST /v1/events": {201, "application/json", event}},
			method: "POST", path: "/v1/events", body: `{"event_id":"e1","type":"T"}`,
			want: "(postEvent): the document refuses the request"},
		"superadmin credential on the tenant API accepted": {srv: fake{"GET /v1/events/e1": {200, "application/json", event}},
			method: "GET", path: "/v1/events/e1", auth: "Bearer hsa_x",
			want: "(getEvent): the document refuses the request"},
		"error in text": {srv: fake{"POST /v1/events": {400, "text/plain; charset=utf-8", "bad event\n"}},
			method: "POST", path: "/v1/events", auth: "Bearer hk_x", body: `{"event_id":"e1","type":"T"}`,
			want: "(postEvent): an error that is not an RFC 9457 problem document"},
		"problem with the wrong status": {srv: fake{"GET /v1/events/e1": {404, ProblemType, `{"type":"about:blank","title":"x","status":400}`}},
			method: "GET", path: "/v1/events/e1", auth: "Bearer hk_x",
			want: "status 400 in the body, 404 on the response"},
		"response missing a required field": {srv: fake{"GET /v1/events/e1": {200, "application/json", `{"event_id":"e1"}`}},
			method: "GET", path: "/v1/events/e1", auth: "Bearer hk_x",
			want: "(getEvent): the response does not match the document"},
		"undocumented status": {srv: fake{"GET /healthz": {202, "application/json", `{"status":"ok"}`}},
			method: "GET", path: "/healthz",
			want: "(getHealthz): the response does not match the document"},
		"undocumented route": {srv: fake{"GET /v1/secret": {200, "application/json", `{}`}},
			method: "GET", path: "/v1/secret",
			want: "GET /v1/secret → 200 (no operation): the document has no operation"},
		"unknown route refused": {srv: fake{},
			method: "DELETE", path: "/v1/events"},
		"documented non-problem error": {srv: fake{"GET /readyz": {503, "application/json", `{"status":"not ready"}`}},
			method: "GET", path: "/readyz"},
		"invalid UTF-8 in a path parameter refused": {srv: fake{"GET /v1/events/\xff": {404, ProblemType, `{"type":"about:blank","title":"event not found","status":404,"field":"event_id"}`}},
			method: "GET", path: "/v1/events/%FF", auth: "Bearer hk_x"},
	}
	v := MustLoad(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.srv)
			defer srv.Close()
			var mu sync.Mutex
			var got []error
			c := &http.Client{Transport: v.Transport(nil, func(*http.Request) func(error) {
				return func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() }
			})}
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// The caller still reads the whole body.
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if a, ok := tc.srv[tc.method+" "+req.URL.Path]; ok && string(b) != a.body {
				t.Errorf("the caller read %q, the server sent %q", b, a.body)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("mismatch reported for a conforming exchange: %v", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Error(), tc.want)):
				t.Errorf("mismatches %v, want one containing %q", got, tc.want)
			case tc.want != "":
				var m *Mismatch
				if !errors.As(got[0], &m) || m.Method != tc.method {
					t.Errorf("%v is not a *Mismatch of %s", got[0], tc.method)
				}
			}
		})
	}
}

// TestDocumentIsOpenAPI31 loads the document as herald serves it.
func TestDocumentIsOpenAPI31(t *testing.T) {
	t.Parallel()
	v := MustLoad(t)
	if v.Doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q", v.Doc.OpenAPI)
	}
	p := v.Doc.Components.Schemas["Problem"]
	if p == nil || !strings.Contains(strings.Join(p.Value.Required, ","), "status") {
		t.Fatalf("no Problem schema with status: %+v", p)
	}
	// Every operation answers its errors (default) as problem documents.
	for path, item := range v.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			d := op.Responses.Default()
			if d == nil || d.Value.Content.Get(ProblemType) == nil {
				t.Errorf("%s %s (%s): no default problem response", method, path, op.OperationID)
			}
			if op.OperationID == "" {
				t.Errorf("%s %s: no operationId", method, path)
			}
		}
	}
}
