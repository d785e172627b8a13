// Package admin is the superadmin API: a read-only view across tenants for
// the operator who runs Herald. It authenticates with a superadmin
// credential (`herald admins create`, stored hashed), never a tenant's API
// key, and runs every query in a read-only transaction as herald_admin, a
// role that row-level security lets read every tenant and that has no
// privilege to write anything.
//
//	GET /v1/admin/notifications  filters tenant, project, user, severity, status, from, to; cursor pagination
//	GET /v1/admin/stats          counts by tenant × severity × status over a date range
package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/cursor"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of the list endpoint.
const (
	DefaultLimit = 50
	MaxLimit     = 200
	// statsSpan is the stats endpoint's default date range.
	statsSpan = 30 * 24 * time.Hour
	// queryTimeout bounds one superadmin query, so that a filter no index
	// serves cannot hold the database.
	queryTimeout = 5 * time.Second
)

// Server serves the superadmin API.
type Server struct {
	pool      *pgxpool.Pool
	cursorKey []byte
	log       hclog.Logger
}

// New returns the superadmin API on pool, whose role must be herald_admin;
// cursorKey signs pagination cursors.
func New(pool *pgxpool.Pool, cursorKey []byte, log hclog.Logger) *Server {
	return &Server{pool: pool, cursorKey: cursorKey, log: log.Named("admin")}
}

// Handler returns the routes under /v1/admin/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/notifications", s.auth(s.listNotifications))
	mux.HandleFunc("GET /v1/admin/stats", s.auth(s.stats))
	mux.HandleFunc("/v1/admin/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			api.Problem(w, http.StatusMethodNotAllowed, "read only", "the superadmin API only reads; it never writes or posts events", "")
			return
		}
		api.Problem(w, http.StatusNotFound, "not found", "no route for "+r.Method+" "+r.URL.Path, "")
	})
	return mux
}

func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := api.BearerToken(r)
		if !ok || !strings.HasPrefix(key, store.AdminKeyPrefix) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herald-admin"`)
			api.Problem(w, http.StatusUnauthorized, "unauthorized", "a superadmin credential is required: Authorization: Bearer hsa_...", "")
			return
		}
		if _, err := store.AuthenticateAdmin(r.Context(), s.pool, key); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald-admin", error="invalid_token"`)
				api.Problem(w, http.StatusUnauthorized, "unauthorized", "unknown or revoked superadmin credential", "")
				return
			}
			s.internal(w, err)
			return
		}
		next(w, r)
	}
}

// readOnly runs fn in a read-only transaction with a statement timeout.
func (s *Server) readOnly(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", queryTimeout.Milliseconds())); err != nil {
			return err
		}
		return fn(tx)
	})
}

