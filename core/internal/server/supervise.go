package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Phase orders a stage's stop: on shutdown the supervisor ends the
// stages of one phase and waits for them to return before it ends the
// next phase's, so that work stops at the intake first and what was
// taken is finished and recorded.
type Phase int

// The phases, in the order they stop.
const (
	// PhaseIntake: the HTTP listeners, the live gateway, the action
	// publisher and the rules watcher. No new request or reload comes in.
	PhaseIntake Phase = iota
	// PhaseRelay: the relay (and its LISTEN session) stops claiming
	// events; a batch under way rolls back and is claimed again later.
	PhaseRelay
	// PhasePublish: the handoff waits for the confirms of what it
	// published and leaves what it did not publish due for any publisher;
	// the publisher and the maintenance stage stop.
	PhasePublish
	// PhaseDeliver: the listeners stop consuming, finish the batches in
	// flight, record their outcomes and ack (or nack) their messages.
	PhaseDeliver
	// PhasePlugins: the plugin host closes its plugins and the broker
	// connection closes; the liveness lock is held until here and dropped
	// once every stage stopped.
	PhasePlugins
	numPhases
)

// Supervisor runs every stage of `herald serve` and stops them in order.
//
// A stage runs until its context ends. A stage that returns an error,
// panics, or returns while the daemon still runs has failed: the
// supervisor logs one line naming the stage and the error ("stage
// failed; stopping the daemon"), stops the others in order and Run
// returns the failure, so `herald serve` exits non-zero and systemd or
// Kubernetes restart it. Stages retry inside themselves what they can get
// over (a broker or database connection lost, a plugin crash, a rules
// file that does not parse); what reaches the supervisor is fatal.
//
// Shutdown (the context of Run ends, or a stage failed) is bounded by the
// grace period: when stages still run at its end, Run logs which and
// returns an error without waiting for them.
//
// It is errgroup's shape (first failure cancels, one error back) with two
// things errgroup and oklog/run do not do: stop in phases rather than all
// at once, and give up waiting at a deadline (their Wait waits for every
// goroutine, however long a plugin Send hangs).
type Supervisor struct {
	log    hclog.Logger
	grace  time.Duration
	stages []*stage
	hurry  chan struct{}
	once   sync.Once
}

type stage struct {
	name  string
	phase Phase
	run   func(context.Context) error
	done  chan struct{}
	err   error // set before done is closed
}

// NewSupervisor returns a supervisor whose shutdown takes at most grace.
func NewSupervisor(log hclog.Logger, grace time.Duration) *Supervisor {
	return &Supervisor{log: log, grace: grace, hurry: make(chan struct{})}
}

// Hurry ends the grace period of a shutdown at once (an operator's second
// SIGTERM or SIGINT): Run returns a *GraceError naming what still runs.
// Before the shutdown it only marks the grace period as spent.
func (s *Supervisor) Hurry() {
	s.once.Do(func() { close(s.hurry) })
}

// Add adds a stage named name (the name the log and the errors use) that
// stops in phase. Call it before Run.
func (s *Supervisor) Add(phase Phase, name string, run func(context.Context) error) {
	if phase < 0 || phase >= numPhases {
		panic(fmt.Sprintf("server: stage %s: phase %d out of range", name, phase))
	}
	s.stages = append(s.stages, &stage{name: name, phase: phase, run: run, done: make(chan struct{})})
}

// ErrStoppedEarly is the failure of a stage that returned while the daemon
// still ran: whatever it did is no longer done.
var ErrStoppedEarly = errors.New("stopped on its own while the daemon runs")

// GraceError is Run's error when stages still ran at the end of the grace
// period.
type GraceError struct {
	// Grace is the grace period.
	Grace time.Duration
	// Running names the stages told to stop that had not returned: what
	// held the shutdown up.
	Running []string
	// Waiting names the stages of later phases, not told to stop yet.
	Waiting []string
	// Hurried says Hurry cut the grace period short.
	Hurried bool
}

