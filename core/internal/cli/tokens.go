package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/auth"
	"github.com/heraldhq/herald/core/internal/store"
	"github.com/spf13/cobra"
)

func init() {
	commands = append(commands, newTokensCmd)
}

// newTokensCmd is `herald tokens`: the keys tenants sign their users'
// tokens with, and a development token issuer.
func newTokensCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "End-user tokens: the keys each tenant signs them with"}
	keys := &cobra.Command{Use: "keys", Short: "Manage a tenant's token keys"}

	var cfgPath, tenant, kid, issuer, secretFile, jwksFile string
	var generate bool
	add := &cobra.Command{
		Use:   "add --tenant T --issuer ISS (--kid K (--hs256-secret-file F | --generate-hs256) | --jwks FILE)",
		Short: "Register keys a tenant's backend signs its users' JWTs with",
		Long: `Registers keys of tenant T. A token is accepted only under a key of the
tenant its "tenant" claim names, selected by the token's kid header, signed
with the key's algorithm, with the key's issuer (iss), herald serve's
audience (auth.audience) and a lifetime (exp - iat) no longer than
auth.max_token_lifetime. Claims: tenant, sub (the user id), user_type,
roles, project (optional), iss, aud, iat, exp.

  --jwks FILE               public keys (RS256, ES256 or EdDSA) with their kid and alg
  --hs256-secret-file FILE  a shared HS256 secret (at least 32 bytes) named --kid
  --generate-hs256          a random HS256 secret named --kid, printed once (base64)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" || issuer == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant and --issuer are required")}
			}
			modes := 0
			for _, on := range []bool{jwksFile != "", secretFile != "", generate} {
				if on {
					modes++
				}
			}
			if modes != 1 {
				return &ExitError{Code: 2, Err: errors.New("give exactly one of --jwks, --hs256-secret-file and --generate-hs256")}
			}
			var ks []store.TokenKey
			var shown []byte
			switch {
			case jwksFile != "":
				doc, err := readBounded(jwksFile, auth.MaxJWKSBytes)
				if err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--jwks: %w", err)}
				}
				if ks, err = auth.KeysFromJWKS(tenant, issuer, doc); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--jwks %s: %w", jwksFile, err)}
				}
			default:
				if kid == "" {
					return &ExitError{Code: 2, Err: errors.New("--kid is required for an HS256 key")}
				}
				var secret []byte
				var err error
				if generate {
					if secret, err = auth.NewSecret(); err != nil {
						return err
					}
					shown = secret
				} else if secret, err = readBounded(secretFile, 4096); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--hs256-secret-file: %w", err)}
				}
				secret = []byte(strings.TrimRight(string(secret), "\r\n"))
				if len(secret) < auth.MinSecretLen {
					return &ExitError{Code: 2, Err: fmt.Errorf("--hs256-secret-file: the secret has %d bytes; at least %d are needed", len(secret), auth.MinSecretLen)}
				}
				ks = []store.TokenKey{{TenantID: tenant, Kid: kid, Alg: "HS256", Issuer: issuer, Key: secret}}
			}
			return withTx(cmd.Context(), cfgPath, func(ctx context.Context, q store.Querier) error {
				if err := store.EnsureTenant(ctx, q, tenant, ""); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--tenant: %w", err)}
				}
				for _, k := range ks {
					if err := store.AddTokenKey(ctx, q, k); err != nil {
						return &ExitError{Code: 2, Err: err}
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "key %s (%s) of tenant %s, issuer %s\n", k.Kid, k.Alg, tenant, issuer)
				}
				if shown != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "the HS256 secret, base64 (shown once; your backend signs with its decoded bytes):")
					fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(shown))
				}
				return nil
			})
		},
	}
	add.Flags().StringVar(&tenant, "tenant", "", "tenant id")
	add.Flags().StringVar(&kid, "kid", "", "key id (HS256)")
	add.Flags().StringVar(&issuer, "issuer", "", "the iss claim tokens under these keys carry")
	add.Flags().StringVar(&secretFile, "hs256-secret-file", "", "file holding an HS256 secret")
	add.Flags().BoolVar(&generate, "generate-hs256", false, "make a random HS256 secret and print it once")
	add.Flags().StringVar(&jwksFile, "jwks", "", "JWKS file of public keys")
	addConfigFlag(add, &cfgPath)

	var lcfg, ltenant string
	list := &cobra.Command{
		Use:   "list --tenant T",
		Short: "List a tenant's token keys (never the key material)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if ltenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			return withPool(cmd.Context(), lcfg, func(ctx context.Context, q store.Querier) error {
				ks, err := store.ListTokenKeys(ctx, q, ltenant)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "%-20s %-6s %-8s %-20s %s\n", "KID", "ALG", "STATE", "CREATED", "ISSUER")
				for _, k := range ks {
					state := "active"
					if k.RevokedAt != nil {
						state = "revoked"
					}
					fmt.Fprintf(w, "%-20s %-6s %-8s %-20s %s\n", k.Kid, k.Alg, state, k.CreatedAt.UTC().Format(time.DateTime), k.Issuer)
				}
				return nil
			})
		},
	}
	list.Flags().StringVar(&ltenant, "tenant", "", "tenant id")
	addConfigFlag(list, &lcfg)

	var rcfg, rtenant string
	revoke := &cobra.Command{
		Use:   "revoke --tenant T KID",
		Short: "Revoke a token key: tokens under it are refused within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rtenant == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant is required")}
			}
			return withPool(cmd.Context(), rcfg, func(ctx context.Context, q store.Querier) error {
				if err := store.RevokeTokenKey(ctx, q, rtenant, args[0]); err != nil {
					if errors.Is(err, store.ErrNotFound) {
						return &ExitError{Code: 2, Err: fmt.Errorf("KID: tenant %s has no active key %q", rtenant, args[0])}
					}
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "token key %s of tenant %s revoked\n", args[0], rtenant)
				return nil
			})
		},
	}
	revoke.Flags().StringVar(&rtenant, "tenant", "", "tenant id")
	addConfigFlag(revoke, &rcfg)
	keys.AddCommand(add, list, revoke)

	var icfg, itenant, ikid, user, userType, project string
	var roles []string
	var ttl time.Duration
	issue := &cobra.Command{
		Use:   "issue --tenant T --kid K --user U [--user-type X] [--roles A,B] [--project P] [--ttl D]",
		Short: "Sign a user token with a tenant's HS256 key (development and demos; backends sign their own)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if itenant == "" || ikid == "" || user == "" {
				return &ExitError{Code: 2, Err: errors.New("--tenant, --kid and --user are required")}
			}
			d, err := loadDaemon(icfg)
			if err != nil {
				return err
			}
			if ttl <= 0 || ttl > d.Auth.MaxTokenLifetime {
				return &ExitError{Code: 2, Err: fmt.Errorf("--ttl must be positive and at most auth.max_token_lifetime (%s)", d.Auth.MaxTokenLifetime)}
			}
			return withPool(cmd.Context(), icfg, func(ctx context.Context, q store.Querier) error {
				k, err := store.GetTokenKey(ctx, q, itenant, ikid)
				if errors.Is(err, store.ErrNotFound) {
					return &ExitError{Code: 2, Err: fmt.Errorf("--kid: tenant %s has no active key %q", itenant, ikid)}
				}
				if err != nil {
					return err
				}
				aud, err := auth.ResolveAudience(ctx, q, d.Auth)
				if err != nil {
					return err
				}
				tok, err := auth.Issue(k, aud, auth.User{UserID: user, UserType: userType, Roles: roles, Project: project}, ttl, time.Now())
				if err != nil {
					return &ExitError{Code: 2, Err: err}
				}
				fmt.Fprintln(cmd.OutOrStdout(), tok)
				return nil
			})
		},
	}
	issue.Flags().StringVar(&itenant, "tenant", "", "tenant id")
	issue.Flags().StringVar(&ikid, "kid", "", "the tenant's HS256 key")
	issue.Flags().StringVar(&user, "user", "", "user id (sub)")
	issue.Flags().StringVar(&userType, "user-type", "", "user type")
	issue.Flags().StringSliceVar(&roles, "roles", nil, "roles")
	issue.Flags().StringVar(&project, "project", "", "limit the user to a project")
	issue.Flags().DurationVar(&ttl, "ttl", 10*time.Minute, "lifetime")
	addConfigFlag(issue, &icfg)
	cmd.AddCommand(keys, issue)
	return cmd
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
