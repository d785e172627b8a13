package api

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Query parses r's query string strictly: a malformed percent-escape or a
// ';' separator is an error naming the parameter (url.URL.Query would drop
// the pair and answer as if the parameter were absent), as is a parameter
// not in allowed. When it fails it has answered w (400) and returns false.
func Query(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	return query(w, r, true, allowed)
}

// QueryAny is Query for a handler that checks the parameter names itself:
// every name is let through, malformed encoding is still refused.
func QueryAny(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	return query(w, r, false, nil)
}

func query(w http.ResponseWriter, r *http.Request, check bool, allowed []string) (url.Values, bool) {
	q, field, detail := parseQuery(r.URL.RawQuery, check, allowed)
	if detail != "" {
		Problem(w, http.StatusBadRequest, "invalid query parameter", detail, field)
		return nil, false
	}
	return q, true
}

// ParseQuery parses raw as Query does and returns the values, or the
// parameter at fault ("query" when it has no name) and what is wrong.
func ParseQuery(raw string, allowed ...string) (q url.Values, field, detail string) {
	return parseQuery(raw, true, allowed)
}

func parseQuery(raw string, check bool, allowed []string) (q url.Values, field, detail string) {
	q = url.Values{}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			return nil, "query", "a parameter name is not valid percent-encoding"
		}
		name := key
		if name == "" {
			name = "query"
		}
		if strings.Contains(rawKey, ";") || strings.Contains(rawValue, ";") {
			return nil, name, "holds a ';'; separate parameters with '&' and encode ';' as %3B"
		}
		if check && !slices.Contains(allowed, key) {
			if len(allowed) == 0 {
				return nil, name, "this endpoint takes no query parameters, got " + quoteShort(key)
			}
			return nil, name, "unknown query parameter " + quoteShort(key) + "; this endpoint takes " + strings.Join(allowed, ", ")
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, name, "is not valid percent-encoding"
		}
		q[key] = append(q[key], value)
	}
	return q, "", ""
}

// quoteShort quotes s for a message, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.ToValidUTF8(`"`+s+`"`, "?")
}

// methods are the methods MethodAware asks its mux about.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// MethodAware serves mux's routes; a request no route takes is answered
// with a problem document: 405 with Allow when the path has routes for
// other methods, else 404 (never the mux's plain-text answers or a
// redirect to a subtree).
func MethodAware(mux *http.ServeMux) http.Handler {
	routed := func(r *http.Request, method string) bool {
		c := *r
		c.Method = method
		_, pattern := mux.Handler(&c)
		return pattern != ""
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if routed(r, r.Method) {
			mux.ServeHTTP(w, r)
			return
		}
		var allow []string
		for _, m := range methods {
			if routed(r, m) {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			Problem(w, http.StatusMethodNotAllowed, "method not allowed",
				r.Method+" is not served here; use "+strings.Join(allow, " or "), "")
			return
		}
		Problem(w, http.StatusNotFound, "not found", strings.ToValidUTF8("no route for "+r.Method+" "+r.URL.Path, "?"), "")
	})
}
