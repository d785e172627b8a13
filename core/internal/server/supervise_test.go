package server_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/heraldhq/herald/core/internal/server"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// stopLog records the order stages saw their context end in.
type stopLog struct {
	mu    sync.Mutex
	names []string
}

// stage returns a stage that waits for its context, records name and
// returns err.
func (l *stopLog) stage(name string, err error) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		l.mu.Lock()
		l.names = append(l.names, name)
		l.mu.Unlock()
		return err
	}
}

func (l *stopLog) order() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.names...)
}

// bufLogger is a logger writing to a buffer the test reads.
func bufLogger() (hclog.Logger, func() string) {
	var mu sync.Mutex
	var b bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return b.Write(p)
	})
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug}), func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// addPipeline adds one stage per phase (two in the intake), in an order
// other than the phases'.
func addPipeline(s *server.Supervisor, l *stopLog) {
	s.Add(server.PhasePlugins, "plugins", l.stage("plugins", nil))
	s.Add(server.PhaseDeliver, "listener", l.stage("listener", nil))
	s.Add(server.PhaseIntake, "http", l.stage("http", nil))
	s.Add(server.PhasePublish, "publisher", l.stage("publisher", nil))
	s.Add(server.PhaseRelay, "relay", l.stage("relay", context.Canceled))
	s.Add(server.PhaseIntake, "admin http", l.stage("admin http", nil))
}

// checkOrder checks that got is addPipeline's stages in phase order (the intake's two in
// either order).
func checkOrder(t *testing.T, got []string) {
	t.Helper()
	if len(got) != 6 {
		t.Fatalf("stopped %v, want 6 stages", got)
	}
	intake := map[string]bool{got[0]: true, got[1]: true}
	if !intake["http"] || !intake["admin http"] {
		t.Errorf("first stopped %v, want the intake (http, admin http)", got[:2])
	}
	if diff := cmp.Diff([]string{"relay", "publisher", "listener", "plugins"}, got[2:]); diff != "" {
		t.Errorf("stop order after the intake (-want +got):\n%s", diff)
	}
}

// TestSupervisorOrderlyStop: when the context ends every stage stops,
// phase by phase, and Run returns nil (a stage returning
// context.Canceled on its way out is no failure).
func TestSupervisorOrderlyStop(t *testing.T) {
	t.Parallel()
	log, logged := bufLogger()
	s := server.NewSupervisor(log, 10*time.Second)
	var l stopLog
	addPipeline(s, &l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after an orderly stop = %v, want nil", err)
	}
	checkOrder(t, l.order())
	if strings.Contains(logged(), "failed") {
		t.Errorf("an orderly stop logged a failure:\n%s", logged())
	}
}

// TestSupervisorStageFails: each way a stage can fail while the daemon
// runs (an error, a return with nothing to say, a panic) stops every
// stage in phase order, logs one line naming the stage and the error, and
// Run returns an error naming both.
func TestSupervisorStageFails(t *testing.T) {
	t.Parallel()
	boom := errors.New("liveness lock lost and not taken again")
	for name, tc := range map[string]struct {
		run     func(context.Context) error
		wantErr string
		is      error
	}{
		"error":        {run: func(context.Context) error { return boom }, wantErr: "stage doomed failed: liveness lock lost", is: boom},
		"early return": {run: func(context.Context) error { return nil }, wantErr: "stage doomed failed: stopped on its own", is: server.ErrStoppedEarly},
		"panic":        {run: func(context.Context) error { panic("index out of range") }, wantErr: "stage doomed failed: panic: index out of range"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			log, logged := bufLogger()
			s := server.NewSupervisor(log, 10*time.Second)
			var l stopLog
			addPipeline(s, &l)
			s.Add(server.PhasePublish, "doomed", tc.run)
			err := s.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run = %v, want an error containing %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Run = %v, not errors.Is %v", err, tc.is)
			}
			checkOrder(t, l.order())
			var lines []string
			for _, line := range strings.Split(logged(), "\n") {
				if strings.Contains(line, "stage failed; stopping the daemon") {
					lines = append(lines, line)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "[ERROR]") || !strings.Contains(lines[0], "stage=doomed") {
				t.Errorf("log lines saying the stage failed: %q, want one error naming stage=doomed", lines)
			}
		})
	}
}

// TestSupervisorGraceExceeded: a stage that does not stop within the grace
// period makes Run return a *GraceError naming it (and only it), without
// waiting for it, and the log says what still ran.
func TestSupervisorGraceExceeded(t *testing.T) {
	t.Parallel()
	log, logged := bufLogger()
	const grace = 200 * time.Millisecond
	s := server.NewSupervisor(log, grace)
	var l stopLog
	addPipeline(s, &l)
	release := make(chan struct{})
	defer close(release)
	s.Add(server.PhaseDeliver, "stuck listener", func(ctx context.Context) error {
		<-ctx.Done()
		<-release // an in-flight send that never ends
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Run(ctx)
	var ge *server.GraceError
	if !errors.As(err, &ge) {
		t.Fatalf("Run = %v, want a *GraceError", err)
	}
	if ge.Grace != grace || !cmp.Equal(ge.Running, []string{"stuck listener"}) || !cmp.Equal(ge.Waiting, []string{"plugins"}) {
		t.Errorf("GraceError = %+v, want grace %s, [stuck listener] running and [plugins] waiting", ge, grace)
	}
	if !strings.Contains(err.Error(), "grace period 200ms exceeded; still running: stuck listener (not yet told to stop: plugins)") {
		t.Errorf("error %q does not say what still ran", err)
	}
	if !strings.Contains(logged(), `running="stuck listener" waiting=plugins`) {
		t.Errorf("log does not name the stages still running:\n%s", logged())
	}
	// (Run's return ends the plugins phase's context too, so "plugins"
	// may follow.)
	if got := l.order(); len(got) < 5 || got[4] != "listener" {
		t.Errorf("stopped %v, want the stages up to the deliver phase", got)
	}
}

// TestSupervisorHurry: a second signal (Hurry) during a shutdown stops
// waiting for a stage that hangs, long before the grace period would.
func TestSupervisorHurry(t *testing.T) {
	t.Parallel()
	log, logged := bufLogger()
	s := server.NewSupervisor(log, time.Hour)
	var l stopLog
	addPipeline(s, &l)
	release := make(chan struct{})
	defer close(release)
	s.Add(server.PhaseDeliver, "stuck listener", func(ctx context.Context) error {
		l.stage("stuck listener", nil)(ctx)
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	testenv.Eventually(t, 30*time.Second, func() bool {
		return slices.Contains(l.order(), "stuck listener")
	}, "the shutdown reaches the stuck stage")
	s.Hurry()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run still waits for the stuck stage after Hurry")
	}
	var ge *server.GraceError
	if !errors.As(err, &ge) || !ge.Hurried || !cmp.Equal(ge.Running, []string{"stuck listener"}) {
		t.Fatalf("Run after Hurry = %v, want a hurried *GraceError naming the stuck listener", err)
	}
	if !strings.Contains(err.Error(), "cut short by a second signal; still running: ") ||
		!strings.Contains(logged(), "shutdown cut short by a second signal") {
		t.Errorf("error %q or log does not say the shutdown was cut short:\n%s", err, logged())
	}
}
