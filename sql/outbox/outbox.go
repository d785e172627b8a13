// Package outbox holds install.sql, the outbox Herald forwards from a
// service's own database (herald_outbox and herald_enqueue), embedded into
// the binary for `herald outbox install` and the source stage's checks.
package outbox

import (
	_ "embed"
	"regexp"
	"strconv"
)

// InstallSQL is sql/outbox/install.sql: one transaction that installs or
// upgrades the outbox in the database it runs in.
//
//go:embed install.sql
var InstallSQL string

// Version is the outbox version install.sql installs (the row of
// herald_outbox_version); the source stage refuses a database whose
// outbox is older.
var Version = func() int {
	m := regexp.MustCompile(`INSERT INTO public\.herald_outbox_version \(version\) VALUES \((\d+)\)`).FindStringSubmatch(InstallSQL)
	if m == nil {
		panic("outbox: install.sql sets no version") // fixed at build time; a test runs the file
	}
	v, _ := strconv.Atoi(m[1])
	return v
}()
