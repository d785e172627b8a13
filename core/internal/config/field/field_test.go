package field

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMerge: a component's field errors take its section as a prefix;
// an error that is not a field error becomes one of the section.
func TestMerge(t *testing.T) {
	t.Parallel()
	var relay Errors
	relay.Positive("workers", 0)
	relay.PositiveDuration("poll_interval", -time.Second)
	var all Errors
	all.Merge("relay", relay.Err())
	all.Merge("http", &Error{Field: "rate_limit.burst", Msg: "must be at least 1"})
	all.Merge("plugins", errors.New("channel \"X\" is configured twice"))
	all.Merge("log", nil)
	all.Merge("", Errors{{Field: "rules", Msg: "empty"}})
	want := Errors{
		{Field: "relay.workers", Msg: "must be positive, got 0"},
		{Field: "relay.poll_interval", Msg: "must be a positive duration, got -1s"},
		{Field: "http.rate_limit.burst", Msg: "must be at least 1"},
		{Field: "plugins", Msg: "channel \"X\" is configured twice"},
		{Field: "rules", Msg: "empty"},
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if got := (Errors{{Field: "a", Msg: "x"}, {Msg: "y"}}).Error(); got != "a: x; y" {
		t.Fatalf("Error() = %q", got)
	}
	if (Errors{}).Err() != nil {
		t.Fatal("no errors: want a nil error")
	}
}
