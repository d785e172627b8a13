package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/internal/liveproto"
	"github.com/heraldhq/herald/sdk"
)

// TestTagDefaultsMatchConstants checks that the defaults written in
// Config's tags (what the host shows and applies) are the Default constants
// the code and docs name.
func TestTagDefaultsMatchConstants(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, s := range sdk.MustConfigFields(Config{}) {
		if s.Default != "" {
			got[s.Name] = s.Default
		}
	}
	want := map[string]string{FieldAMQPURL: DefaultAMQPURL, FieldExchange: liveproto.DefaultExchange, FieldPublishTimeout: DefaultPublishTimeout.String()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tag defaults (-want +got):\n%s", diff)
	}
}
