package httpguard

import (
	"os"
	"testing"
)

// TestTokenFileAccess: group or others may not reach the token, but for
// the root-owned file only the non-root process's own group may read (a
// Kubernetes Secret under fsGroup).
func TestTokenFileAccess(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		perm                 os.FileMode
		uid, gid, euid, egid int
		ok                   bool
	}{
		{"0600 own", 0o600, 65532, 65532, 65532, 65532, true},
		{"0400 root", 0o400, 0, 0, 0, 0, true},
		{"fsGroup secret", 0o440, 0, 65532, 65532, 65532, true},
		{"fsGroup secret 0640", 0o640, 0, 65532, 65532, 65532, true},
		{"group writable", 0o460, 0, 65532, 65532, 65532, false},
		{"others readable", 0o444, 0, 65532, 65532, 65532, false},
		{"another group", 0o440, 0, 100, 65532, 65532, false},
		{"not root's", 0o440, 1000, 65532, 65532, 65532, false},
		{"process is root", 0o640, 0, 0, 0, 0, false},
	} {
		err := tokenFileAccess(tc.perm, tc.uid, tc.gid, tc.euid, tc.egid)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %t", tc.name, err, tc.ok)
		}
	}
}
