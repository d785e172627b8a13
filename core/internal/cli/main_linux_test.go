package cli

import (
	"os/user"
	"strconv"
	"syscall"
	"testing"
)

// nobody is the SysProcAttr that runs a child as the user nobody.
func nobody(t *testing.T) *syscall.SysProcAttr {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
}
