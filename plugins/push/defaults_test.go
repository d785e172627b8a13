package main

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

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
	want := map[string]string{FieldEndpoint: DefaultEndpoint, FieldTimeout: DefaultTimeout.String(), FieldConcurrency: strconv.Itoa(DefaultConcurrency), FieldValidateOnly: "false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tag defaults (-want +got):\n%s", diff)
	}
}
