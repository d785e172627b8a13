package store

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable reports an error of a transaction that lost a race and may
// run again as it was: PostgreSQL aborted it as a deadlock's victim
// (40P01) or on a serialization failure (40001). The callers that retry
// (inbox and me writes, sweeps, cancels) try up to three times.
func Retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// RetryRaces runs fn, and runs it again while it fails with a Retryable
// error, three times in all; it returns fn's last error.
func RetryRaces(fn func() error) error {
	var err error
	for range 3 {
		if err = fn(); !Retryable(err) {
			return err
		}
	}
	return err
}
