package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/core/internal/origins"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AllowedOrigin is a browser origin a tenant lets call the end-user API
// (CORS) and open live sessions, and, with Frame, embed the hosted inbox
// page (migration 0055).
type AllowedOrigin struct {
	Origin    string    `json:"origin"`
	Frame     bool      `json:"frame"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrTooManyOrigins is the error of a write that would give a tenant more
// than origins.MaxPerTenant origins.
var ErrTooManyOrigins = fmt.Errorf("a tenant lists at most %d origins", origins.MaxPerTenant)

// ListOrigins returns the tenant's allowed origins, in order.
func ListOrigins(ctx context.Context, q Querier, tenant string) ([]AllowedOrigin, error) {
	rows, err := q.Query(ctx, `SELECT origin, frame, created_at FROM tenant_origins WHERE tenant_id = $1 ORDER BY origin`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list origins: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AllowedOrigin, error) {
		var o AllowedOrigin
		err := r.Scan(&o.Origin, &o.Frame, &o.CreatedAt)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("list origins: %w", err)
	}
	return list, nil
}

// AddOrigin allows origin (normalised first) for the tenant, or sets its
// frame flag when it is listed already. It reports the origin as stored.
func AddOrigin(ctx context.Context, q Querier, tenant, origin string, frame bool) (string, error) {
	n, err := origins.Normalize(origin)
	if err != nil {
		return "", fmt.Errorf("origin %w", err)
	}
	_, err = q.Exec(ctx, `INSERT INTO tenant_origins (tenant_id, origin, frame) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, origin) DO UPDATE SET frame = EXCLUDED.frame`, tenant, n, frame)
	if err != nil {
		return "", originError(err)
	}
	return n, nil
}

// RemoveOrigin stops allowing origin (normalised first) for the tenant;
// it reports whether the tenant listed it.
func RemoveOrigin(ctx context.Context, q Querier, tenant, origin string) (bool, error) {
	n, err := origins.Normalize(origin)
	if err != nil {
		return false, fmt.Errorf("origin %w", err)
	}
	tag, err := q.Exec(ctx, `DELETE FROM tenant_origins WHERE tenant_id = $1 AND origin = $2`, tenant, n)
	if err != nil {
		return false, fmt.Errorf("remove origin: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ReplaceOrigins makes list the tenant's whole list, in q's transaction
// (origins already normalised and distinct: the API checks them first);
// origins kept keep their created_at.
func ReplaceOrigins(ctx context.Context, q Querier, tenant string, list []AllowedOrigin) error {
	if len(list) > origins.MaxPerTenant {
		return ErrTooManyOrigins
	}
	// The trigger's lock: two replacements of one tenant's list run one
	// after the other, the second seeing the first's rows.
	if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('herald.tenant_origins:' || $1, 0))`, tenant); err != nil {
		return fmt.Errorf("replace origins: %w", err)
	}
	keep := make([]string, len(list))
	frames := make([]bool, len(list))
	for i, o := range list {
		keep[i], frames[i] = o.Origin, o.Frame
	}
	if _, err := q.Exec(ctx, `DELETE FROM tenant_origins WHERE tenant_id = $1 AND origin <> ALL ($2::text[])`, tenant, keep); err != nil {
		return fmt.Errorf("replace origins: %w", err)
	}
	_, err := q.Exec(ctx, `INSERT INTO tenant_origins (tenant_id, origin, frame)
		SELECT $1, o, f FROM unnest($2::text[], $3::boolean[]) AS u(o, f)
		ON CONFLICT (tenant_id, origin) DO UPDATE SET frame = EXCLUDED.frame`, tenant, keep, frames)
	if err != nil {
		return originError(err)
	}
	return nil
}

// OriginAllowed reports whether the tenant of q's transaction lists origin.
func OriginAllowed(ctx context.Context, q Querier, tenant, origin string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenant_origins WHERE tenant_id = $1 AND origin = $2)`, tenant, origin).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("origin allowed: %w", err)
	}
	return ok, nil
}

// OriginListed reports whether any tenant lists origin (and never which):
// what a CORS preflight, which carries no credentials, is answered on.
func OriginListed(ctx context.Context, q Querier, origin string) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT herald_origin_listed($1)`, origin).Scan(&ok); err != nil {
		return false, fmt.Errorf("origin listed: %w", err)
	}
	return ok, nil
}

// FrameOrigins returns the origins tenant lets embed the hosted inbox
// page (none for an unknown tenant).
func FrameOrigins(ctx context.Context, q Querier, tenant string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT herald_frame_origins($1)`, tenant)
	if err != nil {
		return nil, fmt.Errorf("frame origins: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("frame origins: %w", err)
	}
	return list, nil
}

// originError turns the database's refusals of a tenant_origins write into
// errors naming the origin field.
func originError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.ConstraintName == "tenant_origins_cap":
			return ErrTooManyOrigins
		case pe.ConstraintName == "tenant_origins_origin":
			return errors.New("origin is not an origin as browsers send it (scheme://host[:port])")
		case pe.Code == "23503":
			return errors.New("tenant: no such tenant")
		}
	}
	return fmt.Errorf("write origins: %w", err)
}
