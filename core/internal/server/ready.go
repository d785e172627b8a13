package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/core/internal/broker"
	"github.com/heraldhq/herald/core/internal/config"
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
	// unreachable"); it names no host, role, database or credential.
	Reasons []string `json:"reasons"`
	// Rules says whether the rules in force are what the files say: after
	// a rejected reload its state is "stale", with the problems, while the
	// last good rules keep serving (the daemon stays ready). Absent when
	// the handler has no rules watcher.
	Rules *config.RulesStatus `json:"rules,omitempty"`
}

// Readiness returns the daemon's readiness check: the reasons it is not
// ready, none when it is. The database is not ready when a pool of pools
// does not answer a ping, the broker while conn (nil: none) is not
// connected. The reasons are fixed words, safe for any listener that the
// admin token guards; the errors behind them go to the log of the caller.
func Readiness(pools *Pools, conn *broker.Conn) func(ctx context.Context) []string {
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
// with the rules' status when rulesStatus is not nil.
func ReadyHandler(check func(context.Context) []string, rulesStatus func() config.RulesStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := ReadyStatus{Status: "ready", Reasons: check(r.Context())}
		if rulesStatus != nil {
			rs := rulesStatus()
			st.Rules = &rs
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
