package rules_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
)

// TestPreparedEventRendersPerRecipient renders one prepared event for two
// recipients: parts that read the recipient differ, the rest is shared.
func TestPreparedEventRendersPerRecipient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.hcl")
	if err := os.WriteFile(path, []byte(`
channel "EMAIL" { providers = [{ plugin = "email" }] }
event "E" {
  audience { user = "customer:{{ .payload.user }}" }
  mandatory = ["EMAIL"]
  inbox {
    title = "Order {{ .payload.order }}"
    body  = "Hello {{ .recipient.user_id }}"
  }
  template "EMAIL" { subject = "Order {{ .payload.order }} ({{ .channel }})" }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rulesfile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pe := rules.PrepareEvent(rules.Event{Type: "E", Payload: []byte(`{"user": "a", "order": 7}`)})
	for _, uid := range []string{"a", "b"} {
		out, err := rs.RenderPrepared(pe, directory.Recipient{UserID: uid}, "EMAIL")
		if err != nil {
			t.Fatal(err)
		}
		if out.Subject != "Order 7 (EMAIL)" || out.Body != "Hello "+uid {
			t.Fatalf("for %s: subject %q body %q", uid, out.Subject, out.Body)
		}
		inbox, err := rs.RenderPrepared(pe, directory.Recipient{UserID: uid}, "")
		if err != nil {
			t.Fatal(err)
		}
		if inbox.Title != "Order 7" || inbox.Body != "Hello "+uid {
			t.Fatalf("inbox for %s: title %q body %q", uid, inbox.Title, inbox.Body)
		}
	}
}
