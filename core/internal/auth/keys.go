package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/heraldhq/herald/core/internal/store"
)

// MaxJWKSBytes bounds a JWKS file.
const MaxJWKSBytes = 1 << 20

// jwk is the part of RFC 7517 Herald reads: public keys only.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d"`
	K   string `json:"k"`
}

// KeysFromJWKS reads the public keys of a JWKS document as token keys of
// tenant with issuer. Every key needs a kid and an alg Herald verifies;
// private or symmetric members are refused (Herald stores public keys
// only; an HS256 secret is given on its own).
func KeysFromJWKS(tenant, issuer string, doc []byte) ([]store.TokenKey, error) {
	if len(doc) > MaxJWKSBytes {
		return nil, fmt.Errorf("jwks: larger than %d bytes", MaxJWKSBytes)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("jwks: no keys")
	}
	var out []store.TokenKey
	seen := map[string]bool{}
	for i, raw := range set.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("jwks: keys[%d]: %w", i, err)
		}
		where := fmt.Sprintf("jwks: keys[%d]", i)
		if k.Kid == "" {
			return nil, fmt.Errorf("%s: kid is required", where)
		}
		where += fmt.Sprintf(" (kid %q)", k.Kid)
		if seen[k.Kid] {
			return nil, fmt.Errorf("%s: kid given twice", where)
		}
		seen[k.Kid] = true
		if k.D != "" || k.K != "" {
			return nil, fmt.Errorf("%s: holds private or symmetric key material; give Herald public keys only", where)
		}
		if k.Use != "" && k.Use != "sig" {
			return nil, fmt.Errorf("%s: use %q is not \"sig\"", where, k.Use)
		}
		pub, err := k.public()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if !slices.Contains(Algorithms, k.Alg) || k.Alg == "HS256" {
			return nil, fmt.Errorf("%s: alg %q is not RS256, ES256 or EdDSA", where, k.Alg)
		}
		if err := checkKeyAlg(k.Alg, pub); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, store.TokenKey{TenantID: tenant, Kid: k.Kid, Alg: k.Alg, Issuer: issuer, Key: der})
	}
	return out, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(s)
}

func (k jwk) public() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("RSA key needs base64url n and e")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, fmt.Errorf("EC curve %q is not P-256", k.Crv)
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("P-256 key needs 32-byte base64url x and y")
		}
		pt := append([]byte{4}, append(x, y...)...)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pt)
		if err != nil {
			return nil, fmt.Errorf("P-256 point: %w", err)
		}
		return pub, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, fmt.Errorf("OKP curve %q is not Ed25519", k.Crv)
		}
		x, err := b64(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("Ed25519 key needs a 32-byte base64url x")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("kty %q is not RSA, EC or OKP", k.Kty)
}

// NewSecret makes a random HS256 secret.
func NewSecret() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// Issue signs a token for user with an HS256 key (for development, demos
// and tests; production backends sign with their own keys). ttl is capped
// by the verifier's lifetime cap when it is checked.
func Issue(k store.TokenKey, audience string, u User, ttl time.Duration, now time.Time) (string, error) {
	if k.Alg != "HS256" {
		return "", fmt.Errorf("key %s is %s: Herald holds only its public half and cannot sign; sign tokens in your backend", k.Kid, k.Alg)
	}
	c := Claims{Tenant: k.TenantID, UserType: u.UserType, Roles: u.Roles, Project: u.Project,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: k.Issuer, Subject: u.UserID, Audience: jwt.ClaimStrings{audience},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		}}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	t.Header["kid"] = k.Kid
	return t.SignedString(k.Key)
}
