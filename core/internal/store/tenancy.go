package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Herald's group roles (migration 0007). Row-level security policies name
// them; a role with no policy on a table sees none of its rows.
const (
	// RoleAPI is the public HTTP API's role: one tenant per transaction.
	RoleAPI = "herald_api"
	// RoleWorker is the pipeline's role: every tenant.
	RoleWorker = "herald_worker"
	// RoleAdmin is the superadmin API's role: reads every tenant, writes
	// nothing.
	RoleAdmin = "herald_admin"
	// RoleProducer groups the login roles of producer services, each bound
	// to one tenant.
	RoleProducer = "herald_producer"
)

// GroupRoles lists Herald's group roles.
var GroupRoles = []string{RoleAPI, RoleWorker, RoleAdmin, RoleProducer}

// DefaultProject is the project of events, notifications and counters that
// name none; every tenant has it.
const DefaultProject = "default"

// PoolOptions configure NewPoolWith.
type PoolOptions struct {
	// MaxConns caps the pool (0: pgx's default).
	MaxConns int
	// Role is set on every connection (SET ROLE) when not empty.
	Role string
	// Name is the session's application_name ("herald" when empty).
	Name string
}

// NewPoolWith opens a pool to databaseURL whose connections run as
// opts.Role.
func NewPoolWith(ctx context.Context, databaseURL string, opts PoolOptions) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if opts.MaxConns > 0 {
		pc.MaxConns = int32(opts.MaxConns)
	}
	boundDial(pc)
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	name := opts.Name
	if name == "" {
		name = "herald"
	}
	pc.ConnConfig.RuntimeParams["application_name"] = name
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	if opts.Role != "" {
		// The role is a startup parameter: the server sets it before the
		// session's first statement, so no query runs as the login role.
		pc.ConnConfig.RuntimeParams["role"] = opts.Role
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// RoleInfo describes the role a connection's queries run as.
type RoleInfo struct {
	// Login is the session user; Current the role in effect (after SET ROLE).
	Login, Current string
	// Superuser and BypassRLS mean row-level security does not apply.
	Superuser, BypassRLS bool
	// OwnsTables is true when the role has the privileges of the owner of
	// Herald's tables (and so could turn row-level security off).
	OwnsTables bool
	// Member lists which of Herald's group roles the role has the
	// privileges of.
	Member map[string]bool
	// RowSecurity is the row_security setting.
	RowSecurity string
	// LoginSuperuser, LoginBypassRLS and LoginOwnsTables describe the
	// session user, whom RESET ROLE returns to: the same as Superuser,
	// BypassRLS and OwnsTables, but for the login role, and with
	// LoginOwnsTables counting any role it may SET ROLE to.
	LoginSuperuser, LoginBypassRLS, LoginOwnsTables bool
	// LoginMember lists which of Herald's group roles the session user may
	// SET ROLE to.
	LoginMember map[string]bool
}

// InspectRole reports the role q's queries run as.
func InspectRole(ctx context.Context, q Querier) (RoleInfo, error) {
	ri := RoleInfo{Member: map[string]bool{}, LoginMember: map[string]bool{}}
	var api, worker, admin, producer, lAPI, lWorker, lAdmin, lProducer bool
	err := q.QueryRow(ctx, `SELECT session_user::text, current_user::text, r.rolsuper, r.rolbypassrls,
			coalesce((SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c
			          WHERE c.oid = to_regclass('event_outbox')), false),
			current_setting('row_security'),
			pg_has_role(current_user, 'herald_api', 'USAGE'), pg_has_role(current_user, 'herald_worker', 'USAGE'),
			pg_has_role(current_user, 'herald_admin', 'USAGE'), pg_has_role(current_user, 'herald_producer', 'USAGE'),
			l.rolsuper, l.rolbypassrls,
			coalesce((SELECT pg_has_role(session_user, c.relowner, 'MEMBER') FROM pg_class c
			          WHERE c.oid = to_regclass('event_outbox')), false),
			pg_has_role(session_user, 'herald_api', 'MEMBER'), pg_has_role(session_user, 'herald_worker', 'MEMBER'),
			pg_has_role(session_user, 'herald_admin', 'MEMBER'), pg_has_role(session_user, 'herald_producer', 'MEMBER')
		FROM pg_roles r, pg_roles l WHERE r.rolname = current_user AND l.rolname = session_user`).Scan(&ri.Login, &ri.Current, &ri.Superuser, &ri.BypassRLS,
		&ri.OwnsTables, &ri.RowSecurity, &api, &worker, &admin, &producer,
		&ri.LoginSuperuser, &ri.LoginBypassRLS, &ri.LoginOwnsTables, &lAPI, &lWorker, &lAdmin, &lProducer)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: a group role is missing
			return ri, fmt.Errorf("inspect database role: %s (run `herald migrate up`, or `herald db roles`)", pe.Message)
		}
		return ri, fmt.Errorf("inspect database role: %w", err)
	}
	ri.Member[RoleAPI], ri.Member[RoleWorker], ri.Member[RoleAdmin], ri.Member[RoleProducer] = api, worker, admin, producer
	ri.LoginMember[RoleAPI], ri.LoginMember[RoleWorker], ri.LoginMember[RoleAdmin], ri.LoginMember[RoleProducer] = lAPI, lWorker, lAdmin, lProducer
	return ri, nil
}