// Notification is one row of the superadmin's list.
type Notification struct {
	NotificationID string     `json:"notification_id"`
	TenantID       string     `json:"tenant_id"`
	ProjectID      string     `json:"project_id"`
	UserID         string     `json:"user_id"`
	EventID        string     `json:"event_id"`
	EventType      string     `json:"event_type"`
	Title          string     `json:"title"`
	Body           string     `json:"body"`
	Severity       string     `json:"severity"`
	Status         string     `json:"status"`
	ReadAt         *time.Time `json:"read_at,omitempty"`
	ArchivedAt     *time.Time `json:"archived_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// Page is a page of the list.
type Page struct {
	Items []Notification `json:"items"`
	// NextCursor fetches the next page; empty on the last one.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Statuses of a notification, as the filters and stats name them.
const (
	StatusUnread   = "unread"
	StatusRead     = "read"
	StatusArchived = "archived"
)

// statusSQL derives a notification's status from its columns.
const statusSQL = `CASE WHEN archived_at IS NOT NULL THEN 'archived' WHEN read_at IS NOT NULL THEN 'read' ELSE 'unread' END`

var statusCond = map[string]string{
	StatusUnread:   "read_at IS NULL AND archived_at IS NULL",
	StatusRead:     "read_at IS NOT NULL AND archived_at IS NULL",
	StatusArchived: "archived_at IS NOT NULL",
}

var severityPattern = regexp.MustCompile(`^[a-z]{1,20}$`)

// filters are the query parameters both endpoints share.
type filters struct {
	tenant, project, user, severity, status string
	from, to                                time.Time
}

// badRequest is a query parameter at fault.
type badRequest struct {
	status       int
	title, field string
	detail       string
}

func (b *badRequest) Error() string { return b.field + ": " + b.detail }

func bad(field, format string, args ...any) *badRequest {
	return &badRequest{status: http.StatusBadRequest, title: "invalid query parameter", field: field, detail: fmt.Sprintf(format, args...)}
}

// parseFilters reads and checks the filters; known lists the parameters
// the endpoint takes besides them.
func parseFilters(q url.Values, known ...string) (filters, *badRequest) {
	allowed := map[string]bool{"tenant": true, "project": true, "user": true, "severity": true, "status": true, "from": true, "to": true}
	for _, k := range known {
		allowed[k] = true
	}
	for k, v := range q {
		if k == "" {
			return filters{}, bad("query", "a query parameter has no name")
		}
		if !allowed[k] {
			return filters{}, bad(k, "unknown query parameter %q", k)
		}
		if len(v) > 1 {
			return filters{}, bad(k, "given %d times; give it once", len(v))
		}
	}
	f := filters{tenant: q.Get("tenant"), project: q.Get("project"), user: q.Get("user"),
		severity: q.Get("severity"), status: q.Get("status")}
	if f.tenant != "" {
		if err := store.ValidID("tenant", f.tenant); err != nil {
			return f, bad("tenant", "%v", err)
		}
	}
	if f.project != "" {
		if err := store.ValidID("project", f.project); err != nil {
			return f, bad("project", "%v", err)
		}
	}
	if f.user != "" {
		if f.tenant == "" {
			return f, bad("user", "user ids are unique only within a tenant; give tenant too")
		}
		if len(f.user) > 200 || strings.ContainsRune(f.user, 0) || !utf8.ValidString(f.user) {
			return f, bad("user", "is not a user id")
		}
	}
	if f.severity != "" && !severityPattern.MatchString(f.severity) {
		return f, bad("severity", "must be a severity such as info, warning or critical")
	}
	if f.status != "" {
		if _, ok := statusCond[f.status]; !ok {
			return f, bad("status", "must be unread, read or archived, got %q", f.status)
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &f.from}, {"to", &f.to}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, bad(p.name, "must be an RFC 3339 time such as 2026-11-22T10:00:00Z")
			}
			*p.dst = t
		}
	}
	if !f.from.IsZero() && !f.to.IsZero() && !f.from.Before(f.to) {
		return f, bad("from", "must be before to")
	}
	return f, nil
}

// where builds the filters' conditions, appending their arguments.
func (f filters) where(args *[]any) []string {
	var conds []string
	arg := func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	}
	if f.tenant != "" {
		conds = append(conds, "tenant_id = "+arg(f.tenant))
	}
	if f.project != "" {
		conds = append(conds, "project_id = "+arg(f.project))
	}
	if f.user != "" {
		conds = append(conds, "user_id = "+arg(f.user))
	}
	if f.severity != "" {
		conds = append(conds, "severity = "+arg(f.severity))
	}
	if f.status != "" {
		conds = append(conds, statusCond[f.status])
	}
	if !f.from.IsZero() {
		conds = append(conds, "created_at >= "+arg(f.from))
	}
	if !f.to.IsZero() {
		conds = append(conds, "created_at < "+arg(f.to))
	}
	return conds
}

// scope is a canonical form of the filters a cursor is bound to.
func (f filters) scope() string {
	v := url.Values{}
	for k, s := range map[string]string{"tenant": f.tenant, "project": f.project, "user": f.user, "severity": f.severity, "status": f.status} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if !f.from.IsZero() {
		v.Set("from", f.from.UTC().Format(time.RFC3339Nano))
	}
	if !f.to.IsZero() {
		v.Set("to", f.to.UTC().Format(time.RFC3339Nano))
	}
	return v.Encode()
}

// checkScope answers 404 for a tenant or project filter that names
// nothing: the superadmin sees every tenant, so this tells nothing it
// could not list.
func checkScope(ctx context.Context, tx pgx.Tx, f filters) (*badRequest, error) {
	if f.tenant == "" && f.project == "" {
		return nil, nil
	}
	var tenantOK, projectOK bool
	err := tx.QueryRow(ctx, `SELECT $1 = '' OR EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1),
			$2 = '' OR EXISTS (SELECT 1 FROM projects WHERE project_id = $2 AND ($1 = '' OR tenant_id = $1))`,
		f.tenant, f.project).Scan(&tenantOK, &projectOK)
	if err != nil {
		return nil, err
	}
	switch {
	case !tenantOK:
		return &badRequest{status: http.StatusNotFound, title: "unknown tenant", field: "tenant", detail: fmt.Sprintf("no tenant %q", f.tenant)}, nil
	case !projectOK:
		return &badRequest{status: http.StatusNotFound, title: "unknown project", field: "project", detail: fmt.Sprintf("no project %q", f.project)}, nil
	}
	return nil, nil
}

func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request) {
	q, ok := api.QueryAny(w, r)
	if !ok {
		return
	}
	f, br := parseFilters(q, "limit", "cursor")
	if br != nil {
		s.problem(w, br)
		return
	}
	limit := DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			s.problem(w, bad("limit", "must be a whole number from 1 to %d", MaxLimit))
			return
		}
		limit = n
	}
	var args []any
	conds := f.where(&args)
	if c := q.Get("cursor"); c != "" {
		pos, err := cursor.Decode(s.cursorKey, c, f.scope())
		if err != nil {
			s.problem(w, bad("cursor", "%v", err))
			return
		}
		args = append(args, pos.At, pos.ID)
		conds = append(conds, fmt.Sprintf("(created_at, notification_id) < ($%d, $%d::uuid)", len(args)-1, len(args)))
	}
	sql := `SELECT notification_id::text, tenant_id, project_id, user_id, event_id, event_type, title, body, severity,
			` + statusSQL + `, read_at, archived_at, created_at FROM notifications`
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, limit+1)
	// Qualified: the select list's notification_id is the text form, and
	// ordering by it would sort instead of walking the index.
	sql += fmt.Sprintf(" ORDER BY notifications.created_at DESC, notifications.notification_id DESC LIMIT $%d", len(args))
	items, ok := scopedRows(s, w, r, f, sql, args, func(row pgx.CollectableRow) (Notification, error) {
		var n Notification
		err := row.Scan(&n.NotificationID, &n.TenantID, &n.ProjectID, &n.UserID, &n.EventID, &n.EventType, &n.Title, &n.Body,
			&n.Severity, &n.Status, &n.ReadAt, &n.ArchivedAt, &n.CreatedAt)
		return n, err
	})
	if !ok {
		return
	}
	page := Page{Items: items}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		last := page.Items[limit-1]
		page.NextCursor = cursor.Encode(s.cursorKey, cursor.Position{At: last.CreatedAt, ID: last.NotificationID, Scope: f.scope()})
	}
	api.WriteJSON(w, http.StatusOK, page)
}

// StatsRow is one count of the stats endpoint.
type StatsRow struct {
	TenantID string `json:"tenant_id"`
	Severity string `json:"severity"`
	Status   string `json:"status"`
	Count    int64  `json:"count"`
}

// Stats is the stats endpoint's answer.
type Stats struct {
	From  time.Time  `json:"from"`
	To    time.Time  `json:"to"`
	Total int64      `json:"total"`
	Rows  []StatsRow `json:"rows"`
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	q, ok := api.QueryAny(w, r)
	if !ok {
		return
	}
	f, br := parseFilters(q)
	if br != nil {
		s.problem(w, br)
		return
	}
	if f.to.IsZero() {
		f.to = time.Now()
	}
	if f.from.IsZero() {
		f.from = f.to.Add(-statsSpan)
	}
	sql, args := statsQuery(f)
	rows, ok := scopedRows(s, w, r, f, sql, args, func(row pgx.CollectableRow) (StatsRow, error) {
		var x StatsRow
		err := row.Scan(&x.TenantID, &x.Severity, &x.Status, &x.Count)
		return x, err
	})
	if !ok {
		return
	}
	st := Stats{From: f.from, To: f.to, Rows: rows}
	for _, x := range st.Rows {
		st.Total += x.Count
	}
	api.WriteJSON(w, http.StatusOK, st)
}

// statsQuery is the statistics' SQL and arguments for f, whose from and
// to are set: a range of created_at, the partition key of notifications
// (migration 0019), so only the months in the range are read.
func statsQuery(f filters) (string, []any) {
	var args []any
	conds := f.where(&args)
	// Grouped by the two flags the status derives from: the planner
	// estimates those (a few hundred groups, hashed) where it cannot the
	// CASE expression (it guessed every row a group and sorted on disk).
	sql := `SELECT tenant_id, severity, CASE WHEN archived THEN 'archived' WHEN read THEN 'read' ELSE 'unread' END AS status,
			sum(n)::bigint FROM (
			SELECT tenant_id, severity, archived_at IS NOT NULL AS archived, read_at IS NOT NULL AS read, count(*) AS n
			FROM notifications WHERE ` + strings.Join(conds, " AND ") + `
			GROUP BY tenant_id, severity, archived_at IS NOT NULL, read_at IS NOT NULL) g
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`
	return sql, args
}

// scopedRows runs sql in a read-only transaction once checkScope has found
// the filters' tenant and project, and collects its rows with scan (never
// nil). When it cannot, it has answered w (404 for a scope that names
// nothing, 503 for a query that ran too long, 500 otherwise) and returns
// false.
func scopedRows[T any](s *Server, w http.ResponseWriter, r *http.Request, f filters, sql string, args []any,
	scan pgx.RowToFunc[T]) ([]T, bool) {
	var out []T
	var br *badRequest
	err := s.readOnly(r.Context(), func(tx pgx.Tx) error {
		if b, err := checkScope(r.Context(), tx, f); err != nil || b != nil {
			br = b
			return err
		}
		rows, err := tx.Query(r.Context(), sql, args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scan)
		return err
	})
	switch {
	case err != nil:
		s.queryFailed(w, err)
		return nil, false
	case br != nil:
		s.problem(w, br)
		return nil, false
	}
	if out == nil {
		out = []T{}
	}
	return out, true
}

func (s *Server) problem(w http.ResponseWriter, b *badRequest) {
	api.Problem(w, b.status, b.title, b.detail, b.field)
}

// queryFailed answers a query that timed out with 503 and a hint, anything
// else with 500.
func (s *Server) queryFailed(w http.ResponseWriter, err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "57014" { // query_canceled: statement_timeout
		api.Problem(w, http.StatusServiceUnavailable, "query too slow",
			fmt.Sprintf("the query ran longer than %s; narrow it with tenant, from and to", queryTimeout), "")
		return
	}
	s.internal(w, err)
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("request failed", "error", err)
	api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
}
