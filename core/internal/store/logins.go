package store

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// scramIterations is the SCRAM-SHA-256 iteration count of the verifiers
// LoginVerifier makes: PostgreSQL's default (scram_iterations).
const scramIterations = 4096

// LoginVerifier returns the SCRAM-SHA-256 verifier of password, the form
// PostgreSQL stores ("SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>",
// RFC 5803). Setting a role's password to the verifier keeps the password
// itself out of the statement, and so out of the server's statement log
// (log_statement = ddl), as libpq's PQencryptPasswordConn does. password
// must be printable ASCII, for which SASLprep changes nothing.
func LoginVerifier(password string) (string, error) {
	if password == "" {
		return "", fmt.Errorf("login password: empty")
	}
	for _, r := range password {
		if r < 0x21 || r > 0x7e {
			return "", fmt.Errorf("login password: only printable ASCII without spaces is accepted")
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("login password: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(server)), nil
}

// NewLoginPassword returns a random password for a login role: 32 bytes,
// base64url (no character a .pgpass line or a URL would need to escape).
func NewLoginPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// EnsureLoginRole creates (or checks) the login role name for the API's or
// the superadmin's pool and makes it a member of group (herald_api or
// herald_admin) and of nothing else Herald's: NOSUPERUSER, NOBYPASSRLS, no
// CREATEROLE or CREATEDB. An existing role that could reach more (a
// superuser, BYPASSRLS, the tables' owner, a member of another of
// Herald's groups) is refused, not changed. verifier, when not empty, is
// set as its password (LoginVerifier). It needs a role that may create
// roles (CREATEROLE) and has group with ADMIN OPTION or is a superuser.
func EnsureLoginRole(ctx context.Context, q Querier, name, group, verifier string) error {
	if !rolePattern.MatchString(name) {
		return fmt.Errorf("login role %q must be 1-63 characters of a-z 0-9 _ and start with a letter or _", name)
	}
	if strings.HasPrefix(name, "pg_") || name == RoleAPI || name == RoleWorker || name == RoleAdmin || name == RoleProducer {
		return fmt.Errorf("login role %q: the pg_ prefix and Herald's group roles are reserved", name)
	}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("login role: %w", err)
	}
	id := pgx.Identifier{name}.Sanitize()
	if !exists {
		if _, err := q.Exec(ctx, "CREATE ROLE "+id+" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE"); err != nil && !isDuplicate(err) {
			return fmt.Errorf("login role: create %s: %w", name, err)
		}
	}
	var super, bypass, owner bool
	var others []string
	err := q.QueryRow(ctx, `SELECT r.rolsuper, r.rolbypassrls,
			coalesce((SELECT pg_has_role($1, c.relowner, 'MEMBER') FROM pg_class c WHERE c.oid = to_regclass('event_outbox')), false),
			array(SELECT g FROM unnest($3::text[]) g WHERE g <> $2 AND pg_has_role($1, g, 'MEMBER') ORDER BY g)
		FROM pg_roles r WHERE r.rolname = $1`, name, group, GroupRoles).Scan(&super, &bypass, &owner, &others)
	if err != nil {
		return fmt.Errorf("login role: %w", err)
	}
	switch {
	case super:
		return fmt.Errorf("login role %q already exists and is a superuser: give the pool a role of its own", name)
	case bypass:
		return fmt.Errorf("login role %q already exists and has BYPASSRLS: give the pool a role of its own", name)
	case owner:
		return fmt.Errorf("login role %q already exists and owns Herald's tables (or may SET ROLE to their owner): give the pool a role of its own", name)
	case len(others) > 0:
		return fmt.Errorf("login role %q already exists and is a member of %s: give the pool a role of its own", name, strings.Join(others, ", "))
	}
	if verifier != "" {
		// Utility statements take no parameters; the verifier is base64
		// and $-separated, and quoteLiteral quotes it anyway.
		if _, err := q.Exec(ctx, "ALTER ROLE "+id+" LOGIN PASSWORD "+quoteLiteral(verifier)); err != nil {
			return fmt.Errorf("login role: set the password of %s: %w", name, err)
		}
	}
	if _, err := q.Exec(ctx, "GRANT "+pgx.Identifier{group}.Sanitize()+" TO "+id); err != nil && !isDuplicate(err) {
		return fmt.Errorf("login role: grant %s to %s: %w", group, name, err)
	}
	return nil
}
