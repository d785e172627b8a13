package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/config"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/sdk/producer"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

func init() {
	commands = append(commands, newMigrateCmd, newTenantsCmd, newAPIKeysCmd, newDirectoryCmd, newDeliveriesCmd, newEmitCmd, newEventsCmd)
}

func newMigrateCmd() *cobra.Command {
	var cfgPath string
	var to int64
	cmd := &cobra.Command{
		Use:   "migrate up|down|status",
		Short: "Apply or inspect database migrations",
		Long: `Apply or inspect database migrations.

up applies every pending migration, or with --to N those up to N: a long
migration (0018, 0019 and 0021 copy a whole table) can then be applied on
its own, in a window of its choosing (docs/operations.md, "Upgrading a large database").`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"up", "down", "status"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("to") && args[0] != "up" {
				return fmt.Errorf("migrate %s: --to goes with up only", args[0])
			}
			d, err := loadDaemon(cfgPath)
			if err != nil {
				return err
			}
			if args[0] == "up" {
				if cmd.Flags().Changed("to") && to <= 0 {
					return fmt.Errorf("migrate up: --to %d: a migration version is 1 or more", to)
				}
				return store.MigrateUp(cmd.Context(), d.Database.URL, to, cmd.OutOrStdout())
			}
			return store.MigrateTo(cmd.Context(), d.Database.URL, args[0], cmd.OutOrStdout())
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "with up: apply the migrations up to this version only")
	addConfigFlag(cmd, &cfgPath)
	return cmd
}

func newTenantsCmd() *cobra.Command {
	var cfgPath, name string
	cmd := &cobra.Command{Use: "tenants", Short: "Manage tenants"}
	create := &cobra.Command{
		Use:   "create TENANT_ID",
		Short: "Create a tenant (no-op when it exists)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPool(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				if err := store.EnsureTenant(ctx, q, args[0], name); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %s ready\n", args[0])
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "display name")
	addConfigFlag(create, &cfgPath)
	cmd.AddCommand(create, newTenantOriginsCmd(), newTenantWebhookCmd())
	return cmd
}

func newAPIKeysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "apikeys", Short: "Manage producer API keys: create, list, revoke, rotate"}
	var cfgPath, tenant, project, name, key string
	var expiresIn time.Duration
	var weak bool
	create := &cobra.Command{
		Use:   "create --tenant T [--project P] [--name N] [--expires-in D] [--key hk_... [--insecure-dev-key]]",
		Short: "Create an API key for a tenant and print it once (only its hash is stored)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			if key != "" && !weak && store.KeyStrength(key) < store.MinKeyBits {
				return &ExitError{Code: 2, Err: fmt.Errorf("--key: about %.0f bits of entropy, %d needed; leave --key out for a random key, or pass --insecure-dev-key for a development key",
					store.KeyStrength(key), store.MinKeyBits)}
			}
			if expiresIn < 0 {
				return &ExitError{Code: 2, Err: errors.New("--expires-in must be positive")}
			}
			return withPool(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				if err := store.EnsureTenant(ctx, q, tenant, ""); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
				}
				nk := store.NewAPIKey{TenantID: tenant, ProjectID: project, Name: name, Key: key}
				if expiresIn > 0 {
					at := time.Now().Add(expiresIn)
					nk.ExpiresAt = &at
				}
				k, secret, err := store.CreateKey(ctx, q, nk)
				if err != nil {
					return &ExitError{Code: 2, Err: err}
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "api key %s for tenant %s; shown once, store it now:\n", k.KeyID, tenant)
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				return nil
			})
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	create.Flags().StringVar(&project, "project", "", "limit the key to this project of the tenant")
	create.Flags().StringVar(&name, "name", "", "key name")
	create.Flags().DurationVar(&expiresIn, "expires-in", 0, "the key stops working after this long (default: never)")
	create.Flags().StringVar(&key, "key", "", "use this key instead of a random one (needs about 112 bits of entropy)")
	create.Flags().BoolVar(&weak, "insecure-dev-key", false, "accept a --key of any strength (development only)")
	addConfigFlag(create, &cfgPath)

	var lcfg, ltenant string
	list := &cobra.Command{
		Use:   "list --tenant T",
		Short: "List a tenant's API keys (ids, names, projects, expiry and revocation; never the keys)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ltenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			return withPool(cmd.Context(), lcfg, func(ctx context.Context, q store.Querier) error {
				keys, err := store.ListAPIKeys(ctx, q, ltenant)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "%-16s %-10s %-12s %-20s %-20s %s\n", "KEY_ID", "STATE", "PROJECT", "CREATED", "EXPIRES", "NAME")
				now := time.Now()
				for _, k := range keys {
					state, exp := "active", "never"
					if k.ExpiresAt != nil {
						exp = k.ExpiresAt.UTC().Format(time.DateTime)
					}
					switch {
					case k.RevokedAt != nil:
						state = "revoked"
					case !k.Active(now):
						state = "expired"
					}
					fmt.Fprintf(w, "%-16s %-10s %-12s %-20s %-20s %s\n", k.KeyID, state, cmp.Or(k.ProjectID, "*"),
						k.CreatedAt.UTC().Format(time.DateTime), exp, k.Name)
				}
				return nil
			})
		},
	}
	list.Flags().StringVar(&ltenant, "tenant", "", "tenant id")
	addConfigFlag(list, &lcfg)

	var rcfg, rtenant string
	revoke := &cobra.Command{
		Use:   "revoke --tenant T KEY_ID|KEY",
		Short: "Revoke an API key: the next request with it is refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rtenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			id := keyIDArg(args[0])
			return withPool(cmd.Context(), rcfg, func(ctx context.Context, q store.Querier) error {
				if err := store.RevokeAPIKey(ctx, q, rtenant, id); err != nil {
					if errors.Is(err, store.ErrNotFound) {
						return &ExitError{Code: 2, Err: fmt.Errorf("KEY_ID: tenant %s has no unrevoked key %q", rtenant, id)}
					}
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "api key %s revoked\n", id)
				return nil
			})
		},
	}
	revoke.Flags().StringVar(&rtenant, "tenant", "", "tenant id")
	addConfigFlag(revoke, &rcfg)

	var ocfg, otenant string
	var grace time.Duration
	rotate := &cobra.Command{
		Use:   "rotate --tenant T KEY_ID|KEY [--grace D]",
		Short: "Replace an API key with a new random one; the old one works for --grace more (0: revoked now)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if otenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			if grace < 0 {
				return &ExitError{Code: 2, Err: errors.New("--grace must not be negative")}
			}
			id := keyIDArg(args[0])
			return withTx(cmd.Context(), ocfg, func(ctx context.Context, q store.Querier) error {
				k, secret, err := store.RotateAPIKey(ctx, q, otenant, id, grace)
				if errors.Is(err, store.ErrNotFound) {
					return &ExitError{Code: 2, Err: fmt.Errorf("KEY_ID: tenant %s has no active key %q", otenant, id)}
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "api key %s replaces %s (which works for %s more); shown once, store it now:\n", k.KeyID, id, grace)
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				return nil
			})
		},
	}
	rotate.Flags().StringVar(&otenant, "tenant", "", "tenant id")
	rotate.Flags().DurationVar(&grace, "grace", 0, "how long the old key keeps working")
	addConfigFlag(rotate, &ocfg)
	cmd.AddCommand(create, list, revoke, rotate)
	return cmd
}

// keyIDArg accepts a key id or the key itself.
func keyIDArg(s string) string {
	if strings.HasPrefix(s, store.APIKeyPrefix) {
		return store.APIKeyID(s)
	}
	return s
}

