// Package cursor makes the opaque, tamper-evident pagination cursors of
// Herald's list endpoints: a position (the last row's sort key) encoded as
// JSON and signed with HMAC-SHA256 under a key every daemon of a database
// shares (herald_secrets "cursor"). A cursor that was altered, truncated
// or made under another key is refused.
package cursor

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MaxLen bounds an encoded cursor; longer input is refused unread.
const MaxLen = 512

// macLen is how many bytes of the HMAC a cursor carries.
const macLen = 16

// ErrInvalid reports a cursor that was not made by Herald under this key,
// or for another query.
var ErrInvalid = errors.New("cursor: invalid or tampered; start again from the first page")

// Position is where a page ends: rows sort by (At DESC, ID DESC). Scope
// binds the cursor to the query it was made for (its filters), so a
// cursor cannot be replayed against other filters.
type Position struct {
	At    time.Time `json:"t"`
	ID    string    `json:"i"`
	Scope string    `json:"s,omitempty"`
}

// Encode signs p with key.
func Encode(key []byte, p Position) string {
	body, _ := json.Marshal(p) // a Position always marshals
	return base64.RawURLEncoding.EncodeToString(append(body, sum(key, body)...))
}

// Decode checks s's signature under key and that it was made for scope,
// and returns its position.
func Decode(key []byte, s, scope string) (Position, error) {
	if len(s) > MaxLen {
		return Position{}, fmt.Errorf("%w (longer than %d characters)", ErrInvalid, MaxLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) <= macLen {
		return Position{}, ErrInvalid
	}
	body, mac := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	if !hmac.Equal(mac, sum(key, body)) {
		return Position{}, ErrInvalid
	}
	var p Position
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.ID == "" || p.Scope != scope {
		return Position{}, ErrInvalid
	}
	return p, nil
}

func sum(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return m.Sum(nil)[:macLen]
}
