package pluginhost

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/sdk"
)

// TestSecretValuesOfEveryFieldType checks that the values the redactor is
// given cover every shape a secret field's value takes, map fields (the
// slack plugin's webhook URLs) included.
func TestSecretValuesOfEveryFieldType(t *testing.T) {
	t.Parallel()
	specs := []sdk.FieldSpec{
		{Name: "token", Type: sdk.FieldString, Secret: true},
		{Name: "keys", Type: sdk.FieldList, Secret: true},
		{Name: "hooks", Type: sdk.FieldMap, Secret: true},
		{Name: "raw_hooks", Type: sdk.FieldMap, Secret: true},
		{Name: "public", Type: sdk.FieldString},
	}
	cfg := map[string]any{
		"token":     "tok-1",
		"keys":      []string{"k1", "k2"},
		"hooks":     map[string]string{"ops": "https://h/1", "alerts": "https://h/2"},
		"raw_hooks": map[string]any{"x": "https://h/3"},
		"public":    "not-secret",
	}
	got := secretValues(specs, cfg)
	slices.Sort(got)
	want := []string{"https://h/1", "https://h/2", "https://h/3", "k1", "k2", "tok-1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secretValues (-want +got):\n%s", diff)
	}
}
