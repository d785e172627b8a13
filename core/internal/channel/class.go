package channel

import "slices"

// Overrides is what a rules file says explicitly about a channel's class,
// quiet hours and user types. A nil field (UserTypes: UserTypesSet false)
// leaves the value to the channel's plugin.
type Overrides struct {
	// BestEffort, when set, makes the channel best effort (true: tried
	// once) or persistent (false: retried under its retry policy),
	// whatever its plugin declares (rules: best_effort).
	BestEffort *bool
	// Intrusive, when set, says whether quiet hours hold the channel
	// (rules: intrusive).
	Intrusive *bool
	// UserTypes, with UserTypesSet, are the user types the channel
	// supports (empty: every type), whatever its plugin declares (rules:
	// user_types).
	UserTypes    []string
	UserTypesSet bool
}

// Declared is what the plugin of a channel declares about it in Describe
// (sdk.Description's Class and UserTypes).
type Declared struct {
	// Plugin names the plugin that declared it (herald-plugin-<Plugin>).
	Plugin string
	// BestEffort is Class == sdk.BestEffort.
	BestEffort bool
	// UserTypes are the user types the plugin supports (empty: every type).
	UserTypes []string
}

// Resolved is a channel's class, intrusiveness and user types in force,
// with the source of each in the words `herald rules explain` prints.
type Resolved struct {
	// BestEffort channels are tried once; the others are persistent and
	// retried under the channel's retry policy.
	BestEffort bool
	// Intrusive channels are held by quiet hours.
	Intrusive bool
	// UserTypes lists the user types the channel supports (empty: all).
	UserTypes []string
	// ClassFrom, IntrusiveFrom and UserTypesFrom say which source won:
	// FromRules, "declared by plugin NAME", or the default's reason.
	ClassFrom     string
	IntrusiveFrom string
	UserTypesFrom string
}

// Sources of a resolved value, as explain prints them.
const (
	// FromRules: the rules file sets it.
	FromRules = "set in rules"
	// FromNoPlugin: no plugin of the channel has declared its class (none
	// was described: not started yet, or `rules explain` without
	// --plugin-dir), so the channel is persistent, the safe default: a
	// delivery is retried rather than lost.
	FromNoPlugin = "no plugin declared it: persistent by default"
	// FromPersistent and FromBestEffort: intrusiveness follows the class
	// when the rules do not set it.
	FromPersistent = "a persistent channel"
	FromBestEffort = "a best-effort channel"
	// FromAllTypes: neither the rules nor the plugin restrict user types.
	FromAllTypes = "neither the rules nor the plugin restrict them"
)

// DeclaredBy is the source of a value a plugin declared.
func DeclaredBy(plugin string) string { return "declared by plugin " + plugin }

// ClassName is "best-effort" or "persistent".
func (r Resolved) ClassName() string {
	if r.BestEffort {
		return "best-effort"
	}
	return "persistent"
}

// Resolve returns c with Resolved filled in. What the rules set (c.Set)
// wins; otherwise what the channel's plugin declared (declared is nil when
// none was described); otherwise the defaults: persistent, every user
// type. Quiet hours hold a channel when the rules say so and otherwise
// when it is persistent: a persistent delivery reaches the person later
// (an e-mail, a push, an SMS), a best-effort one only now, on a screen
// they are looking at. A best-effort channel is tried once: Resolve sets
// its Retry.MaxAttempts to 1.
func (c Config) Resolve(declared *Declared) Config {
	var r Resolved
	switch {
	case c.Set.BestEffort != nil:
		r.BestEffort, r.ClassFrom = *c.Set.BestEffort, FromRules
	case declared != nil:
		r.BestEffort, r.ClassFrom = declared.BestEffort, DeclaredBy(declared.Plugin)
	default:
		r.BestEffort, r.ClassFrom = false, FromNoPlugin
	}
	switch {
	case c.Set.Intrusive != nil:
		r.Intrusive, r.IntrusiveFrom = *c.Set.Intrusive, FromRules
	case r.BestEffort:
		r.Intrusive, r.IntrusiveFrom = false, FromBestEffort
	default:
		r.Intrusive, r.IntrusiveFrom = true, FromPersistent
	}
	switch {
	case c.Set.UserTypesSet:
		r.UserTypes, r.UserTypesFrom = slices.Clone(c.Set.UserTypes), FromRules
	case declared != nil && len(declared.UserTypes) > 0:
		r.UserTypes, r.UserTypesFrom = slices.Clone(declared.UserTypes), DeclaredBy(declared.Plugin)
	default:
		r.UserTypesFrom = FromAllTypes
	}
	c.Resolved = r
	if r.BestEffort {
		c.Retry.MaxAttempts = 1
	}
	return c
}

// Clone returns a deep copy of c (providers' config maps are shared).
func (c Config) Clone() Config {
	if c.Set.BestEffort != nil {
		v := *c.Set.BestEffort
		c.Set.BestEffort = &v
	}
	if c.Set.Intrusive != nil {
		v := *c.Set.Intrusive
		c.Set.Intrusive = &v
	}
	c.Set.UserTypes = slices.Clone(c.Set.UserTypes)
	c.Resolved.UserTypes = slices.Clone(c.Resolved.UserTypes)
	c.Providers = slices.Clone(c.Providers)
	return c
}

// DeclarationOf returns the declaration of channel c: that of its first
// provider, in priority order, whose plugin has been described (describe
// says what a provider's plugin declared, and whether it is known). The
// primary provider speaks for the channel; a backup of another class
// does not change it. ok is false when no provider's plugin is known.
func DeclarationOf(c Config, describe func(Provider) (Declared, bool)) (d Declared, ok bool) {
	ps := slices.Clone(c.Providers)
	slices.SortStableFunc(ps, func(a, b Provider) int { return a.Priority - b.Priority })
	for _, p := range ps {
		if d, ok := describe(p); ok {
			return d, true
		}
	}
	return Declared{}, false
}