func newDeliveriesCmd() *cobra.Command {
	var cfgPath, tenant, event, channel string
	var ids []string
	var all bool
	var extra int
	cmd := &cobra.Command{Use: "deliveries", Short: "Inspect and replay deliveries"}
	retry := &cobra.Command{
		Use:   "retry [--tenant T] [--event E] [--channel C] [--id ID]... | --all",
		Short: "Requeue FAILED deliveries (dead letters) for another round of attempts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := store.RequeueFilter{TenantID: tenant, EventID: event, Channel: channel, DeliveryIDs: ids}
			if !all && f.TenantID == "" && f.EventID == "" && f.Channel == "" && len(f.DeliveryIDs) == 0 {
				return &ExitError{Code: 2, Err: errors.New("name what to retry (--tenant, --event, --channel, --id) or pass --all")}
			}
			if extra < 1 {
				return &ExitError{Code: 2, Err: errors.New("--attempts must be at least 1")}
			}
			return withPool(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				n, err := store.RequeueFailed(ctx, q, f, extra)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "requeued %d failed deliveries\n", n)
				return nil
			})
		},
	}
	retry.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	retry.Flags().StringVar(&event, "event", "", "only this event id")
	retry.Flags().StringVar(&channel, "channel", "", "only this channel")
	retry.Flags().StringSliceVar(&ids, "id", nil, "only these delivery ids")
	retry.Flags().BoolVar(&all, "all", false, "every failed delivery")
	retry.Flags().IntVar(&extra, "attempts", 3, "attempts to allow each requeued delivery")
	addConfigFlag(retry, &cfgPath)
	cmd.AddCommand(retry)
	return cmd
}

func newEmitCmd() *cobra.Command {
	var url, key, id, typ, payload, aggType, aggID, project string
	cmd := &cobra.Command{
		Use:   "emit --type T --id ID --payload JSON",
		Short: "Post an event to a running herald over the HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return &ExitError{Code: 2, Err: errors.New("--api-key (or HERALD_API_KEY) is required")}
			}
			c := &producer.Client{BaseURL: url, APIKey: key}
			ev := producer.Event{EventID: id, ProjectID: project, Type: typ, AggregateType: aggType, AggregateID: aggID, Payload: json.RawMessage(payload)}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, created, err := c.Emit(ctx, ev)
			if err != nil {
				return err
			}
			verb := "accepted"
			if !created {
				verb = "already known"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "event %s %s (status %s)\n", st.EventID, verb, st.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", envOr("HERALD_URL", "http://127.0.0.1:8080"), "herald API base URL; env HERALD_URL")
	cmd.Flags().StringVar(&key, "api-key", os.Getenv("HERALD_API_KEY"), "tenant API key; env HERALD_API_KEY")
	cmd.Flags().StringVar(&id, "id", "", "event id (idempotency key)")
	cmd.Flags().StringVar(&typ, "type", "", "event type")
	cmd.Flags().StringVar(&payload, "payload", "{}", "JSON object")
	cmd.Flags().StringVar(&aggType, "aggregate-type", "", "aggregate type")
	cmd.Flags().StringVar(&aggID, "aggregate-id", "", "aggregate id")
	cmd.Flags().StringVar(&project, "project", "", "project of the tenant (default: the key's, or default)")
	return cmd
}

func newEventsCmd() *cobra.Command {
	var url, key string
	cmd := &cobra.Command{Use: "events", Short: "Inspect and cancel events"}
	show := &cobra.Command{
		Use:   "show EVENT_ID",
		Short: "Print an event's status and deliveries (over the HTTP API)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return &ExitError{Code: 2, Err: errors.New("events show: --api-key (or HERALD_API_KEY) is required: the tenant API key the event was posted with")}
			}
			c := &producer.Client{BaseURL: url, APIKey: key}
			st, err := c.Event(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "event %s  type %s  status %s  attempts %d\n", st.EventID, st.Type, st.Status, st.Attempts)
			if st.LastError != "" {
				fmt.Fprintf(w, "last error: %s\n", st.LastError)
			}
			fmt.Fprintf(w, "%-12s %-10s %-10s %-8s %s\n", "USER", "CHANNEL", "STATUS", "ATTEMPTS", "LAST ERROR")
			for _, d := range st.Deliveries {
				fmt.Fprintf(w, "%-12s %-10s %-10s %-8d %s\n", d.UserID, d.Channel, d.Status, d.Attempts, deliveryNote(d))
			}
			return nil
		},
	}
	show.Flags().StringVar(&url, "url", envOr("HERALD_URL", "http://127.0.0.1:8080"), "herald API base URL; env HERALD_URL")
	show.Flags().StringVar(&key, "api-key", os.Getenv("HERALD_API_KEY"), "tenant API key; env HERALD_API_KEY")
	cmd.AddCommand(show, newEventsCancelCmd())
	return cmd
}

