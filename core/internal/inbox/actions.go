package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/heraldhq/herald/sdk/producer/jsonguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ActionTypes are the actions a user may take on a shared notification.
var ActionTypes = map[string]bool{"CONFIRMED": true, "REJECTED": true, "POSTPONED": true, "DISMISSED": true, "CUSTOM": true}

// ActionsExchange is where winning actions are published for business
// services (a durable topic exchange; routing key ActionRoutingKey, headers
// herald-tenant and herald-project).
const ActionsExchange = "herald.actions"

// ActionRoutingKey is the routing key of an action on ActionsExchange:
// "<tenant>.<project>.<event type>.<action type>". The tenant and the
// project come first so that a binding (acme.#, acme.shop.#) and a RabbitMQ
// topic permission (^acme\.) scope a consumer to one tenant or project;
// the tail is the key of earlier versions, so a binding "X.*" becomes
// "*.*.X.*". A tenant or project id may hold dots, which would make a
// tenant "acme.evil" match "acme.#": a dot in either is written %2E (ids
// never hold '%'), so each is exactly one word of the key.
func ActionRoutingKey(a Action) string {
	return RoutingWord(a.TenantID) + "." + RoutingWord(a.ProjectID) + "." + a.EventType + "." + a.Type
}

// RoutingWord is how a tenant or project id is written in a routing key
// of ActionsExchange: its dots as %2E, so that it is one word.
func RoutingWord(id string) string {
	return strings.ReplaceAll(id, ".", "%2E")
}

// Action is a winning action, as the feed and the exchange carry it.
type Action struct {
	ActionID string `json:"action_id"`
	// Seq is the action's position among its tenant's actions (1, 2, ...;
	// never a global count): GET /v1/actions?after=<seq> goes on from it.
	Seq            int64           `json:"seq"`
	TenantID       string          `json:"tenant_id"`
	ProjectID      string          `json:"project_id"`
	EventID        string          `json:"event_id"`
	EventType      string          `json:"event_type"`
	NotificationID string          `json:"notification_id"`
	UserID         string          `json:"user_id"`
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data"`
	ActedAt        time.Time       `json:"acted_at"`
}

type actionRequest struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// parseAction decodes and checks an action's body without touching the
// database: every string that reaches PostgreSQL is valid UTF-8 without
// NUL or lone surrogates (jsonguard), data is an object within the event
// payload's depth limit and MaxActionData, and every refusal names its
// field. The returned Data is never empty ({} when none was given).
func parseAction(body []byte) (actionRequest, *paramError) {
	bad := func(title, field, format string, args ...any) *paramError {
		return &paramError{status: http.StatusBadRequest, title: title, detail: fmt.Sprintf(format, args...), field: field}
	}
	// data nests one level below the body.
	if err := jsonguard.Check(body, producer.MaxPayloadDepth+1); err != nil {
		field := api.GuiltyField(body, producer.MaxPayloadDepth)
		if field == "data" {
			return actionRequest{}, bad("invalid action data", "data", "data: %v (data is a JSON object of valid UTF-8, nested at most %d deep)", err, producer.MaxPayloadDepth)
		}
		return actionRequest{}, bad("malformed body", field, "%v", err)
	}
	var req actionRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		detail, field := api.DescribeJSONError(err, body)
		return actionRequest{}, bad("malformed body", field, `%s; send {"type": "CONFIRMED", "data": {...}}`, detail)
	}
	if dec.More() {
		return actionRequest{}, bad("malformed body", "", "the body holds more than one JSON value")
	}
	if !ActionTypes[req.Type] {
		return actionRequest{}, bad("unknown action type", "type", "type must be CONFIRMED, REJECTED, POSTPONED, DISMISSED or CUSTOM, got %q", req.Type)
	}
	raw := bytes.TrimSpace(req.Data)
	if len(raw) == 0 || string(raw) == "null" {
		req.Data = json.RawMessage("{}")
		return req, nil
	}
	if len(req.Data) > MaxActionData {
		return actionRequest{}, bad("invalid action data", "data", "data is larger than %d bytes", MaxActionData)
	}
	if raw[0] != '{' {
		return actionRequest{}, bad("invalid action data", "data", "data must be a JSON object")
	}
	return req, nil
}

