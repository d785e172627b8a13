package pushpeer

import (
	"crypto/ecdh"
	"encoding/base64"
	"testing"
)

// TestDecryptRFC8291Example decrypts the example message of RFC 8291
// section 5 with the user agent's keys given there.
func TestDecryptRFC8291Example(t *testing.T) {
	t.Parallel()
	b64 := func(s string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	priv, err := ecdh.P256().NewPrivateKey(b64("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
	if err != nil {
		t.Fatal(err)
	}
	body := b64("DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")
	got, err := Decrypt(body, priv, b64("BTBZMqHH6r4Tts7J_aSIgg"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "When I grow up, I want to be a watermelon"; string(got) != want {
		t.Fatalf("plaintext %q, want %q", got, want)
	}
	// A flipped byte fails authentication rather than yielding garbage.
	body[len(body)-1] ^= 1
	if _, err := Decrypt(body, priv, b64("BTBZMqHH6r4Tts7J_aSIgg")); err == nil {
		t.Fatal("tampered body decrypted")
	}
	for _, short := range [][]byte{nil, body[:20], body[:40]} {
		if _, err := Decrypt(short, priv, b64("BTBZMqHH6r4Tts7J_aSIgg")); err == nil {
			t.Fatalf("truncated body of %d bytes decrypted", len(short))
		}
	}
}