// CheckLogin refuses a login role that the API's or the superadmin's pool
// (group: herald_api or herald_admin) must not log in as: one from which
// RESET ROLE, or SET ROLE to another role it is a member of, reaches more
// than group may. That is the tables' owner (it could turn row-level
// security off or write any table), a superuser, a role with BYPASSRLS, or
// a member of another of Herald's groups. The pool switches to its group
// at connection start, so the login matters only to a query that SQL
// injection made; this keeps such a query inside its group. key names the
// config key for the message; database.allow_owner_login skips the check.
func CheckLogin(ctx context.Context, q Querier, group, key string) error {
	ri, err := InspectRole(ctx, q)
	if err != nil {
		return err
	}
	var what string
	switch {
	case ri.LoginSuperuser:
		what = "is a superuser"
	case ri.LoginOwnsTables:
		what = "owns Herald's tables (or may SET ROLE to their owner)"
	case ri.LoginBypassRLS:
		what = "has BYPASSRLS"
	default:
		for _, r := range []string{RoleWorker, RoleAPI, RoleAdmin, RoleProducer} {
			if r != group && ri.LoginMember[r] {
				what = "is a member of " + r
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	return &InsecureLoginError{Key: key, Login: ri.Login, What: what, Group: group}
}

// InsecureLoginError is CheckLogin's refusal: the login role Login (of
// the config key Key) What, so it could leave Group for more.
type InsecureLoginError struct {
	Key, Login, What, Group string
}

func (e *InsecureLoginError) Error() string {
	return fmt.Sprintf("%s logs in as role %q, which %s: a query SQL injection made could RESET ROLE and reach every tenant. "+
		"Set %s to a login role that is only a member of %s (herald db roles creates it from that URL's user), "+
		"or set database.allow_owner_login = true to accept the risk", e.Key, e.Login, e.What, e.Key, e.Group)
}

// CheckAPIRole refuses a role the public API must not run as: one that
// row-level security does not bind (a superuser, BYPASSRLS, the tables'
// owner, a member of herald_worker or herald_admin) or that is not a
// member of herald_api. what names the config keys for the message.
func CheckAPIRole(ctx context.Context, q Querier, what string) error {
	ri, err := InspectRole(ctx, q)
	if err != nil {
		return err
	}
	who := fmt.Sprintf("%s runs the API as role %q (login %q)", what, ri.Current, ri.Login)
	switch {
	case ri.Superuser:
		return fmt.Errorf("%s, a superuser: row-level security does not apply to superusers, so one tenant could read another's rows; set database.api_role = %q", who, RoleAPI)
	case ri.BypassRLS:
		return fmt.Errorf("%s, which has BYPASSRLS: row-level security would not apply; set database.api_role = %q", who, RoleAPI)
	case ri.OwnsTables:
		return fmt.Errorf("%s, which has the privileges of the tables' owner and could turn row-level security off; set database.api_role = %q", who, RoleAPI)
	case ri.Member[RoleWorker] || ri.Member[RoleAdmin]:
		return fmt.Errorf("%s, a member of %s or %s, which see every tenant; set database.api_role = %q", who, RoleWorker, RoleAdmin, RoleAPI)
	case !ri.Member[RoleAPI]:
		return fmt.Errorf("%s, which is not a member of %s: it would see no rows; set database.api_role = %q or GRANT %s to it", who, RoleAPI, RoleAPI, RoleAPI)
	case ri.RowSecurity != "on":
		return fmt.Errorf("%s with row_security = %s; it must be on", who, ri.RowSecurity)
	}
	return nil
}

// CheckAdminRole refuses a role the superadmin API must not run as: one
// that may write (a superuser, the tables' owner, a member of
// herald_worker or herald_api) or that is not a member of herald_admin.
// The superadmin API reads every tenant and writes nothing, so it runs as
// herald_admin, never as database.url's login (the tables' owner). key
// names the config key for the message.
func CheckAdminRole(ctx context.Context, q Querier, key string) error {
	ri, err := InspectRole(ctx, q)
	if err != nil {
		return err
	}
	who := fmt.Sprintf("%s runs the superadmin API as role %q (login %q)", key, ri.Current, ri.Login)
	switch {
	case ri.Superuser:
		return fmt.Errorf("%s, a superuser, which may write every table; set %s = %q", who, key, RoleAdmin)
	case ri.OwnsTables:
		return fmt.Errorf("%s, which has the privileges of the tables' owner and may write them; set %s = %q", who, key, RoleAdmin)
	case ri.Member[RoleWorker] || ri.Member[RoleAPI]:
		return fmt.Errorf("%s, a member of %s or %s, which may write; set %s = %q", who, RoleWorker, RoleAPI, key, RoleAdmin)
	case !ri.Member[RoleAdmin]:
		return fmt.Errorf("%s, which is not a member of %s and would see no rows; set %s = %q or GRANT %s to it", who, RoleAdmin, key, RoleAdmin, RoleAdmin)
	}
	return nil
}

// CheckRole refuses a pool whose role lacks the privileges of group (the
// worker or admin role), naming the config key.
func CheckRole(ctx context.Context, q Querier, group, key string) error {
	ri, err := InspectRole(ctx, q)
	if err != nil {
		return err
	}
	if ri.Superuser || ri.Member[group] {
		return nil
	}
	return fmt.Errorf("%s: role %q (login %q) is not a member of %s and would see no rows; set %s = %q or GRANT %s to it",
		key, ri.Current, ri.Login, group, key, group, group)
}

// Principal is who an API request acts for.
type Principal struct {
	// KeyID names the API key (the first 8 bytes of its hash, hex).
	KeyID string
	// Tenant owns every row the request may see.
	Tenant string
	// Project limits the request to one project ("" for every project of
	// the tenant).
	Project string
}

// Authenticate looks up an unrevoked API key (through
// herald_authenticate, which alone may read across tenants) and returns
// its principal, or ErrNotFound. There is no cache: a revoked key is
// refused by the next request.
func Authenticate(ctx context.Context, q Querier, key string) (Principal, error) {
	var p Principal
	var project *string
	err := q.QueryRow(ctx, `SELECT key_id, tenant_id, project_id FROM herald_authenticate($1)`, HashAPIKey(key)).
		Scan(&p.KeyID, &p.Tenant, &project)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrNotFound
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up api key: %w", err)
	}
	if project != nil {
		p.Project = *project
	}
	return p, nil
}

// InTenant runs fn in a transaction on pool with the tenant (and project,
// when not empty) set for row-level security. fn's error rolls back.
func InTenant(ctx context.Context, pool *pgxpool.Pool, tenant, project string, fn func(tx pgx.Tx) error) error {
	if tenant == "" {
		return errors.New("tenant transaction: no tenant")
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := SetTenant(ctx, tx, tenant, project); err != nil {
			return err
		}
		return fn(tx)
	})
}

// SetTenant sets the tenant and project of tx for row-level security (SET
// LOCAL: they end with the transaction).
func SetTenant(ctx context.Context, tx Querier, tenant, project string) error {
	if _, err := tx.Exec(ctx, `SELECT set_config('herald.tenant', $1, true), set_config('herald.project', $2, true)`,
		tenant, project); err != nil {
		return fmt.Errorf("set tenant: %w", err)
	}
	return nil
}

// idPattern is what tenant, project and role ids may look like: printable
// ASCII without spaces or slashes, so that they are safe in URLs, logs and
// routing keys.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$`)

// ValidID checks a tenant or project id and says what is wrong with it.
func ValidID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%s id is required", what)
	}
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%s id %q must be 1-100 characters of A-Z a-z 0-9 . _ : @ - and start with a letter or digit", what, id)
	}
	return nil
}