// Acted is the answer to an action: the winner's view.
type Acted struct {
	Notification Notification `json:"notification"`
	Unread       int64        `json:"unread"`
}

func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	u := userOf(r)
	id, ok := notificationID(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxActionData+1024))
	if err != nil {
		api.Problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("an action's body is at most %d bytes", MaxActionData+1024), "")
		return
	}
	req, prob := parseAction(body)
	if prob != nil {
		prob.write(w)
		return
	}
	data := req.Data
	var out Acted
	var lost *Handled
	var notShared bool
	t := newTouched()
	err = inUserTx(r.Context(), s.pool, u.Tenant, u.Project, func(tx pgx.Tx) error {
		lost, notShared, t = nil, false, newTouched()
		own, err := ownRow(r.Context(), tx, u.Tenant, u.UserID, id)
		if err != nil {
			return err
		}
		if own.shareKey == nil {
			notShared = true
			return nil
		}
		// The unique key (tenant, share key) picks the winner: exactly
		// one insert per shared notification succeeds.
		tag, err := tx.Exec(r.Context(), `INSERT INTO notification_actions
				(tenant_id, share_key, notification_id, user_id, action, data, project_id, event_id, event_type)
			VALUES ($1, $2, $3::uuid, $4, $5, $6, $7, $8, $9) ON CONFLICT (tenant_id, share_key) DO NOTHING`,
			u.Tenant, *own.shareKey, id, u.UserID, req.Type, data, own.projectID, own.eventID, own.eventType)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			n, err := s.one(r.Context(), tx, u, id)
			if err != nil {
				return err
			}
			lost = n.HandledBy
			return nil
		}
		// The winner handles it for everyone: every sharer's escalation
		// that an action calls off ends here, naming the action.
		if _, err := store.CancelEscalationsActed(r.Context(), tx, u.Tenant, *own.shareKey); err != nil {
			return err
		}
		// Handled is read, for every sharer.
		changes, err := readShared(r.Context(), tx, u.Tenant, *own.shareKey, t)
		if err != nil {
			return err
		}
		if err := cancelEscalations(r.Context(), tx, u.Tenant, t); err != nil {
			return err
		}
		if err := applyCounters(r.Context(), tx, u.Tenant, changes); err != nil {
			return err
		}
		rows, err := tx.Query(r.Context(), `SELECT user_id FROM notifications WHERE tenant_id = $1 AND share_key = $2`, u.Tenant, *own.shareKey)
		if err != nil {
			return err
		}
		sharers, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, sh := range sharers {
			t.users[sh] = true
		}
		if out.Notification, err = s.one(r.Context(), tx, u, id); err != nil {
			return err
		}
		out.Unread, err = s.countTx(r.Context(), tx, u)
		return err
	})
	switch {
	case errors.Is(err, errNotFound):
		notFound(w, id)
	case err != nil:
		s.internal(w, err)
	case notShared:
		api.Problem(w, http.StatusUnprocessableEntity, "not actionable",
			"this notification is not shared (its rule has no shared = true), so it takes no actions", "id")
	case lost != nil:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "already handled", "status": http.StatusConflict,
			"detail": fmt.Sprintf("%s took action %s first", lost.UserID, lost.Type), "handled_by": lost})
	default:
		s.kick()
		s.announce(r.Context(), u, t)
		api.WriteJSON(w, http.StatusOK, out)
	}
}

