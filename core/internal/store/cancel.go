package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5/pgconn"
)

// EventCancelled is event_outbox's status of an event cancelled before the
// relay claimed it (migration 0060).
const EventCancelled = "CANCELLED"

// CancelReason is the last_error of an event or delivery a cancel called
// off.
const CancelReason = "cancelled by DELETE /v1/events/{id}"

// Cancellation is the answer of a cancel (herald_cancel, migration 0060):
// the event's status and where each of its deliveries stands. It
// describes the event as the cancel left it, so a repeat gives the same
// answer.
type Cancellation struct {
	EventID string `json:"event_id"`
	// Status is the event's status: CANCELLED when it was still pending
	// (never fanned out), otherwise PROCESSED or FAILED as before.
	Status string `json:"status"`
	// Cancelled counts the event's deliveries now CANCELLED.
	Cancelled int `json:"cancelled"`
	// Final counts the deliveries that had already ended, by status (SENT,
	// FAILED, SKIPPED, DIGESTED): they stay as they were.
	Final map[string]int `json:"already_final"`
	// InFlight counts the deliveries a sender held when the cancel looked:
	// not cancelled, they end as their send does.
	InFlight int `json:"in_flight"`
	// Done reports that anything was cancelled (the event or a delivery,
	// by this cancel or an earlier one); false: nothing could be.
	Done bool `json:"-"`
	// Now counts the deliveries this call cancelled, by channel (for the
	// metrics; a repeat cancels none).
	Now map[string]int `json:"-"`
}

// Went describes what went out or is going, for the answer to a cancel
// that could cancel nothing: "2 SENT, 1 in flight".
func (c Cancellation) Went() string {
	var parts []string
	keys := make([]string, 0, len(c.Final))
	for k := range c.Final {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", c.Final[k], k))
	}
	if c.InFlight > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight", c.InFlight))
	}
	if len(parts) == 0 {
		return "no delivery"
	}
	return strings.Join(parts, ", ")
}

// EventIDProblem says what keeps id from being an event_id (the event
// contract: 1-200 bytes of printable ASCII without spaces), "" for none.
func EventIDProblem(id string) string {
	if id == "" {
		return "is required"
	}
	if len(id) > producer.MaxIDLength {
		return fmt.Sprintf("is %d bytes, longer than %d", len(id), producer.MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return fmt.Sprintf("byte %d is 0x%02x; an event_id is printable ASCII without spaces (0x21-0x7E)", i, id[i])
		}
	}
	return ""
}

// CancelEvent cancels the tenant's event eventID and every delivery of it
// still waiting, through herald_cancel, whose comment (migration 0060)
// gives the locking. q must run as a login herald_cancel lets cancel for
// the tenant: Herald's worker, a producer granted the tenant, or the API
// inside InTenant. An unknown event (or one outside the API key's
// project) is ErrNotFound.
func CancelEvent(ctx context.Context, q Querier, tenantID, eventID string) (Cancellation, error) {
	c := Cancellation{EventID: eventID, Final: map[string]int{}, Now: map[string]int{}}
	var outcome string
	var counts, now []byte
	err := q.QueryRow(ctx, `SELECT outcome, event_status, deliveries, cancelled_now FROM herald_cancel($1, $2)`, tenantID, eventID).
		Scan(&outcome, &c.Status, &counts, &now)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "P0002" {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("cancel event: %w", err)
	}
	var byStatus map[string]int
	if err := json.Unmarshal(counts, &byStatus); err != nil {
		return c, fmt.Errorf("cancel event: %w", err)
	}
	if err := json.Unmarshal(now, &c.Now); err != nil {
		return c, fmt.Errorf("cancel event: %w", err)
	}
	for status, n := range byStatus {
		switch {
		case status == StatusCancelled:
			c.Cancelled = n
		case slices.Contains(FinalStatuses, status):
			c.Final[status] = n
		default:
			// Still open after the cancel: a sender held it.
			c.InFlight += n
		}
	}
	c.Done = outcome == "cancelled"
	return c, nil
}
