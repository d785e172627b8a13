package rules_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/directory"
	"github.com/heraldhq/herald/core/internal/rules"
)

// TestGroupsPathBadPayload: a groups_path that does not lead to a list of
// keys fails the event with an error naming the audience and the path.
func TestGroupsPathBadPayload(t *testing.T) {
	t.Parallel()
	rs, err := rules.New(rules.Spec{
		Channels: []channel.Config{{Name: "WEBSOCKET", Providers: []channel.Provider{{Plugin: "websocket"}}}},
		Events: []rules.EventSpec{{
			Type: "ALERT", Mandatory: []string{"WEBSOCKET"},
			Audiences: []rules.AudienceSpec{{GroupsPath: "teams"}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		payload string
		want    string
	}{
		"missing":       {`{}`, "audience 0: groups_path: payload has no teams"},
		"not a list":    {`{"teams": "ops"}`, "audience 0: groups_path: teams is not a list"},
		"item a map":    {`{"teams": ["ops", {"user_id": "u1"}]}`, "audience 0: teams[1]: not a group key"},
		"item empty":    {`{"teams": [""]}`, "audience 0: teams[0]:"},
		"payload array": {`[1]`, "audience 0: groups_path:"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := rules.Event{EventID: "e", Type: "ALERT", Payload: json.RawMessage(tc.payload)}
			_, err := rs.Needs(ev)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Needs: %v, want an error containing %q", err, tc.want)
			}
			_, err = rs.Decide(ev, &directory.Directory{}, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decide: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Setting roles on a non-group audience is refused; groups_path counts
	// as a group audience.
	if _, err := rules.New(rules.Spec{
		Channels: []channel.Config{{Name: "WEBSOCKET", Providers: []channel.Provider{{Plugin: "websocket"}}}},
		Events: []rules.EventSpec{{Type: "A", Mandatory: []string{"WEBSOCKET"},
			Audiences: []rules.AudienceSpec{{GroupsPath: "teams", Roles: []string{"LEAD"}}, {GroupsPath: "x", User: "u"}}}},
	}); err == nil || !strings.Contains(err.Error(), "set exactly one of") || strings.Contains(err.Error(), "roles only filter") {
		t.Errorf("New: %v", err)
	}
}
