// Package openapitest holds tests to Herald's OpenAPI document
// (core/internal/api/openapi.yaml): a Validator that checks a request and
// the response it got against the document, and an http.RoundTripper that
// runs it on every request a test makes to a daemon it watches, failing
// the test with the operation and the problem.
//
// The rule it enforces: a request the document accepts gets a response the
// document describes (status, content type, body schema); a request the
// document refuses (wrong type, unknown field, missing credential, ...)
// is refused by the server with a documented 4xx problem document; a
// request to no documented operation is answered 404 or 405 with a problem
// document. So code and document cannot drift without a test failing.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/store"
)

// maxBody bounds the bodies the validator reads (larger ones fail).
const maxBody = 32 << 20

// ProblemType is the media type of every error response.
const ProblemType = "application/problem+json"

func init() {
	// Media types herald answers that kin-openapi has no decoder for: their
	// schema is a string, so the plain decoder is the one.
	for _, ct := range []string{"text/html", "text/javascript", "text/css", "application/openmetrics-text", "application/x-ndjson"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

// Validator checks requests and responses against the OpenAPI document.
type Validator struct {
	// Doc is the loaded document.
	Doc    *openapi3.T
	router routers.Router
}

// Load loads and validates the document herald serves at /v1/openapi.json.
func Load() (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("openapi: load: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi: the document is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi: invalid document: %w", err)
	}
	// The document's one server is "/", on either listener: route on the
	// paths alone, whatever host the test server listens on.
	routed := *doc
	routed.Servers = nil
	router, err := legacy.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("openapi: router: %w", err)
	}
	return &Validator{Doc: doc, router: router}, nil
}

