package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EnsureProducerRole creates (or updates) the login role of a producer
// service and grants it exactly tenants (migration 0045): connected as
// role, the service may enqueue events for those tenants through
// herald_enqueue, and for no other; a tenant it had before and is not in
// tenants is taken away. An empty password leaves the role's password as
// it is (none for a new role: peer or trust authentication). Run it in one
// transaction with the tenants' creation.
func EnsureProducerRole(ctx context.Context, q Querier, role, password string, tenants []string) error {
	if !rolePattern.MatchString(role) {
		return fmt.Errorf("producer role %q must be 1-63 characters of a-z 0-9 _ and start with a letter or _", role)
	}
	if strings.HasPrefix(role, "herald_") || strings.HasPrefix(role, "pg_") {
		return fmt.Errorf("producer role %q: the prefixes herald_ and pg_ are reserved", role)
	}
	if len(tenants) == 0 {
		return errors.New("producer role: at least one tenant is required")
	}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
		return fmt.Errorf("producer role: %w", err)
	}
	id := pgx.Identifier{role}.Sanitize()
	if !exists {
		if _, err := q.Exec(ctx, "CREATE ROLE "+id+" LOGIN"); err != nil {
			return fmt.Errorf("producer role: create %s: %w", role, err)
		}
	} else {
		var bad bool
		if err := q.QueryRow(ctx, `SELECT rolsuper OR rolbypassrls OR pg_has_role($1, 'herald_worker', 'USAGE')
			OR pg_has_role($1, 'herald_admin', 'USAGE') OR pg_has_role($1, 'herald_api', 'USAGE') FROM pg_roles WHERE rolname = $1`, role).Scan(&bad); err != nil {
			return fmt.Errorf("producer role: %w", err)
		}
		if bad {
			return fmt.Errorf("producer role %q already exists and sees more than one tenant (superuser, BYPASSRLS, or a member of herald_api, herald_worker or herald_admin)", role)
		}
	}
	if password != "" {
		// The password goes in as a literal: utility statements take no
		// parameters.
		if _, err := q.Exec(ctx, "ALTER ROLE "+id+" LOGIN PASSWORD "+quoteLiteral(password)); err != nil {
			return fmt.Errorf("producer role: set password: %w", err)
		}
	}
	if _, err := q.Exec(ctx, "GRANT herald_producer TO "+id); err != nil && !isDuplicate(err) {
		return fmt.Errorf("producer role: grant herald_producer: %w", err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM herald_producer_roles WHERE role_name = $1 AND NOT tenant_id = ANY($2)`, role, tenants); err != nil {
		return fmt.Errorf("producer role: revoke tenants: %w", err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO herald_producer_roles (role_name, tenant_id) SELECT $1, t FROM unnest($2::text[]) t
		ON CONFLICT (role_name, tenant_id) DO NOTHING`, role, tenants); err != nil {
		return fmt.Errorf("producer role: grant tenants: %w", err)
	}
	return nil
}

// ProducerTenants returns the tenants the producer role may enqueue for,
// sorted (none: an empty slice).
func ProducerTenants(ctx context.Context, q Querier, role string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT tenant_id FROM herald_producer_roles WHERE role_name = $1`, role)
	if err != nil {
		return nil, fmt.Errorf("producer role tenants: %w", err)
	}
	ts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("producer role tenants: %w", err)
	}
	slices.Sort(ts)
	return ts, nil
}
