package rules_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
	"github.com/heraldhq/herald/core/internal/rulesfile"
)

// BenchmarkDecideIndexed is the relay's decision for one event reaching a
// group of 50 staff (the hot path; explanation fields are left out).
func BenchmarkDecideIndexed(b *testing.B) {
	rs, _, err := rulesfile.LoadWith(rulesfile.Options{KeepReferences: true}, "../../../examples/rules/herald.hcl")
	if err != nil {
		b.Fatal(err)
	}
	dir := &directory.Directory{Groups: []directory.Group{{Key: "restaurant:5", Type: "restaurant"}}}
	roles := []string{"MANAGER", "CHEF", "WAITER"}
	for i := 0; i < 50; i++ {
		id := fmt.Sprintf("s%02d", i)
		dir.Recipients = append(dir.Recipients, directory.Recipient{UserID: id, UserType: "STAFF", TimeZone: "Europe/Rome", Active: true})
		dir.Members = append(dir.Members, directory.Member{Group: "restaurant:5", UserID: id, Role: roles[i%3]})
	}
	dir.Settings = []directory.GroupSetting{{Group: "restaurant:5", Channel: "SMS", Enabled: false}}
	ix := rules.IndexDirectory(dir)
	ev := rules.Event{EventID: "e", Type: "RESERVATION_REQUESTED",
		Payload: json.RawMessage(`{"reservation_id": 1, "restaurant_id": 5, "customer_name": "Ann", "pax": 2, "time": "13:00"}`)}
	at := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rs.DecideIndexed(ev, ix, at); err != nil {
			b.Fatal(err)
		}
	}
}
