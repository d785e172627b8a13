// Package field is the error type of settings: each component's
// Config.Validate returns the settings it refuses as Errors, each naming
// its key (relative to the component: "batch_size"), and the daemon's
// config prefixes them with the component's section ("relay.batch_size").
// Suggest names the known key closest to a misspelt one, for the daemon
// file and the rules files alike. It imports nothing of Herald's, so that
// every component can use it.
package field

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Error is one setting refused: Field is its key ("batch_size",
// "relay.batch_size", "amqp.urls[1]"), Msg says what is wrong with it.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Errors is every setting a Validate refused, in the order it checked them.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Add records that field is wrong: msg formatted with args.
func (es *Errors) Add(field, msg string, args ...any) {
	*es = append(*es, &Error{Field: field, Msg: fmt.Sprintf(msg, args...)})
}

// Merge records the errors of a component's Validate under section (its
// key prefix; "" keeps the keys as they are). An error that is not a
// field error is recorded as an error of section itself.
func (es *Errors) Merge(section string, err error) {
	if err == nil {
		return
	}
	var list Errors
	var one *Error
	switch {
	case errors.As(err, &list):
	case errors.As(err, &one):
		list = Errors{one}
	default:
		list = Errors{{Msg: err.Error()}}
	}
	for _, e := range list {
		*es = append(*es, &Error{Field: Join(section, e.Field), Msg: e.Msg})
	}
}

// Err returns es as an error, nil when it is empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Join joins key paths with dots, skipping empty ones.
func Join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// Positive records an error unless v > 0.
func (es *Errors) Positive(field string, v int) {
	if v <= 0 {
		es.Add(field, "must be positive, got %d", v)
	}
}

// PositiveDuration records an error unless d > 0.
func (es *Errors) PositiveDuration(field string, d time.Duration) {
	if d <= 0 {
		es.Add(field, "must be a positive duration, got %s", d)
	}
}

// NotEmpty records an error when s is empty.
func (es *Errors) NotEmpty(field, s string) {
	if s == "" {
		es.Add(field, "must not be empty")
	}
}