// EnsureProject creates the tenant's project if it does not exist.
func EnsureProject(ctx context.Context, q Querier, tenantID, projectID, name string) error {
	if err := ValidID("project", projectID); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `INSERT INTO projects (tenant_id, project_id, name) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, project_id) DO NOTHING`, tenantID, projectID, name); err != nil {
		return fmt.Errorf("ensure project %s/%s: %w", tenantID, projectID, err)
	}
	return nil
}

// ProjectExists reports whether the tenant has the project. Under the API
// role it sees only the transaction's tenant, so another tenant's project
// does not exist.
func ProjectExists(ctx context.Context, q Querier, tenantID, projectID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM projects WHERE tenant_id = $1 AND project_id = $2)`,
		tenantID, projectID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up project: %w", err)
	}
	return ok, nil
}

// AdminKeyPrefix starts every superadmin credential.
const AdminKeyPrefix = "hsa_"

// CreateAdmin stores a new superadmin credential and returns it; only its
// hash is kept, so it is shown once.
func CreateAdmin(ctx context.Context, q Querier, name string) (id, key string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	key = AdminKeyPrefix + hex.EncodeToString(b)
	h := sha256.Sum256([]byte(key))
	id = "sa_" + hex.EncodeToString(h[:6])
	if _, err := q.Exec(ctx, `INSERT INTO superadmins (admin_id, name, key_hash) VALUES ($1, $2, $3)`, id, name, h[:]); err != nil {
		return "", "", fmt.Errorf("create superadmin: %w", err)
	}
	return id, key, nil
}

// RevokeAdmin revokes a superadmin credential by id.
func RevokeAdmin(ctx context.Context, q Querier, id string) error {
	tag, err := q.Exec(ctx, `UPDATE superadmins SET revoked_at = now() WHERE admin_id = $1 AND revoked_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("revoke superadmin: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// AuthenticateAdmin returns the id of an unrevoked superadmin credential,
// or ErrNotFound.
func AuthenticateAdmin(ctx context.Context, q Querier, key string) (string, error) {
	h := sha256.Sum256([]byte(key))
	var id *string
	if err := q.QueryRow(ctx, `SELECT herald_authenticate_admin($1)`, h[:]).Scan(&id); err != nil {
		return "", fmt.Errorf("look up superadmin credential: %w", err)
	}
	if id == nil {
		return "", ErrNotFound
	}
	return *id, nil
}

// RevokeAPIKey revokes a tenant's API key by id; the next request with it
// is refused.
func RevokeAPIKey(ctx context.Context, q Querier, tenantID, keyID string) error {
	tag, err := q.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND key_id = $2 AND revoked_at IS NULL`,
		tenantID, keyID)
	if err != nil {
		return fmt.Errorf("revoke api key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// EnsureRoles creates Herald's group roles where missing and makes owner
// (the role that runs the migrations and owns the tables) a member of
// herald_api, herald_worker and herald_admin. It needs a superuser or a
// role with CREATEROLE.
func EnsureRoles(ctx context.Context, q Querier, owner string) error {
	for _, r := range GroupRoles {
		var exists bool
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, r).Scan(&exists); err != nil {
			return fmt.Errorf("roles: %w", err)
		}
		if exists {
			continue
		}
		if _, err := q.Exec(ctx, "CREATE ROLE "+pgx.Identifier{r}.Sanitize()+" NOLOGIN"); err != nil && !isDuplicate(err) {
			return fmt.Errorf("roles: create %s: %w", r, err)
		}
	}
	// A superuser also gives herald_worker BYPASSRLS: the pipeline crosses
	// tenants by design, and only a session row-level security does not
	// bind may write deliveries with COPY (the relay's fast path).
	var super bool
	if err := q.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return fmt.Errorf("roles: %w", err)
	}
	if super {
		if _, err := q.Exec(ctx, "ALTER ROLE "+RoleWorker+" BYPASSRLS"); err != nil {
			return fmt.Errorf("roles: %s BYPASSRLS: %w", RoleWorker, err)
		}
	}
	if owner == "" {
		return nil
	}
	for _, r := range []string{RoleAPI, RoleWorker, RoleAdmin} {
		var member bool
		if err := q.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'MEMBER')`, owner, r).Scan(&member); err != nil {
			return fmt.Errorf("roles: %w", err)
		}
		if member {
			continue
		}
		if _, err := q.Exec(ctx, "GRANT "+pgx.Identifier{r}.Sanitize()+" TO "+pgx.Identifier{owner}.Sanitize()); err != nil && !isDuplicate(err) {
			return fmt.Errorf("roles: grant %s to %s: %w", r, owner, err)
		}
	}
	return nil
}