// Feed serves GET /v1/actions for a tenant's API key: the winning actions
// after a sequence number of the tenant's own (Action.Seq), oldest first, so that a business service that
// missed a message of the exchange can catch up.
func Feed(pool *pgxpool.Pool, log hclog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := api.PrincipalOf(r)
		q, ok := api.Query(w, r, "after", "limit")
		if !ok {
			return
		}
		after := int64(0)
		if v := q.Get("after"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				api.Problem(w, http.StatusBadRequest, "invalid query parameter", "after must be a sequence number (0 or more)", "after")
				return
			}
			after = n
		}
		limit, perr := limitParam(q, 100)
		if perr != nil {
			perr.write(w)
			return
		}
		var items []Action
		err := inUserTx(r.Context(), pool, p.Tenant, p.Project, func(tx pgx.Tx) error {
			rows, err := tx.Query(r.Context(), `SELECT action_id::text, tenant_seq, tenant_id, project_id, event_id, event_type,
					notification_id::text, user_id, action, data, acted_at
				FROM notification_actions WHERE tenant_id = $1 AND tenant_seq > $2 AND ($3 = '' OR project_id = $3)
				ORDER BY tenant_seq LIMIT $4`, p.Tenant, after, p.Project, limit)
			if err != nil {
				return err
			}
			items, err = pgx.CollectRows(rows, scanAction)
			return err
		})
		if err != nil {
			log.Error("request failed", "error", err)
			api.Problem(w, http.StatusInternalServerError, "internal error", "the request could not be completed; it is safe to retry", "")
			return
		}
		if items == nil {
			items = []Action{}
		}
		next := after
		if len(items) > 0 {
			next = items[len(items)-1].Seq
		}
		api.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "next_after": next})
	}
}

func scanAction(r pgx.CollectableRow) (Action, error) {
	var a Action
	err := r.Scan(&a.ActionID, &a.Seq, &a.TenantID, &a.ProjectID, &a.EventID, &a.EventType, &a.NotificationID, &a.UserID,
		&a.Type, &a.Data, &a.ActedAt)
	return a, err
}

// Publisher publishes winning actions to the herald.actions exchange,
// persistent and confirmed, at least once: an action row is marked
// published only after the broker confirmed it, in the transaction that
// claimed it (FOR UPDATE SKIP LOCKED, so several daemons share the work).
type Publisher struct {
	pool *pgxpool.Pool // the pipeline's role: every tenant
	conn *broker.Conn
	log  hclog.Logger
	kick chan struct{}
	// Poll is the fallback period (1 s).
	Poll time.Duration
}

// NewPublisher returns the action publisher.
func NewPublisher(pool *pgxpool.Pool, conn *broker.Conn, log hclog.Logger) *Publisher {
	return &Publisher{pool: pool, conn: conn, log: log.Named("actions"), kick: make(chan struct{}, 1), Poll: time.Second}
}

// Kick wakes the publisher.
func (p *Publisher) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	p.conn.Drain(ctx, ActionsExchange, "action", p.log, p.Poll, p.kick, p.round)
	return nil
}

// round publishes one batch and returns how many the broker confirmed, or
// -1 when it nacked any (the confirmed ones are marked published all the
// same).
func (p *Publisher) round(ctx context.Context, ch *amqp.Channel) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT action_id::text, tenant_seq, tenant_id, project_id, event_id, event_type,
				notification_id::text, user_id, action, data, acted_at
			FROM notification_actions WHERE published_at IS NULL ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED`)
		if err != nil {
			return err
		}
		acts, err := pgx.CollectRows(rows, scanAction)
		if err != nil || len(acts) == 0 {
			return err
		}
		keys, msgs := make([]string, len(acts)), make([]amqp.Publishing, len(acts))
		for i, a := range acts {
			body, _ := json.Marshal(a)
			keys[i] = ActionRoutingKey(a)
			msgs[i] = amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: a.ActionID,
				Timestamp: a.ActedAt, Body: body, Headers: amqp.Table{"herald-tenant": a.TenantID, "herald-project": a.ProjectID}}
		}
		acked, err := broker.PublishConfirmed(ctx, ch, ActionsExchange, keys, msgs)
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(acts))
		for i, ok := range acked {
			if ok {
				ids = append(ids, acts[i].ActionID)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE notification_actions SET published_at = now() WHERE action_id = ANY($1::uuid[])`, ids); err != nil {
			return err
		}
		n = len(ids)
		if n < len(acts) {
			n = -1
		}
		return nil
	})
	return n, err
}
