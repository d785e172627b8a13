package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/heraldhq/herald/core/internal/store"
	"github.com/heraldhq/herald/core/internal/testenv"
)

// TestCancelAPIRetriesALostDeadlock: DELETE /v1/events/{id} whose
// transaction PostgreSQL aborts as a deadlock's victim (as with a digest
// flush before it locked in delivery_id order) runs it again and answers
// 200 with the deliveries cancelled, not 500.
func TestCancelAPIRetriesALostDeadlock(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	low, high := testenv.EventToCancel(t, w.db, "a", "e")
	var (
		code int
		body []byte
		err  error
	)
	testenv.CancelLosesDeadlock(t, w.db, low, high, func() {
		var req *http.Request
		req, err = http.NewRequest(http.MethodDelete, w.url+"/v1/events/e", nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+w.keys["a"])
		var resp *http.Response
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		code = resp.StatusCode
		body, err = io.ReadAll(resp.Body)
	})
	if err != nil {
		t.Fatal(err)
	}
	var c store.Cancellation
	if code != http.StatusOK || json.Unmarshal(body, &c) != nil || c.Cancelled != 2 {
		t.Fatalf("cancel that lost a deadlock once: %d %s; want 200 with both deliveries cancelled", code, body)
	}
}
