package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
)

// AdminExplainPattern is the admin route that explains a stored event.
const AdminExplainPattern = "GET /admin/v1/events/{tenant}/{event_id}/explain"

// RecomputedNote is what every explanation of a stored event says first:
// the decision is computed again, now, against today's directory and the
// rules loaded now, at the time the event was processed; neither the
// directory nor the rules of that moment are stored.
const RecomputedNote = "recomputed now against today's directory and the rules loaded now, at the time the event was processed; " +
	"the directory or the rules may have changed since: compare with the stored deliveries"

// ExplainResponse is the body of GET /admin/v1/events/{tenant}/{event_id}/explain.
type ExplainResponse struct {
	Note       string `json:"note"`
	Recomputed bool   `json:"recomputed"`
	TenantID   string `json:"tenant_id"`
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	Status     string `json:"status"`
	// At is the decision time: when the event was processed (now, for an
	// event not processed yet).
	At time.Time `json:"at"`
	// Decision is the whole decision; User the explanation for ?user=.
	Decision *rules.Decision        `json:"decision,omitempty"`
	User     *rules.UserExplanation `json:"user,omitempty"`
	// Deliveries are the deliveries stored when the event was processed.
	Deliveries []producer.DeliveryStatus `json:"deliveries"`
}

// ExplainHandler serves GET /admin/v1/events/{tenant}/{event_id}/explain
// [?user=ID][&format=text] on the admin listener: the rule engine's
// explanation of a stored event (as `herald rules explain`, with --user
// for ?user=), recomputed against today's directory at the time the event
// was processed, beside the deliveries stored then. It reads with the
// pipeline's pool (every tenant). 404 for an unknown event or a tenant
// without it, 422 when the rules loaded now have no rule for its type.
func ExplainHandler(pool *pgxpool.Pool, current func() *rules.RuleSet) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, eventID, user := r.PathValue("tenant"), r.PathValue("event_id"), r.URL.Query().Get("user")
		if err := store.ValidID("tenant", tenant); err != nil {
			api.Problem(w, http.StatusBadRequest, "invalid tenant", err.Error(), "tenant")
			return
		}
		if eventID == "" || len(eventID) > 200 || !api.KnownID(eventID) {
			api.Problem(w, http.StatusBadRequest, "invalid event_id", "event_id: 1-200 bytes of UTF-8 without NUL", "event_id")
			return
		}
		if len(user) > 200 || !api.KnownID(user) {
			api.Problem(w, http.StatusBadRequest, "invalid user", "user: at most 200 bytes of UTF-8 without NUL", "user")
			return
		}
		ctx := r.Context()
		se, err := store.LoadStoredEvent(ctx, pool, tenant, eventID)
		if errors.Is(err, store.ErrNotFound) {
			api.Problem(w, http.StatusNotFound, "no such event", "tenant "+tenant+" has no event "+eventID, "event_id")
			return
		}
		if err != nil {
			api.Problem(w, http.StatusInternalServerError, "explain failed", err.Error(), "")
			return
		}
		st, err := store.GetEvent(ctx, pool, tenant, eventID)
		if err != nil {
			api.Problem(w, http.StatusInternalServerError, "explain failed", err.Error(), "")
			return
		}
		ev := rules.Event{TenantID: se.Event.TenantID, EventID: se.Event.EventID, Type: se.Event.Type,
			AggregateType: se.Event.AggregateType, AggregateID: se.Event.AggregateID,
			Payload: se.Event.Payload, OccurredAt: se.Event.CreatedAt}
		rs := current()
		at := time.Now()
		if se.ProcessedAt != nil {
			at = *se.ProcessedAt
		}
		needs, err := rs.Needs(ev)
		if errors.Is(err, rules.ErrNoRule) {
			api.Problem(w, http.StatusUnprocessableEntity, "no rule", fmt.Sprintf("the rules loaded now have no rule for event type %q", se.Event.Type), "event_type")
			return
		}
		if err != nil {
			api.Problem(w, http.StatusUnprocessableEntity, "cannot decide", err.Error(), "")
			return
		}
		if user != "" {
			needs = needs.Union(directory.Needs{UserIDs: []string{user}})
		}
		dir, err := store.LoadDirectory(ctx, pool, tenant, needs)
		if err != nil {
			api.Problem(w, http.StatusInternalServerError, "explain failed", err.Error(), "")
			return
		}
		resp := ExplainResponse{
			Note: RecomputedNote, Recomputed: true, TenantID: tenant, EventID: eventID, EventType: se.Event.Type,
			Status: se.Status, At: at, Deliveries: st.Deliveries,
		}
		if user != "" {
			ue, err := rs.ExplainUser(ev, dir, at, user)
			if err != nil {
				api.Problem(w, http.StatusUnprocessableEntity, "cannot decide", err.Error(), "")
				return
			}
			resp.User = &ue
		} else {
			d, err := rs.Decide(ev, dir, at)
			if err != nil {
				api.Problem(w, http.StatusUnprocessableEntity, "cannot decide", err.Error(), "")
				return
			}
			resp.Decision = &d
		}
		if r.URL.Query().Get("format") != "text" {
			api.WriteJSON(w, http.StatusOK, resp)
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "note: %s\nevent %s of tenant %s: %s", RecomputedNote, eventID, tenant, se.Status)
		if se.ProcessedAt != nil {
			fmt.Fprintf(&b, ", processed at %s", se.ProcessedAt.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n\n")
		if resp.User != nil {
			err = rules.WriteUserExplain(&b, ev, *resp.User, at)
		} else {
			err = rules.WriteExplain(&b, *resp.Decision, at)
		}
		if err != nil {
			api.Problem(w, http.StatusInternalServerError, "explain failed", err.Error(), "")
			return
		}
		fmt.Fprintf(&b, "\nstored deliveries (%d)\n", len(st.Deliveries))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, d := range st.Deliveries {
			if user != "" && d.UserID != user {
				continue
			}
			fmt.Fprintf(tw, "  user %s\t%s\t%s\tattempts %d\t%s\n", d.UserID, d.Channel, d.Status, d.Attempts, d.LastError)
		}
		_ = tw.Flush()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(b.String()))
	})
}
