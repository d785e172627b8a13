// Package inbox is the end user's notification centre: the HTTP API under
// /v1/inbox (unread count, bell, list, read, unread, read-all, archive,
// unarchive, first-to-act actions) authenticated with the user's token,
// the counters behind the unread count, and the feed of winning actions
// for the business service.
//
// Every state change and its counter change commit in one transaction, as
// the API's role with the user's tenant (and project) set: a user reaches
// only their own notifications, and another user's or tenant's id is 404.
// A shared notification (a rule with shared = true) is read by all its
// recipients when one reads it, and the first action on it wins by the
// unique key of notification_actions; every sharer sees who handled it.
package inbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/cursor"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of the list endpoints.
const (
	DefaultLimit = 20
	MaxLimit     = 100
	// MaxActionData bounds an action's data object.
	MaxActionData = 16 << 10
)

// Notifier carries a frame to a user's live sessions (live.Server).
type Notifier interface {
	Notify(ctx context.Context, tenant, user string, frame []byte)
}

// Server serves the inbox API.
type Server struct {
	pool      *pgxpool.Pool
	verifier  *auth.Verifier
	cursorKey []byte
	notifier  Notifier
	// kick wakes the action publisher after a winning action commits.
	kick func()
	log  hclog.Logger
}

// New returns the inbox API on pool (the API role). notifier and kick may
// be nil.
func New(pool *pgxpool.Pool, verifier *auth.Verifier, cursorKey []byte, notifier Notifier, kick func(), log hclog.Logger) *Server {
	if kick == nil {
		kick = func() {}
	}
	return &Server{pool: pool, verifier: verifier, cursorKey: cursorKey, notifier: notifier, kick: kick, log: log.Named("inbox")}
}

// Handler serves /v1/inbox.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/inbox/unread-count", s.user(s.unreadCount))
	mux.HandleFunc("GET /v1/inbox/bell", s.user(s.bell, "limit"))
	mux.HandleFunc("GET /v1/inbox", s.user(s.list, listParams...))
	mux.HandleFunc("GET /v1/inbox/{id}", s.user(s.get))
	mux.HandleFunc("POST /v1/inbox/read-all", s.user(s.readAll))
	for _, op := range []string{OpRead, OpUnread, OpArchive, OpUnarchive} {
		mux.HandleFunc("POST /v1/inbox/{id}/"+op, s.user(s.change(op)))
	}
	mux.HandleFunc("POST /v1/inbox/{id}/actions", s.user(s.act))
	// A wrong method is 405 with Allow, an unknown path 404, both problem
	// documents (and PUT /v1/inbox is not redirected to a subtree).
	return api.MethodAware(mux)
}

type userKey struct{}

// user authenticates the request's bearer token, then parses its query
// string strictly (api.Query): only params are taken, a malformed
// percent-escape or another parameter is a 400 naming it.
func (s *Server) user(next http.HandlerFunc, params ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.verifier.Request(w, r, s.log)
		if !ok {
			return
		}
		q, ok := api.Query(w, r, params...)
		if !ok {
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), userKey{}, u), queryKey{}, q)
		next(w, r.WithContext(ctx))
	}
}

type queryKey struct{}

func userOf(r *http.Request) auth.User { return r.Context().Value(userKey{}).(auth.User) }

// queryOf is the request's query as user parsed it.
func queryOf(r *http.Request) url.Values { return r.Context().Value(queryKey{}).(url.Values) }

// Count is the unread count.
type Count struct {
	Unread int64 `json:"unread"`
}

// countSQL sums a user's counters ($1 tenant, $2 user, $3 project or "").
const countSQL = `SELECT coalesce(sum(unread), 0) FROM notification_counters
	WHERE tenant_id = $1 AND user_id = $2 AND ($3 = '' OR project_id = $3)`

