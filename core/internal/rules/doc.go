// Package rules is Herald's pure rules engine: Spec → RuleSet →
// Decide / Render / Explain; no I/O.
//
// A Spec is the declarative rule set an operator writes (package rulesfile
// reads it from HCL or YAML files; tests may build one directly). New
// checks a Spec and compiles it into a RuleSet, immutable and safe for
// concurrent use. For one event, Needs says which directory data the
// decision reads; Decide, given that snapshot (a directory.Directory) and
// the time, says who is notified on which channels, which channels are
// dropped or deferred by quiet hours and why; Render fills a channel's
// templates for one recipient; Explain and ExplainUser write the same
// decision for people (`herald rules explain`, the admin explain
// endpoint).
//
// The engine reads no files, database, broker or network and starts no
// process: the daemon loads the directory, the relay stores the outcome,
// and what the plugins declare about their channels (class, user types)
// reaches the RuleSet as data. A layering test (core/layering_test.go)
// keeps it so. The domain types it shares with the rest of the daemon live
// in package channel (channel settings, providers, retry) and package
// directory (recipients, groups, members, devices, preferences).
package rules
