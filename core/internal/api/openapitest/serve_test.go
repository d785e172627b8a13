package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/httpguard"
)

// TestServedDocument: GET /v1/openapi.json answers the document without
// credentials, cacheable, and 304 to a request that holds its ETag.
func TestServedDocument(t *testing.T) {
	t.Parallel()
	// As the API listener serves it: behind the headers of every response.
	srv := httptest.NewServer(httpguard.Headers(api.New(nil, nil, hclog.NewNullLogger()).Handler()))
	defer srv.Close()
	c := Client(t)
	resp, err := c.Get(srv.URL + api.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, api.OpenAPI()) {
		t.Fatalf("GET %s = %s %s, %d bytes", api.OpenAPIPath, resp.Status, resp.Header.Get("Content-Type"), len(body))
	}
	etag := resp.Header.Get("ETag")
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=3600" || etag == "" {
		t.Fatalf("Cache-Control %q, ETag %q", cc, etag)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+api.OpenAPIPath, nil)
	req.Header.Set("If-None-Match", etag)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("GET with If-None-Match: %s, want 304", resp.Status)
	}
	// A write to it is the wrong method: a 405 problem document (checked
	// by c) whose Allow names GET.
	resp, err = c.Post(srv.URL+api.OpenAPIPath, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST %s: %s Allow %q, want 405 GET, HEAD", api.OpenAPIPath, resp.Status, resp.Header.Get("Allow"))
	}
}
