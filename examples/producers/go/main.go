// Command reservation writes a reservation and its Herald event in one
// transaction (pgx and sdk/producer, which calls herald_enqueue).
//
// Environment: DATABASE_URL (postgres://user:password@host:port/db),
// HERALD_TENANT (demo), RESERVATION_ID (42). producer.Enqueue calls
// herald_enqueue as the connection's search_path finds it: for a function
// in another schema, add ?search_path=that_schema to DATABASE_URL.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// errRollback makes pgx.BeginFunc roll the transaction back.
var errRollback = errors.New("rolled back on purpose")

func run(ctx context.Context) error {
	tenant := cmp.Or(os.Getenv("HERALD_TENANT"), "demo")
	reservationID, err := strconv.ParseInt(cmp.Or(os.Getenv("RESERVATION_ID"), "42"), 10, 64)
	if err != nil {
		return fmt.Errorf("RESERVATION_ID: %w", err)
	}
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)

	event := producer.Event{
		TenantID:      tenant,
		EventID:       fmt.Sprintf("reservation-%d-requested", reservationID),
		Type:          "RESERVATION_REQUESTED",
		Payload:       json.RawMessage(`{"restaurant_id": 5, "customer_name": "Rossi", "pax": 4}`),
		AggregateType: "reservation",
		AggregateID:   strconv.FormatInt(reservationID, 10),
	}
	// reserve writes the reservation and its event in one transaction.
	reserve := func(commit bool) (id int64, outcome producer.Outcome, err error) {
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO reservation (id, restaurant_id, customer_name, pax)
				VALUES ($1, 5, 'Rossi', 4)`, reservationID); err != nil {
				return err
			}
			if id, outcome, err = producer.EnqueueOutcome(ctx, tx, event); err != nil {
				return err
			}
			if !commit {
				return errRollback // nothing was written
			}
			return nil
		})
		if errors.Is(err, errRollback) {
			err = nil
		}
		return id, outcome, err
	}

	_, outcome, err := reserve(false)
	if err != nil {
		return err
	}
	fmt.Printf("rollback: %s\n", outcome)
	id, outcome, err := reserve(true)
	if err != nil {
		return err
	}
	fmt.Printf("commit: %s %d\n", outcome, id)
	// The same event again (a retry after a lost COMMIT answer): a repeat.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		id, outcome, err = producer.EnqueueOutcome(ctx, tx, event)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("again: %s %d\n", outcome, id)
	return nil
}