// MustLoad is Load for tests: it fails t when the document does not load.
func MustLoad(t testing.TB) *Validator {
	t.Helper()
	v, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Mismatch is a request or response that does not match the document.
type Mismatch struct {
	// Operation is the operationId ("" when no operation matched).
	Operation string
	// Method and Path are the request's.
	Method, Path string
	// Status is the response's status code.
	Status int
	// Problem says what does not match.
	Problem string
}

func (m *Mismatch) Error() string {
	op := m.Operation
	if op == "" {
		op = "no operation"
	}
	return fmt.Sprintf("openapi: %s %s → %d (%s): %s", m.Method, m.Path, m.Status, op, m.Problem)
}

// Check checks req (whose body is reqBody) and the response resp (whose
// body is respBody) against the document; it returns a *Mismatch or nil.
func (v *Validator) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	mis := func(op, format string, args ...any) error {
		return &Mismatch{Operation: op, Method: req.Method, Path: req.URL.Path, Status: resp.StatusCode, Problem: fmt.Sprintf(format, args...)}
	}
	if netHTTPRefusal(resp, respBody) {
		return nil
	}
	if req.Method == http.MethodOptions && req.Header.Get("Origin") != "" && req.Header.Get("Access-Control-Request-Method") != "" {
		// A CORS preflight is answered by package cors on the end-user
		// paths (the document's description), not by an operation: 204
		// with the grant, or a 403 problem granting nothing. Elsewhere it
		// is a 404 or 405 like any request to no operation.
		acao := resp.Header.Get("Access-Control-Allow-Origin")
		switch {
		case resp.StatusCode == http.StatusNoContent && acao != "" && acao == req.Header.Get("Origin"):
			return nil
		case resp.StatusCode == http.StatusForbidden && acao == "" && isProblem(resp, respBody) == nil:
			return nil
		}
	}
	ctx := context.Background()
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	if len(reqBody) > 0 && r.Header.Get("Content-Type") == "" {
		// Herald reads a body as JSON whatever its Content-Type says (see
		// the document's description).
		r.Header.Set("Content-Type", "application/json")
	}
	if r.Method == http.MethodHead {
		r.Method = http.MethodGet
	}
	// Route on the escaped path, as ServeMux does: an escaped "/" (%2F)
	// stays inside its path parameter.
	if r.URL.RawPath != "" {
		u := *r.URL
		u.Path, u.RawPath = r.URL.EscapedPath(), ""
		r.URL = &u
	}
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		// No operation: the server must say so with a problem document.
		if (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) && isProblem(resp, respBody) == nil {
			return nil
		}
		return mis("", "the document has no operation for this request (%v), yet the server answered %d %s",
			err, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	op := route.Operation.OperationID
	opts := &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: false}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if reqErr != nil && (resp.StatusCode < 400 || resp.StatusCode >= 500) {
		return mis(op, "the document refuses the request (%v), yet the server answered %d", oneLine(reqErr), resp.StatusCode)
	}
	if resp.StatusCode >= 400 {
		if err := isProblem(resp, respBody); err != nil && !documentedNonProblem(route.Operation, resp) {
			return mis(op, "an error that is not an RFC 9457 problem document: %v", err)
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || req.Method == http.MethodHead {
		respBody = nil
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if req.Method == http.MethodHead {
		out.Options.ExcludeResponseBody = true
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return mis(op, "the response does not match the document: %v", oneLine(err))
	}
	return nil
}

// netHTTPRefusal reports whether resp is net/http's own refusal of a
// request it could not parse or whose headers are too large (400, 431),
// written before any herald handler runs (see the document's description).
func netHTTPRefusal(resp *http.Response, body []byte) bool {
	return (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge) &&
		resp.Header.Get("Content-Type") == "text/plain; charset=utf-8" && bytes.HasPrefix(body, []byte(strconv.Itoa(resp.StatusCode)+" "))
}

// documentedNonProblem reports whether op documents resp's status with a
// media type other than a problem document (e.g. /readyz's 503).
func documentedNonProblem(op *openapi3.Operation, resp *http.Response) bool {
	r := op.Responses.Status(resp.StatusCode)
	if r == nil || r.Value == nil {
		return false
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt != ProblemType && r.Value.Content.Get(mt) != nil
}

// isProblem checks that resp is an RFC 9457 problem document whose status
// is the response's.
func isProblem(resp *http.Response, body []byte) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != ProblemType {
		return fmt.Errorf("Content-Type is %q, want %s", resp.Header.Get("Content-Type"), ProblemType)
	}
	var p struct {
		Type   *string `json:"type"`
		Title  *string `json:"title"`
		Status *int    `json:"status"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	switch {
	case p.Type == nil || p.Title == nil || p.Status == nil:
		return fmt.Errorf("type, title or status missing in %s", truncate(body))
	case *p.Status != resp.StatusCode:
		return fmt.Errorf("status %d in the body, %d on the response", *p.Status, resp.StatusCode)
	}
	return nil
}

// authenticate checks that the request carries the credential a security
// scheme names (its value is the server's business): a bearer token, with
// the prefix of its kind, or the live ticket.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	if in.SecuritySchemeName == "liveTicket" {
		if r.URL.Query().Get("ticket") == "" {
			return errors.New("no ticket query parameter")
		}
		return nil
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	tok = strings.TrimSpace(tok)
	switch {
	case !ok || tok == "":
		return errors.New("no Authorization: Bearer header")
	case in.SecuritySchemeName == "superadmin" && !strings.HasPrefix(tok, store.AdminKeyPrefix):
		return errors.New("not a superadmin credential")
	case in.SecuritySchemeName == "apiKey" && strings.HasPrefix(tok, store.AdminKeyPrefix):
		return errors.New("a superadmin credential, not an API key")
	}
	return nil
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// Transport returns base (http.DefaultTransport when nil) checking every
// request and response against v with report.
func (v *Validator) Transport(base http.RoundTripper, report func(req *http.Request) func(error)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, base: base, report: report}
}

type transport struct {
	v      *Validator
	base   http.RoundTripper
	report func(req *http.Request) func(error) // nil: do not check req
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	fail := t.report(req)
	if fail == nil {
		return t.base.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		if err != nil {
			req.Body.Close()
			return nil, err
		}
		if len(b) > maxBody {
			// Too large to check: sent whole, unchecked.
			req = req.Clone(req.Context())
			req.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(b), req.Body), req.Body}
			req.GetBody = nil
			return t.base.RoundTrip(req)
		}
		req.Body.Close()
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	var respBody []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body := resp.Body
		respBody, err = io.ReadAll(io.LimitReader(body, maxBody+1))
		switch {
		case err != nil:
			// The body broke off (the daemon stopped, ...): the caller
			// gets what came and the error; nothing to check.
			body.Close()
			resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(respBody), errReader{err}))
			return resp, nil
		case len(respBody) > maxBody:
			// Too large to check here: the caller reads it all.
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(respBody), body), body}
			fail(&Mismatch{Method: req.Method, Path: req.URL.Path, Status: resp.StatusCode,
				Problem: fmt.Sprintf("the response body is larger than %d bytes; the validator cannot check it", maxBody)})
			return resp, nil
		}
		body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
	}
	if err := t.v.Check(req, reqBody, resp, respBody); err != nil {
		fail(err)
	}
	return resp, nil
}

// errReader fails every read with its error.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

var (
	watchMu sync.Mutex
	watched = map[string][]testing.TB{} // host:port → the tests watching it, last one current
	install sync.Once
)

// Watch checks, until t ends, every request that http.DefaultTransport
// (hence http.DefaultClient and clients without a Transport) carries to
// the hosts of baseURLs, and the responses they get, against the document;
// a mismatch fails t naming the operation and the problem. The first call
// wraps http.DefaultTransport; requests to other hosts pass through as
// they were.
func Watch(t testing.TB, baseURLs ...string) {
	t.Helper()
	v := MustLoad(t)
	install.Do(func() {
		http.DefaultTransport = v.Transport(http.DefaultTransport, watcher)
	})
	watchMu.Lock()
	defer watchMu.Unlock()
	for _, u := range baseURLs {
		host := hostOf(u)
		watched[host] = append(watched[host], t)
		t.Cleanup(func() {
			watchMu.Lock()
			defer watchMu.Unlock()
			ts := watched[host]
			for i := len(ts) - 1; i >= 0; i-- {
				if ts[i] == t {
					ts = append(ts[:i], ts[i+1:]...)
					break
				}
			}
			if len(ts) == 0 {
				delete(watched, host)
			} else {
				watched[host] = ts
			}
		})
	}
}

// watcher returns how to report a mismatch of req: to the test that
// watches its host, if it still runs.
func watcher(req *http.Request) func(error) {
	host := req.URL.Host
	watchMu.Lock()
	ts := watched[host]
	watchMu.Unlock()
	if len(ts) == 0 {
		return nil
	}
	t := ts[len(ts)-1]
	return func(err error) {
		watchMu.Lock()
		defer watchMu.Unlock()
		for _, w := range watched[host] {
			if w == t {
				t.Errorf("%v", err)
				return
			}
		}
	}
}

// Client returns an HTTP client whose every request is checked against
// the document, a mismatch failing t.
func Client(t testing.TB) *http.Client {
	t.Helper()
	v := MustLoad(t)
	return &http.Client{Transport: v.Transport(nil, func(*http.Request) func(error) {
		return func(err error) { t.Errorf("%v", err) }
	})}
}

func hostOf(u string) string {
	u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	host, _, _ := strings.Cut(u, "/")
	return host
}
