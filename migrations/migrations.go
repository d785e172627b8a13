// Package migrations holds Herald's SQL schema, embedded into the binary and
// applied by goose (`herald migrate up|status`).
package migrations

import "embed"

// FS holds every NNNN_verb_noun.sql migration; schema.sql beside them,
// the schema they build in one file (make schema), is not embedded.
//
//go:embed [0-9][0-9][0-9][0-9]_*.sql
var FS embed.FS
