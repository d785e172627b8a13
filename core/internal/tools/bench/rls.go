package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/store"
)

// RLSMode is how row-level security binds the pipeline of a run's
// daemons. The relay writes deliveries with COPY when row-level security
// is not active for its session on deliveries and with INSERT ... unnest
// when it is (PostgreSQL refuses COPY FROM under row-level security), so
// the modes measure what the isolation of migration 0007 costs the
// fan-out.
type RLSMode string

const (
	// RLSWorker, the zero value, runs the pipeline as herald_worker, the
	// daemon's default database.worker_role. Where herald_worker has
	// BYPASSRLS (`herald db roles` or scripts/servers.sh run as a
	// superuser) the relay keeps COPY.
	RLSWorker RLSMode = ""
	// RLSPolicies runs the pipeline as the login role (database.worker_role
	// = ""), the tables' owner, which FORCE ROW LEVEL SECURITY binds: every
	// row passes the policies and the relay writes by INSERT.
	RLSPolicies RLSMode = "policies"
	// RLSOff disables row-level security on every table of the run's
	// database after migrating it, as before migration 0007: the baseline.
	// The pipeline runs as herald_worker.
	RLSOff RLSMode = "off"
)

// valid reports whether m is one of the modes.
func (m RLSMode) valid() bool { return m == RLSWorker || m == RLSPolicies || m == RLSOff }

// workerRole is the database.worker_role the daemons of the mode run with
// ("" keeps the login role).
func (m RLSMode) workerRole() string {
	if m == RLSPolicies {
		return ""
	}
	return store.RoleWorker
}

// String describes the mode for the report.
func (m RLSMode) String() string {
	switch m {
	case RLSWorker:
		return "pipeline as " + store.RoleWorker
	case RLSPolicies:
		return "pipeline as the tables' owner, bound by the policies"
	case RLSOff:
		return "row-level security disabled on every table"
	}
	return fmt.Sprintf("unknown row-level security mode %q", string(m))
}

// disableRLS turns row-level security off on every table of the public
// schema: NO FORCE, then DISABLE. pool's role must own the tables.
func disableRLS(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public' LOOP
        EXECUTE format('ALTER TABLE public.%I NO FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE public.%I DISABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$`)
	if err != nil {
		return fmt.Errorf("bench: disable row-level security: %w", err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND (c.relrowsecurity OR c.relforcerowsecurity)`).Scan(&left); err != nil {
		return fmt.Errorf("bench: disable row-level security: %w", err)
	}
	if left > 0 {
		return fmt.Errorf("bench: disable row-level security: %d tables still have it", left)
	}
	return nil
}

// relayRowSecurity reports whether row-level security is active on
// deliveries for a session like the relay's of the mode: the login role of
// pool, under SET ROLE to the mode's worker role. The relay asks the same
// question (row_security_active) to choose between COPY and INSERT.
func relayRowSecurity(ctx context.Context, pool *pgxpool.Pool, mode RLSMode) (bool, error) {
	var active bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if role := mode.workerRole(); role != "" {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT row_security_active('deliveries')`).Scan(&active)
	})
	if err != nil {
		return false, fmt.Errorf("bench: row security of the relay: %w", err)
	}
	return active, nil
}

// relayWrite names how the relay writes deliveries when row-level security
// is active for it or not.
func relayWrite(rlsActive bool) string {
	if rlsActive {
		return "INSERT"
	}
	return "COPY"
}
