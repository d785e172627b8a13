package field

import (
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	names := []string{"max_conns", "max_attempts", "batch_size"}
	for given, want := range map[string]string{
		"maxconns":              "max_conns",
		"max_con":               "max_conns",
		"batch_sise":            "batch_size",
		"listen":                "",
		"":                      "",
		strings.Repeat("x", 65): "",
		"max_conns":             "max_conns",
	} {
		if got := Suggest(given, names); got != want {
			t.Errorf("Suggest(%.20q) = %q, want %q", given, got, want)
		}
	}
}
