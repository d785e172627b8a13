package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/testenv"
	"github.com/heraldhq/herald/sdk/producer"
)

// directoryCall is one request to a daemon's directory API that must
// answer want.
func (e *env) directoryCall(t *testing.T, method, path, body string, want int) {
	t.Helper()
	if code, b := e.directoryDo(t, method, path, body); code != want {
		t.Fatalf("%s %s on %s: %d %s, want %d", method, path, e.apiURL, code, b, want)
	}
}

// directoryDo sends a directory API request with the tenant's key and
// returns the answer's code and body.
func (e *env) directoryDo(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.apiURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	if strings.HasSuffix(path, ":batch") {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// decided posts a reservation to e's daemon, waits until a relay (any
// daemon's) has processed it, and returns its deliveries as sorted
// "user:channel".
func (e *env) decided(t *testing.T, id string) []string {
	t.Helper()
	ctx := context.Background()
	if _, _, err := e.client().Emit(ctx, reservation(id)); err != nil {
		t.Fatal(err)
	}
	var st producer.EventStatus
	testenv.Eventually(t, 30*time.Second, func() bool {
		var err error
		st, err = e.client().Event(ctx, id)
		return err == nil && st.Status != "PENDING"
	}, "event %s processed", id)
	if st.Status != "PROCESSED" {
		t.Fatalf("event %s: %s %s", id, st.Status, st.LastError)
	}
	var out []string
	for _, d := range st.Deliveries {
		out = append(out, d.UserID+":"+d.Channel)
	}
	sort.Strings(out)
	return out
}

// TestDirectoryWritesReachEveryDaemon: two `herald serve` share one
// database. Each round writes the directory through one daemon's API and
// posts an event through the other's; whichever daemon's relay processes
// the event, its recipients and channels are those of the directory
// after the write: no daemon answers from a copy older than the write.
// The last two rounds stop the daemon that took the write before the
// event is posted, so the other daemon's relay must be the one that
// decides (once in each direction).
func TestDirectoryWritesReachEveryDaemon(t *testing.T) {
	e := newEnv(t, "sent")
	d1 := e.start()
	e2 := e.sibling()
	d2 := e2.start()
	all := func(users ...string) []string {
		var out []string
		for _, u := range users {
			for _, ch := range []string{"EMAIL", "PUSH", "WEBSOCKET"} {
				out = append(out, u+":"+ch)
			}
		}
		sort.Strings(out)
		return out
	}
	without := func(s []string, drop ...string) []string {
		var out []string
		for _, v := range s {
			keep := true
			for _, d := range drop {
				keep = keep && v != d
			}
			if keep {
				out = append(out, v)
			}
		}
		return out
	}
	check := func(round int, via *env, want []string) {
		t.Helper()
		got := via.decided(t, fmt.Sprintf("dir-round-%d", round))
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("round %d: deliveries %v\nwant %v", round, got, want)
		}
	}
	check(0, e, all("staff1", "staff2", "staff3"))

	// 1: a new recipient joins restaurant 5 (written on daemon 1).
	e.directoryCall(t, "PUT", "/v1/recipients/staff4", `{"user_type":"STAFF","email":"s4@example.com"}`, 201)
	e.directoryCall(t, "PUT", "/v1/groups/restaurant:5/members/staff4", `{"role":"WAITER"}`, 201)
	want := all("staff1", "staff2", "staff3", "staff4")
	check(1, e2, want)

	// 2: staff1 switches e-mail off (written on daemon 2).
	e2.directoryCall(t, "PUT", "/v1/recipients/staff1/preferences", `{"channels":[{"channel":"EMAIL","enabled":false}]}`, 200)
	want = without(want, "staff1:EMAIL")
	check(2, e, want)

	// 3: staff3 leaves the restaurant (daemon 1).
	e.directoryCall(t, "DELETE", "/v1/groups/restaurant:5/members/staff3", "", 204)
	want = without(want, "staff3:EMAIL", "staff3:PUSH", "staff3:WEBSOCKET")
	check(3, e2, want)

	// 4: staff2 is deactivated (daemon 2).
	e2.directoryCall(t, "PATCH", "/v1/recipients/staff2", `{"active":false}`, 200)
	want = without(want, "staff2:EMAIL", "staff2:PUSH", "staff2:WEBSOCKET")
	check(4, e, want)

	// 5: staff3 comes back through a batch on daemon 1, which then stops:
	// daemon 2 decides.
	e.directoryCall(t, "POST", "/v1/recipients:batch", `{"member":{"group":"restaurant:5","user_id":"staff3","role":"WAITER"}}`, 200)
	d1.stop(syscall.SIGTERM)
	want = all("staff1", "staff3", "staff4")
	want = without(want, "staff1:EMAIL")
	check(5, e2, want)

	// 6: daemon 1 again; staff1 wants e-mail for reservations, written on
	// daemon 2, which then stops: daemon 1 decides.
	e.start()
	e2.directoryCall(t, "PUT", "/v1/recipients/staff1/preferences",
		`{"channels":[{"channel":"EMAIL","enabled":false},{"event_type":"RESERVATION_REQUESTED","channel":"EMAIL","enabled":true}]}`, 200)
	d2.stop(syscall.SIGTERM)
	check(6, e, all("staff1", "staff3", "staff4"))
}