// newEventsCancelCmd is `herald events cancel ID --tenant T`: DELETE
// /v1/events/{id} run on the database (store.CancelEvent), again (up to
// three times in all) when PostgreSQL aborted it as a deadlock's victim or
// on a serialization failure (store.Retryable).
func newEventsCancelCmd() *cobra.Command {
	var cfgPath, tenant string
	cmd := &cobra.Command{
		Use:   "cancel EVENT_ID --tenant T",
		Short: "Cancel an event still pending and every delivery of it still waiting",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := store.ValidID("tenant", tenant); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("events cancel: --tenant: %w", err)}
			}
			id := args[0]
			if msg := store.EventIDProblem(id); msg != "" {
				return &ExitError{Code: 2, Err: fmt.Errorf("events cancel: event_id: %s", msg)}
			}
			return withPool(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				var c store.Cancellation
				err := store.RetryRaces(func() error {
					var err error
					c, err = store.CancelEvent(ctx, q, tenant, id)
					return err
				})
				if errors.Is(err, store.ErrNotFound) {
					return &ExitError{Code: 1, Err: fmt.Errorf("events cancel: event_id: tenant %q has no event %q", tenant, id)}
				}
				if err != nil {
					return err
				}
				if !c.Done {
					return &ExitError{Code: 1, Err: fmt.Errorf("events cancel: nothing to cancel: event %q is %s and none of its deliveries is still waiting: %s",
						id, c.Status, c.Went())}
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "event %s  status %s\n", c.EventID, c.Status)
				fmt.Fprintf(w, "deliveries: %d cancelled, %d in flight, already final: %s\n", c.Cancelled, c.InFlight,
					store.Cancellation{Final: c.Final}.Went())
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the event's tenant (required)")
	addConfigFlag(cmd, &cfgPath)
	return cmd
}

// deliveryNote is the last column of `events show`: the last error, or
// for a waiting escalation when it is due and what calls it off
// ("escalation due 2026-03-10T21:55:00Z unless read or acted"); a sent or
// cancelled escalation says so before its reason.
func deliveryNote(d producer.DeliveryStatus) string {
	if len(d.EscalateUnless) == 0 {
		return d.LastError
	}
	unless := strings.Join(d.EscalateUnless, " or ")
	switch {
	case d.Status == store.StatusWaiting:
		return fmt.Sprintf("escalation due %s unless %s", d.NextAttemptAt.UTC().Format(time.RFC3339), unless)
	case d.LastError != "":
		return "escalation: " + d.LastError
	}
	return "escalation (unless " + unless + ")"
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// withPool runs fn with a pool to the configured database.
func withPool(ctx context.Context, cfgPath string, fn func(context.Context, store.Querier) error) error {
	d, err := loadDaemon(cfgPath)
	if err != nil {
		return err
	}
	pool, err := connect(ctx, d)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, pool)
}

// withTx runs fn in one transaction that commits when fn succeeds.
func withTx(ctx context.Context, cfgPath string, fn func(context.Context, store.Querier) error) error {
	return withConfigTx(ctx, cfgPath, func(ctx context.Context, _ *config.Daemon, tx pgx.Tx) error { return fn(ctx, tx) })
}

// withConfigTx is withTx for a command that also reads the daemon's
// settings.
func withConfigTx(ctx context.Context, cfgPath string, fn func(context.Context, *config.Daemon, pgx.Tx) error) error {
	d, err := loadDaemon(cfgPath)
	if err != nil {
		return err
	}
	pool, err := connect(ctx, d)
	if err != nil {
		return err
	}
	defer pool.Close()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(ctx, &d, tx) })
}
