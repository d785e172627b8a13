package channel_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/channel"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	bestEffort := &channel.Declared{Plugin: "websocket", BestEffort: true}
	persistent := &channel.Declared{Plugin: "email", UserTypes: []string{"STAFF"}}
	tests := map[string]struct {
		set         channel.Overrides
		declared    *channel.Declared
		want        channel.Resolved
		maxAttempts int
	}{
		"declared best effort, no override: tried once, not intrusive": {
			declared: bestEffort,
			want: channel.Resolved{BestEffort: true, ClassFrom: "declared by plugin websocket",
				IntrusiveFrom: channel.FromBestEffort, UserTypesFrom: channel.FromAllTypes},
			maxAttempts: 1,
		},
		"declared best effort, rules say persistent: retried, intrusive": {
			set: channel.Overrides{BestEffort: &no}, declared: bestEffort,
			want: channel.Resolved{ClassFrom: channel.FromRules, Intrusive: true,
				IntrusiveFrom: channel.FromPersistent, UserTypesFrom: channel.FromAllTypes},
			maxAttempts: 5,
		},
		"declared persistent with user types": {
			declared: persistent,
			want: channel.Resolved{ClassFrom: "declared by plugin email", Intrusive: true, IntrusiveFrom: channel.FromPersistent,
				UserTypes: []string{"STAFF"}, UserTypesFrom: "declared by plugin email"},
			maxAttempts: 5,
		},
		"rules set everything": {
			set:      channel.Overrides{BestEffort: &yes, Intrusive: &yes, UserTypes: []string{"ADMIN"}, UserTypesSet: true},
			declared: persistent,
			want: channel.Resolved{BestEffort: true, ClassFrom: channel.FromRules, Intrusive: true, IntrusiveFrom: channel.FromRules,
				UserTypes: []string{"ADMIN"}, UserTypesFrom: channel.FromRules},
			maxAttempts: 1,
		},
		"rules set every user type over the plugin's list": {
			set: channel.Overrides{UserTypesSet: true}, declared: persistent,
			want: channel.Resolved{ClassFrom: "declared by plugin email", Intrusive: true, IntrusiveFrom: channel.FromPersistent,
				UserTypesFrom: channel.FromRules},
			maxAttempts: 5,
		},
		"nothing declared: persistent by default": {
			want: channel.Resolved{ClassFrom: channel.FromNoPlugin, Intrusive: true, IntrusiveFrom: channel.FromPersistent,
				UserTypesFrom: channel.FromAllTypes},
			maxAttempts: 5,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := channel.Config{Name: "X", Set: tc.set, Retry: channel.DefaultRetry}
			got := c.Resolve(tc.declared)
			if diff := cmp.Diff(tc.want, got.Resolved); diff != "" {
				t.Errorf("Resolved (-want +got):\n%s", diff)
			}
			if got.Retry.MaxAttempts != tc.maxAttempts {
				t.Errorf("Retry.MaxAttempts = %d, want %d", got.Retry.MaxAttempts, tc.maxAttempts)
			}
			if c.Retry.MaxAttempts != channel.DefaultRetry.MaxAttempts {
				t.Error("Resolve changed its receiver")
			}
		})
	}
}

func TestDeclarationOf(t *testing.T) {
	t.Parallel()
	c := channel.Config{Providers: []channel.Provider{
		{Name: "backup", Plugin: "b", Priority: 2},
		{Name: "primary", Plugin: "a", Priority: 1},
		{Name: "third", Plugin: "c", Priority: 3},
	}}
	known := map[string]channel.Declared{
		"b": {Plugin: "b", BestEffort: true},
		"c": {Plugin: "c"},
	}
	describe := func(p channel.Provider) (channel.Declared, bool) {
		d, ok := known[p.Plugin]
		return d, ok
	}
	// The primary (a) is not described yet: the next by priority speaks.
	if d, ok := channel.DeclarationOf(c, describe); !ok || d.Plugin != "b" {
		t.Errorf("DeclarationOf = %+v, %v; want plugin b's", d, ok)
	}
	known["a"] = channel.Declared{Plugin: "a"}
	if d, ok := channel.DeclarationOf(c, describe); !ok || d.Plugin != "a" {
		t.Errorf("DeclarationOf = %+v, %v; want plugin a's", d, ok)
	}
	if _, ok := channel.DeclarationOf(channel.Config{}, describe); ok {
		t.Error("a channel without providers has a declaration")
	}
}