func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42710" || pe.Code == "23505")
}

// rolePattern is what producer role names may look like.
var rolePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CreateProducerRole creates (or updates) the login role for a producer
// service and binds it to the one tenant tenantID (EnsureProducerRole with
// one tenant: a tenant granted before is taken away).
func CreateProducerRole(ctx context.Context, q Querier, tenantID, role, password string) error {
	return EnsureProducerRole(ctx, q, role, password, []string{tenantID})
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings on).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Secret returns the named shared secret of herald_secrets (readable by the
// pipeline's role only).
func Secret(ctx context.Context, q Querier, name string) ([]byte, error) {
	var b []byte
	if err := q.QueryRow(ctx, `SELECT secret FROM herald_secrets WHERE name = $1`, name).Scan(&b); err != nil {
		return nil, fmt.Errorf("read secret %s: %w", name, err)
	}
	return b, nil
}

// DeploymentAudience returns the default token audience of the deployment
// whose database q reads: "herald:" and the deployment id migration 0025
// made (32 hex digits), in herald_secrets (the pipeline's role reads it).
// Every daemon of the database derives the same audience; another
// deployment's differs.
func DeploymentAudience(ctx context.Context, q Querier) (string, error) {
	b, err := Secret(ctx, q, "deployment_id")
	if err != nil {
		return "", err
	}
	return "herald:" + hex.EncodeToString(b), nil
}

// ReadInTenant sends the statements of b in one round trip, in the one
// implicit transaction of a pipeline (no BEGIN, no COMMIT), after setting
// the tenant and project for row-level security in that transaction; fn
// reads b's results in order. For reads: a statement that fails aborts
// the rest, and there is nothing to commit.
func ReadInTenant(ctx context.Context, pool *pgxpool.Pool, tenant, project string, b *pgx.Batch, fn func(pgx.BatchResults) error) error {
	if tenant == "" {
		return errors.New("tenant read: no tenant")
	}
	full := &pgx.Batch{}
	full.Queue(`SELECT set_config('herald.tenant', $1, true), set_config('herald.project', $2, true)`, tenant, project)
	full.QueuedQueries = append(full.QueuedQueries, b.QueuedQueries...)
	br := pool.SendBatch(ctx, full)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("set tenant: %w", err)
	}
	if err := fn(br); err != nil {
		return err
	}
	return br.Close()
}
