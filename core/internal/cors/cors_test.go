package cors

import "testing"

func TestCovered(t *testing.T) {
	for p, want := range map[string]bool{
		"/v1/inbox":                true,
		"/v1/inbox/unread-count":   true,
		"/v1/inbox/n1/read":        true,
		"/v1/me":                   true,
		"/v1/me/preferences":       true,
		"/v1/live/tickets":         true,
		"/v1/live":                 false, // a WebSocket: the gateway checks Origin itself
		"/v1/live/tickets/x":       false,
		"/v1/inboxes":              false,
		"/v1/meta":                 false,
		"/v1/events":               false,
		"/v1/apikeys":              false,
		"/v1/settings/cors":        false,
		"/v1/recipients":           false,
		"/v1/admin/tenants":        false,
		"/v1/inbox/../events":      false,
		"/v1/inbox//x":             false,
		"/v1/inbox/./unread-count": false,
		"/v1/inbox/":               false,
		"/inbox":                   false,
		"":                         false,
	} {
		if got := Covered(p); got != want {
			t.Errorf("Covered(%q) = %v, want %v", p, got, want)
		}
	}
}
