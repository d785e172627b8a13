package cli

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"testing"
)

// TestWebPushKeys: `herald webpush keys` prints a fresh P-256 pair whose
// public key is the private key's, in config lines or JSON.
func TestWebPushKeys(t *testing.T) {
	t.Parallel()
	run := func(args ...string) string {
		t.Helper()
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append([]string{"webpush", "keys"}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("herald webpush keys %v: %v", args, err)
		}
		return out.String()
	}
	check := func(pub, key string) {
		t.Helper()
		raw, err := base64.RawURLEncoding.DecodeString(key)
		if err != nil {
			t.Fatalf("private key %q: %v", key, err)
		}
		priv, err := ecdh.P256().NewPrivateKey(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes()); got != pub {
			t.Fatalf("public key %q is not the private key's (%q)", pub, got)
		}
	}
	text := run()
	m := regexp.MustCompile(`(?m)^vapid_public_key  = "([A-Za-z0-9_-]{87})"\nvapid_private_key = "([A-Za-z0-9_-]{43})"$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("output %q: want vapid_public_key and vapid_private_key lines", text)
	}
	check(m[1], m[2])
	var js map[string]string
	if err := json.Unmarshal([]byte(run("--json")), &js); err != nil {
		t.Fatal(err)
	}
	check(js["vapid_public_key"], js["vapid_private_key"])
	if js["vapid_public_key"] == m[1] {
		t.Fatal("two runs printed the same key pair")
	}
}
