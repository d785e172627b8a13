package admin

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzParseFilters feeds arbitrary query strings to the superadmin filters:
// no panic, and whatever is accepted is safe to bind as query arguments.
func FuzzParseFilters(f *testing.F) {
	for _, s := range []string{"tenant=a&user=u1&status=read", "from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z",
		"severity=critical", "tenant=%ff", "user=%00", "status=unread&status=read", "limit=5&cursor=abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		fl, br := parseFilters(q, "limit", "cursor")
		if br != nil {
			if br.field == "" || br.status < 400 {
				t.Fatalf("refusal without a field: %+v", br)
			}
			return
		}
		if fl.user != "" && fl.tenant == "" {
			t.Fatal("user accepted without tenant")
		}
		for _, v := range []string{fl.tenant, fl.project, fl.user, fl.severity} {
			if strings.ContainsRune(v, 0) {
				t.Fatalf("NUL accepted in %q", v)
			}
		}
		var args []any
		conds := fl.where(&args)
		if len(conds) < len(args) {
			t.Fatalf("%d conditions for %d arguments", len(conds), len(args))
		}
		_ = fl.scope()
	})
}
