package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/pluginhost"
	"github.com/heraldhq/herald/core/internal/rulesfile"
	"github.com/heraldhq/herald/core/internal/source"
)

// AdminReadyPath is the admin API's readiness with reasons: GET → 200 or
// 503 ReadyStatus.
const AdminReadyPath = "/admin/v1/ready"

// readyTimeout bounds one readiness check.
const readyTimeout = 3 * time.Second

// ReadyStatus is the body of GET /admin/v1/ready.
type ReadyStatus struct {
	// Status is "ready" or "not ready".
	Status string `json:"status"`
	// Reasons says what is not ready ("database: unreachable", "broker:
	// unreachable", "channel EMAIL: no provider up (sink restarting)"); it
	// names no host, role, database or credential.
	Reasons []string `json:"reasons"`
	// Rules says whether the rules in force are what the files say: after
	// a rejected reload its state is "stale", with the problems, while the
	// last good rules keep serving (the daemon stays ready). Absent when
	// the handler has no rules watcher.
	Rules *rulesfile.Status `json:"rules,omitempty"`
	// Sources are the services' databases the daemon forwards from
	// (source blocks), each "up", "down" with its error, or "starting".
	// A source down does not make the daemon unready: its API, its
	// pipeline and the other sources work, and restarting the daemon
	// would not bring the service's database back. Absent without
	// sources.
	Sources []source.Status `json:"sources,omitempty"`
}

// Readiness returns the daemon's readiness check: the reasons it is not
// ready, none when it is. The database is not ready when a pool of pools
// does not answer a ping, the broker while conn (nil: none) is not
// connected; each of more adds its own reasons (ProviderReadiness). The
// reasons are fixed words, safe for any listener that the admin token
// guards; the errors behind them go to the log of the caller.
func Readiness(pools *Pools, conn *broker.Conn, more ...func(context.Context) []string) func(ctx context.Context) []string {
	return func(ctx context.Context) []string {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		reasons := []string{}
		if pools != nil {
			for _, p := range []*pgxpool.Pool{pools.Worker, pools.API} {
				if p != nil && p.Ping(ctx) != nil {
					reasons = append(reasons, "database: unreachable")
					break
				}
			}
		}
		if conn != nil && !conn.Connected() {
			if qte := conn.QueueTypeMismatch(); qte != nil {
				reasons = append(reasons, fmt.Sprintf("broker: %s: queue %s exists with another type", qte.Setting, qte.Queue))
			} else {
				reasons = append(reasons, "broker: unreachable")
			}
		}
		for _, check := range more {
			reasons = append(reasons, check(ctx)...)
		}
		return reasons
	}
}

// ProviderReadiness is the readiness check of the plugin host whose
// providers status reports: a channel is not ready while none of its
// providers serves (every one starting, restarting, refused, stopped or
// with its circuit breaker open and not yet ready for its probe: see
// pluginhost.ProviderStatus.Up), with the reason "channel EMAIL: no
// provider up (sink restarting, ses circuit_open)". A channel none of the
// rules configures is not the host's, and not checked.
func ProviderReadiness(status func() []pluginhost.ProviderStatus) func(context.Context) []string {
	return func(context.Context) []string {
		var order []string
		states := map[string][]string{}
		up := map[string]bool{}
		for _, p := range status() {
			if _, seen := states[p.Channel]; !seen {
				order = append(order, p.Channel)
			}
			states[p.Channel] = append(states[p.Channel], p.Provider+" "+string(p.State))
			up[p.Channel] = up[p.Channel] || p.Up()
		}
		sort.Strings(order)
		var reasons []string
		for _, ch := range order {
			if !up[ch] {
				reasons = append(reasons, fmt.Sprintf("channel %s: no provider up (%s)", ch, strings.Join(states[ch], ", ")))
			}
		}
		return reasons
	}
}

// readyErr is check as the api.Server's Ready func.
func readyErr(check func(context.Context) []string) func(context.Context) error {
	return func(ctx context.Context) error {
		if rs := check(ctx); len(rs) > 0 {
			return errors.New(strings.Join(rs, "; "))
		}
		return nil
	}
}

// ReadyHandler serves GET /admin/v1/ready on the admin listener: 200
// {"status":"ready","reasons":[]} or 503 {"status":"not ready","reasons":[...]},
// with the rules' status when rulesStatus is not nil and the sources'
// when sources are given.
func ReadyHandler(check func(context.Context) []string, rulesStatus func() rulesfile.Status, sources ...func() []source.Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := ReadyStatus{Status: "ready", Reasons: check(r.Context())}
		if rulesStatus != nil {
			rs := rulesStatus()
			st.Rules = &rs
		}
		for _, s := range sources {
			st.Sources = append(st.Sources, s()...)
		}
		code := http.StatusOK
		if len(st.Reasons) > 0 {
			st.Status, code = "not ready", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(st)
	})
}