func (s *Server) countTx(ctx context.Context, tx pgx.Tx, u auth.User) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, countSQL, u.Tenant, u.UserID, u.Project).Scan(&n)
	return n, err
}

func (s *Server) unreadCount(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	var c Count
	// Reads go in one round trip: the tenant, then the query (ReadInTenant).
	b := &pgx.Batch{}
	b.Queue(countSQL, u.Tenant, u.UserID, u.Project)
	err := store.ReadInTenant(r.Context(), s.pool, u.Tenant, u.Project, b, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&c.Unread)
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, c)
}

// Bell is the unread count with the latest unread notifications.
type Bell struct {
	Unread int64          `json:"unread"`
	Items  []Notification `json:"items"`
}

func (s *Server) bell(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	limit, perr := limitParam(queryOf(r), 5)
	if perr != nil {
		perr.write(w)
		return
	}
	b := Bell{Items: []Notification{}}
	// The count and the items in one round trip, the items newest first
	// through notifications_inbox (noBitmapScan).
	batch := &pgx.Batch{}
	batch.Queue(noBitmapScan)
	batch.Queue(countSQL, u.Tenant, u.UserID, u.Project)
	batch.Queue(selectNotification+`
		WHERE n.tenant_id = $1 AND n.user_id = $2 AND n.read_at IS NULL AND n.archived_at IS NULL
		ORDER BY n.created_at DESC, n.notification_id DESC LIMIT $3`, u.Tenant, u.UserID, limit)
	err := store.ReadInTenant(r.Context(), s.pool, u.Tenant, u.Project, batch, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&b.Unread); err != nil {
			return err
		}
		var err error
		b.Items, err = collectNotifications(br)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, b)
}

// collectNotifications reads the next result of br as notifications
// (never nil).
func collectNotifications(br pgx.BatchResults) ([]Notification, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	items, err := pgx.CollectRows(rows, scanNotification)
	if items == nil {
		items = []Notification{}
	}
	return items, err
}

