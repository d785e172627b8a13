package digest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/digest"
)

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		change func(*digest.Config)
		want   string // "" when valid
	}{
		"defaults":          {func(*digest.Config) {}, ""},
		"one worker":        {func(c *digest.Config) { c.Workers = 1 }, ""},
		"largest batch":     {func(c *digest.Config) { c.BatchSize = digest.MaxBatchSize }, ""},
		"no workers":        {func(c *digest.Config) { c.Workers = 0 }, "workers"},
		"too many workers":  {func(c *digest.Config) { c.Workers = 65 }, "workers: must be at most 64"},
		"no batch":          {func(c *digest.Config) { c.BatchSize = 0 }, "batch_size"},
		"batch over bound":  {func(c *digest.Config) { c.BatchSize = digest.MaxBatchSize + 1 }, "batch_size: must be at most 5000"},
		"no poll interval":  {func(c *digest.Config) { c.PollInterval = 0 }, "poll_interval"},
		"negative interval": {func(c *digest.Config) { c.PollInterval = -time.Second }, "poll_interval"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := digest.DefaultConfig()
			tc.change(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
