package api

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// OpenAPIPath is where the public listener serves the OpenAPI document.
const OpenAPIPath = "/v1/openapi.json"

// openapiYAML is the OpenAPI 3.1 document of every HTTP endpoint herald
// serves, public and admin. The tests validate every request they make and
// every response they get against it (see core/internal/api/openapitest).
//
//go:embed openapi.yaml
var openapiYAML []byte

// openapiJSON is the document as JSON, with its ETag.
var openapiJSON = sync.OnceValues(func() ([]byte, string) {
	var doc any
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		panic(fmt.Sprintf("api: embedded openapi.yaml: %v", err)) // fixed at build time; a test loads it
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("api: embedded openapi.yaml as JSON: %v", err))
	}
	sum := sha256.Sum256(b)
	return b, `"` + hex.EncodeToString(sum[:8]) + `"`
})

// OpenAPI returns the OpenAPI 3.1 document as JSON.
func OpenAPI() []byte {
	b, _ := openapiJSON()
	return bytes.Clone(b)
}

// serveOpenAPI answers GET /v1/openapi.json: no authentication, cacheable
// (public, ETag, If-None-Match answered 304).
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	b, etag := openapiJSON()
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/json")
	http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(b))
}