// Page is a page of the inbox.
type Page struct {
	Items      []Notification `json:"items"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// paramError is a query parameter or body field at fault.
type paramError struct {
	status        int
	title, detail string
	field         string
}

func (p *paramError) write(w http.ResponseWriter) {
	api.Problem(w, p.status, p.title, p.detail, p.field)
}

func badParam(field, format string, args ...any) *paramError {
	return &paramError{status: http.StatusBadRequest, title: "invalid query parameter", detail: fmt.Sprintf(format, args...), field: field}
}

func limitParam(q url.Values, def int) (int, *paramError) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, badParam("limit", "must be a whole number from 1 to %d", MaxLimit)
	}
	return n, nil
}

var (
	wordPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)
	listParams  = []string{"status", "severity", "event_type", "project", "from", "to", "q", "limit", "cursor"}
)

// listQuery builds the list's SQL from the query parameters.
func listQuery(q url.Values, u auth.User) (conds []string, args []any, scope string, perr *paramError) {
	for k, v := range q {
		if !slices.Contains(listParams, k) {
			return nil, nil, "", badParam(cmp.Or(k, "query"), "unknown query parameter %q", k)
		}
		if len(v) > 1 {
			return nil, nil, "", badParam(k, "given %d times; give it once", len(v))
		}
		if !utf8.ValidString(v[0]) || strings.ContainsRune(v[0], 0) {
			return nil, nil, "", badParam(k, "is not valid UTF-8 text")
		}
	}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	conds = []string{"n.tenant_id = " + arg(u.Tenant), "n.user_id = " + arg(u.UserID)}
	switch st := q.Get("status"); st {
	case "", "active":
		conds = append(conds, "n.archived_at IS NULL")
	case StatusUnread:
		conds = append(conds, "n.read_at IS NULL AND n.archived_at IS NULL")
	case StatusRead:
		conds = append(conds, "n.read_at IS NOT NULL AND n.archived_at IS NULL")
	case StatusArchived:
		conds = append(conds, "n.archived_at IS NOT NULL")
	case "all":
	default:
		return nil, nil, "", badParam("status", "must be active, unread, read, archived or all, got %q", st)
	}
	for _, f := range []struct{ param, column string }{{"severity", "n.severity"}, {"event_type", "n.event_type"}, {"project", "n.project_id"}} {
		if v := q.Get(f.param); v != "" {
			if !wordPattern.MatchString(v) {
				return nil, nil, "", badParam(f.param, "is not a %s", strings.ReplaceAll(f.param, "_", " "))
			}
			conds = append(conds, f.column+" = "+arg(v))
		}
	}
	var from, to time.Time
	for _, p := range []struct {
		name string
		dst  *time.Time
		op   string
	}{{"from", &from, ">="}, {"to", &to, "<"}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, nil, "", badParam(p.name, "must be an RFC 3339 time such as 2026-11-22T10:00:00Z")
			}
			*p.dst = t
			conds = append(conds, "n.created_at "+p.op+" "+arg(t))
		}
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return nil, nil, "", badParam("from", "must be before to")
	}
	if v := q.Get("q"); v != "" {
		if utf8.RuneCountInString(v) > 200 {
			return nil, nil, "", badParam("q", "is longer than 200 characters")
		}
		p := arg(likePattern(v))
		conds = append(conds, "(n.title ILIKE "+p+" OR n.body ILIKE "+p+")")
	}
	sq := url.Values{}
	for k, v := range q {
		if k != "cursor" && k != "limit" {
			sq[k] = v
		}
	}
	return conds, args, u.Tenant + "\x00" + u.UserID + "\x00" + sq.Encode(), nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	q := queryOf(r)
	limit, perr := limitParam(q, DefaultLimit)
	if perr != nil {
		perr.write(w)
		return
	}
	conds, args, scope, perr := listQuery(q, u)
	if perr != nil {
		perr.write(w)
		return
	}
	if c := q.Get("cursor"); c != "" {
		pos, err := cursor.Decode(s.cursorKey, c, scope)
		if err != nil {
			badParam("cursor", "%v", err).write(w)
			return
		}
		args = append(args, pos.At, pos.ID)
		conds = append(conds, fmt.Sprintf("(n.created_at, n.notification_id) < ($%d, $%d::uuid)", len(args)-1, len(args)))
	}
	args = append(args, limit+1)
	sql := selectNotification + " WHERE " + strings.Join(conds, " AND ") +
		fmt.Sprintf(" ORDER BY n.created_at DESC, n.notification_id DESC LIMIT $%d", len(args))
	page := Page{Items: []Notification{}}
	// The page through notifications_inbox (noBitmapScan), in the same
	// round trip as the settings.
	batch := &pgx.Batch{}
	batch.Queue(noBitmapScan)
	batch.Queue(sql, args...)
	err := store.ReadInTenant(r.Context(), s.pool, u.Tenant, u.Project, batch, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		var err error
		page.Items, err = collectNotifications(br)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		last := page.Items[limit-1]
		page.NextCursor = cursor.Encode(s.cursorKey, cursor.Position{At: last.CreatedAt, ID: last.NotificationID, Scope: scope})
	}
	api.WriteJSON(w, http.StatusOK, page)
}

// notificationID reads {id}: a malformed id is the same 404 as another
// user's.
func notificationID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if _, err := uuid.Parse(id); err != nil {
		notFound(w, id)
		return "", false
	}
	return id, true
}

func notFound(w http.ResponseWriter, id string) {
	if len(id) > 64 || !utf8.ValidString(id) {
		id = "(this id)"
	}
	api.Problem(w, http.StatusNotFound, "notification not found", fmt.Sprintf("you have no notification %q", id), "id")
}

func (s *Server) one(ctx context.Context, tx pgx.Tx, u auth.User, id string) (Notification, error) {
	rows, err := tx.Query(ctx, selectNotification+` WHERE n.tenant_id = $1 AND n.user_id = $2 AND n.notification_id = $3::uuid`,
		u.Tenant, u.UserID, id)
	if err != nil {
		return Notification{}, err
	}
	n, err := pgx.CollectExactlyOneRow(rows, scanNotification)
	if errors.Is(err, pgx.ErrNoRows) {
		return n, errNotFound
	}
	return n, err
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	id, ok := notificationID(w, r)
	if !ok {
		return
	}
	var n Notification
	err := inUserTx(r.Context(), s.pool, u.Tenant, u.Project, func(tx pgx.Tx) error {
		var err error
		n, err = s.one(r.Context(), tx, u, id)
		return err
	})
	if errors.Is(err, errNotFound) {
		notFound(w, id)
		return
	}
	if err != nil {
		s.internal(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, n)
}

// Changed is the answer to a state change: the notification as it is now
// and the user's unread count.
type Changed struct {
	Notification *Notification `json:"notification,omitempty"`
	Unread       int64         `json:"unread"`
}

func (s *Server) change(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := userOf(r)
		id, ok := notificationID(w, r)
		if !ok {
			return
		}
		var out Changed
		var t *touched
		err := inUserTx(r.Context(), s.pool, u.Tenant, u.Project, func(tx pgx.Tx) error {
			var err error
			if t, err = transition(r.Context(), tx, u.Tenant, u.UserID, id, op); err != nil {
				return err
			}
			n, err := s.one(r.Context(), tx, u, id)
			if err != nil {
				return err
			}
			out.Notification = &n
			out.Unread, err = s.countTx(r.Context(), tx, u)
			return err
		})
		if errors.Is(err, errNotFound) {
			notFound(w, id)
			return
		}
		if err != nil {
			s.internal(w, err)
			return
		}
		s.announce(r.Context(), u, t)
		api.WriteJSON(w, http.StatusOK, out)
	}
}

func (s *Server) readAll(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	var out Changed
	var t *touched
	err := inUserTx(r.Context(), s.pool, u.Tenant, u.Project, func(tx pgx.Tx) error {
		var err error
		if t, err = readAll(r.Context(), tx, u.Tenant, u.UserID, u.Project); err != nil {
			return err
		}
		out.Unread, err = s.countTx(r.Context(), tx, u)
		return err
	})
	if err != nil {
		s.internal(w, err)
		return
	}
	s.announce(r.Context(), u, t)
	api.WriteJSON(w, http.StatusOK, out)
}

// updateFrame tells a user's sessions that notifications changed; the
// page refetches what it shows.
type updateFrame struct {
	Type            string   `json:"type"`
	NotificationIDs []string `json:"notification_ids,omitempty"`
	Unread          *int64   `json:"unread,omitempty"`
}

// announce tells every touched user's live sessions what changed, with
// their new unread count (best effort, after the commit, without holding
// up the answer: a shared action touches every sharer).
func (s *Server) announce(ctx context.Context, by auth.User, t *touched) {
	if s.notifier == nil || t == nil {
		return
	}
	go s.announceNow(context.WithoutCancel(ctx), by, t)
}

func (s *Server) announceNow(ctx context.Context, by auth.User, t *touched) {
	for user := range t.users {
		f := updateFrame{Type: "inbox", NotificationIDs: t.changed}
		_ = inUserTx(ctx, s.pool, by.Tenant, "", func(tx pgx.Tx) error {
			n, err := s.countTx(ctx, tx, auth.User{Tenant: by.Tenant, UserID: user, Project: by.Project})
			if err == nil {
				f.Unread = &n
			}
			return err
		})
		b, _ := json.Marshal(f)
		s.notifier.Notify(ctx, by.Tenant, user, b)
	}
}

func (s *Server) internal(w http.ResponseWriter, err error) {
	s.log.Error("request failed", "error", err)
	api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
}