func (e *GraceError) Error() string {
	msg := fmt.Sprintf("shutdown: grace period %s exceeded; still running: %s", e.Grace, strings.Join(e.Running, ", "))
	if e.Hurried {
		msg = "shutdown: cut short by a second signal; still running: " + strings.Join(e.Running, ", ")
	}
	if len(e.Waiting) > 0 {
		msg += " (not yet told to stop: " + strings.Join(e.Waiting, ", ") + ")"
	}
	return msg
}

// Run starts every stage and waits until ctx ends or a stage fails, then
// stops the stages phase by phase within the grace period. It returns nil
// after an orderly stop on ctx, the failure of the first stage that
// failed (joined with any error of a stage while stopping), or a
// *GraceError when the grace period ran out; in that case stages may
// still run when it returns.
func (s *Supervisor) Run(ctx context.Context) error {
	var ctxs [numPhases]context.Context
	var cancels [numPhases]context.CancelFunc
	base := context.WithoutCancel(ctx)
	for p := range numPhases {
		ctxs[p], cancels[p] = context.WithCancel(base)
		defer cancels[p]()
	}
	failed := make(chan *stage, len(s.stages))
	for _, st := range s.stages {
		go func() {
			st.err = runStage(ctxs[st.phase], st.run)
			close(st.done)
			failed <- st
		}()
	}

	var errs []error
	var first *stage
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "grace", s.grace)
	case first = <-failed:
		err := first.err
		if err == nil {
			err = ErrStoppedEarly
		}
		s.log.Error("stage failed; stopping the daemon", "stage", first.name, "error", err)
		errs = append(errs, fmt.Errorf("stage %s failed: %w", first.name, err))
	}

	deadline := time.NewTimer(s.grace)
	defer deadline.Stop()
	for p := range numPhases {
		cancels[p]()
		for _, st := range s.stages {
			if st.phase != p {
				continue
			}
			select {
			case <-st.done:
			case <-s.hurry:
				if !isDone(st.done) {
					ge := s.graceError(p, true)
					s.log.Error("shutdown cut short by a second signal; exiting with stages still running",
						"running", strings.Join(ge.Running, ", "), "waiting", strings.Join(ge.Waiting, ", "))
					return errors.Join(append(errs, ge)...)
				}
			case <-deadline.C:
				ge := s.graceError(p, false)
				s.log.Error("shutdown grace period exceeded; exiting with stages still running",
					"grace", s.grace, "running", strings.Join(ge.Running, ", "), "waiting", strings.Join(ge.Waiting, ", "))
				return errors.Join(append(errs, ge)...)
			}
			if st != first && st.err != nil && !errors.Is(st.err, context.Canceled) {
				s.log.Error("stage failed while stopping", "stage", st.name, "error", st.err)
				errs = append(errs, fmt.Errorf("stage %s: %w", st.name, st.err))
			}
		}
	}
	return errors.Join(errs...)
}

// isDone reports whether done is closed.
func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// graceError names the stages that have not returned while the shutdown
// is at phase p: those up to p are running, later ones waiting.
func (s *Supervisor) graceError(p Phase, hurried bool) *GraceError {
	ge := &GraceError{Grace: s.grace, Hurried: hurried}
	for _, st := range s.stages {
		switch {
		case isDone(st.done):
		case st.phase <= p:
			ge.Running = append(ge.Running, st.name)
		default:
			ge.Waiting = append(ge.Waiting, st.name)
		}
	}
	return ge
}

// runStage runs fn, turning a panic into its error.
func runStage(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(ctx)
}

// ServeStage is the stage of an HTTP server: it serves ln until ctx ends,
// then shuts srv down, letting requests under way finish for at most
// grace. A Serve that fails (the listener broken) fails the stage.
func ServeStage(srv *http.Server, ln net.Listener, grace time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		select {
		case err := <-served:
			return fmt.Errorf("serve %s: %w", ln.Addr(), err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-served
		if err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	}
}

// WaitThen is a stage that does nothing until ctx ends and then runs stop
// (closing what other stages used, such as the plugin host).
func WaitThen(stop func() error) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		return stop()
	}
}
