package sdk

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	pb "github.com/heraldhq/herald/sdk/internal/proto/herald/channel/v2"
)

// blockingChannel is a fakeChannel whose Send waits for its context and
// reports when it started and why it stopped.
type blockingChannel struct {
	fakeChannel
	started chan struct{}
	stopped chan error
}

func (b *blockingChannel) Send(ctx context.Context, _ SendRequest) (SendResponse, error) {
	close(b.started)
	<-ctx.Done()
	b.stopped <- ctx.Err()
	return SendResponse{}, RetryableError(ctx.Err(), 0)
}

// TestHostPipeClosedCancelsSendAndExits: when the host's end of the host
// pipe closes (the kernel does it when the host dies), the Send in flight
// sees its context cancelled and returns, and only then the plugin exits,
// with code 3.
func TestHostPipeClosedCancelsSendAndExits(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The watch owns the descriptor it is given, as a plugin owns fd 3:
	// give it a duplicate so that nothing else closes that number.
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	watch := newHostWatch()
	impl := &blockingChannel{started: make(chan struct{}), stopped: make(chan error, 1)}
	ch := rawConnect(t, impl, watch)
	// The host's own call has no deadline: only the host watch can end it.
	go func() {
		_, _ = ch.Send(context.Background(), &pb.SendRequest{Deliveries: []*pb.Delivery{{DeliveryId: "d1", IdempotencyKey: "k1"}}})
	}()
	select {
	case <-impl.started:
	case <-time.After(10 * time.Second):
		t.Fatal("Send never reached the plugin")
	}

	exited := make(chan int, 1)
	// The parent pid check never fires here (an hour between checks):
	// the pipe alone must tell.
	go watch.watch(hclog.NewNullLogger(), strconv.Itoa(os.Getppid()), strconv.Itoa(fd), time.Hour,
		func(code int) { exited <- code })
	select {
	case <-exited:
		t.Fatal("exited while the host lives")
	case <-impl.stopped:
		t.Fatal("Send cancelled while the host lives")
	case <-time.After(200 * time.Millisecond):
	}
	if err := w.Close(); err != nil { // the host dies
		t.Fatal(err)
	}
	select {
	case err := <-impl.stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Send stopped with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Send in flight was not cancelled when the host pipe closed")
	}
	select {
	case code := <-exited:
		if code != 3 {
			t.Fatalf("exit code %d, want 3", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not exit when the host pipe closed")
	}
	if n := watch.inflight.Load(); n != 0 {
		t.Fatalf("exited with %d sends in flight", n)
	}
}

// TestHostParentChangedExits: without a host pipe, a parent pid that is
// not the host's (the plugin was re-parented: its host died) ends the
// plugin too.
func TestHostParentChangedExits(t *testing.T) {
	watch := newHostWatch()
	exited := make(chan int, 1)
	go watch.watch(hclog.NewNullLogger(), strconv.Itoa(os.Getppid()+1), "", time.Millisecond, func(code int) { exited <- code })
	select {
	case code := <-exited:
		if code != 3 {
			t.Fatalf("exit code %d, want 3", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not exit when its parent changed")
	}
	if watch.ctx.Err() == nil {
		t.Fatal("the host context is not cancelled")
	}
}
