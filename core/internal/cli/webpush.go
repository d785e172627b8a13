package cli

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newWebPushCmd) }

func newWebPushCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webpush",
		Short: "Web Push helpers (VAPID keys for the push plugin's webpush provider)",
		Args:  cobra.NoArgs,
	}
	var asJSON bool
	keys := &cobra.Command{
		Use:   "keys [--json]",
		Short: "Generate a VAPID key pair (P-256) for the push plugin's webpush provider",
		Long: `keys generates a VAPID key pair (RFC 8292): a P-256 key whose public half,
base64url of the uncompressed point, is the applicationServerKey a web app
passes to pushManager.subscribe(), and whose private half signs the JWT
every push request carries.

Put both in the PUSH channel's push provider config (providers includes
"webpush"); keep the private key secret, e.g. in a file given as
vapid_private_key = "file:/run/secrets/vapid-private-key". Browsers'
subscriptions are bound to the public key: a new pair makes every existing
subscription fail (the push services answer 401/403) until users subscribe
again.`,
		Example: `  herald webpush keys
  herald webpush keys --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			priv, err := ecdh.P256().GenerateKey(rand.Reader)
			if err != nil {
				return fmt.Errorf("webpush keys: %w", err)
			}
			pub := base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
			key := base64.RawURLEncoding.EncodeToString(priv.Bytes())
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]string{"vapid_public_key": pub, "vapid_private_key": key})
			}
			_, err = fmt.Fprintf(out, "# VAPID key pair for the push plugin (providers = [\"webpush\"]).\n"+
				"# The public key is the web app's applicationServerKey; keep the private key secret.\n"+
				"vapid_public_key  = %q\nvapid_private_key = %q\n", pub, key)
			return err
		},
	}
	keys.Flags().BoolVar(&asJSON, "json", false, "print a JSON object instead of config lines")
	cmd.AddCommand(keys)
	return cmd
}
