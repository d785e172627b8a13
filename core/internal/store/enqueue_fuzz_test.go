package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/heraldhq/herald/sdk/producer/jsonguard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// FuzzEnqueueAgreesWithValidate feeds the same event to sdk/producer's
// Event.Validate (the API's check) and to the database's herald_enqueue:
// both accept it or both refuse it, with the same words (the field type is
// the function's event_type) and the field in the error's COLUMN. Inputs
// PostgreSQL refuses before the function runs (invalid UTF-8, NUL, text
// that is not JSON or that jsonguard refuses) are left out: they never
// reach it.
func FuzzEnqueueAgreesWithValidate(f *testing.F) {
	db := testenv.Postgres(f)
	ctx := context.Background()
	if err := store.EnsureTenant(ctx, db.Pool, "a", ""); err != nil {
		f.Fatal(err)
	}
	for _, s := range [][4]string{
		{"e-1", "ORDER_PLACED", "o-1", `{"a": {"b": [1, "x"]}}`},
		{"e 1", "T", "", `{}`},
		{"évt", "T", "", `{}`},
		{"e1", "T\u0085", "", `{}`},
		{"e1", "T", "a\tb", `{}`},
		{"", "T", "", `{}`},
		{"e1", "", "", `{}`},
		{"e1", "T", "", `[1]`},
		{"e1", "T", "", `null`},
		{"e1", "T", "", `{"a": 1e400}`},
		{"e1", "T", "", `{"a": -1.7976931348623159e308}`},
		{"e1", "T", "", `{"a": 1.7976931348623157e308}`},
		{"e1", "T", "", strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33)},
		{strings.Repeat("~", 201), "T", "", `{}`},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, eventID, typ, aggregateID, payload string) {
		for _, s := range []string{eventID, typ, aggregateID, payload} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				return
			}
		}
		if payload == "" || !json.Valid([]byte(payload)) || jsonguard.Check([]byte(payload), 0) != nil || len(payload) > 100_000 {
			return
		}
		verr := producer.Event{TenantID: "a", EventID: eventID, Type: typ, AggregateID: aggregateID, Payload: json.RawMessage(payload)}.Validate()
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT herald_enqueue('a', $1, $2, $3::jsonb, aggregate_id => $4)`, eventID, typ, payload, aggregateID)
			if err != nil {
				return err
			}
			return errRollback // leave nothing behind: every input is new
		})
		if errors.Is(err, errRollback) {
			err = nil
		}
		var fe *producer.FieldError
		var pe *pgconn.PgError
		switch {
		case verr == nil && err == nil:
		case verr == nil:
			t.Fatalf("Validate accepts, herald_enqueue refuses: %v", err)
		case err == nil:
			t.Fatalf("Validate refuses (%v), herald_enqueue accepts", verr)
		case !errors.As(verr, &fe) || !errors.As(err, &pe):
			t.Fatalf("Validate: %v; herald_enqueue: %v", verr, err)
		default:
			field, words := fe.Field, fe.Error()
			if field == "type" {
				field, words = "event_type", "event_type"+strings.TrimPrefix(words, "type")
			}
			if field == "payload" && strings.HasPrefix(fe.Msg, "is ") && strings.Contains(fe.Msg, " bytes, more than ") {
				return // the size as sent and as stored differ
			}
			if pe.Code != "23514" || pe.ColumnName != field || pe.Message != words {
				t.Fatalf("Validate: %q\nherald_enqueue: SQLSTATE %s column %q %q", words, pe.Code, pe.ColumnName, pe.Message)
			}
		}
	})
}
