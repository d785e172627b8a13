package server

import (
	"sync"
	"sync/atomic"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/rules"
)

// RulesInForce is the rule set the daemon decides with: the rules files'
// current rule set, with each channel's class and user types taken from
// what its plugin declares in Describe unless the rules set them. Refresh
// recomputes it; call it when the rules change and when a plugin's
// declaration does (pluginhost.Host.OnDeclared).
type RulesInForce struct {
	rules    func() *rules.RuleSet
	declared func() map[string]channel.Declared

	mu  sync.Mutex // one Refresh at a time: the last one reads the latest of both
	cur atomic.Pointer[rules.RuleSet]
}

// NewRulesInForce returns the rule set of current with the declarations
// of declared, computed once.
func NewRulesInForce(current func() *rules.RuleSet, declared func() map[string]channel.Declared) *RulesInForce {
	r := &RulesInForce{rules: current, declared: declared}
	r.Refresh()
	return r
}

// Refresh recomputes the rule set in force.
func (r *RulesInForce) Refresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.Store(r.rules().WithDeclared(r.declared()))
}

// Current returns the rule set in force. It is safe for concurrent use.
func (r *RulesInForce) Current() *rules.RuleSet { return r.cur.Load() }
