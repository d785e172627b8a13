// Command herald-plugin-sink is Herald's recording test plugin. It accepts
// deliveries for any channel (ChannelType "*"), appends each one as a JSON
// line to a file, and can be told to fail, slow down or crash so that tests
// of the plugin host and of the pipeline can watch what happens.
//
// Config fields:
//
//	record_file      append one JSON line per received delivery (Record), one write per batch
//	outcome          sent | retry | permanent | rate_limited (default sent)
//	delay            sleep this long in every Send (default 0s)
//	crash_once_file  if this file exists when Send is called: delete it and exit(2)
//	                 without answering (nothing of that batch is recorded)
//	fail_file        while this file exists, every delivery comes back Retryable and
//	                 Health reports unhealthy (a provider outage a test can switch)
//	fail_health      Health always reports unhealthy
//	hold_file        while this file exists, Send holds each batch before recording or
//	                 answering it (until the file is removed or the call's context ends)
//	                 and appends a HeldBatch line to <hold_file>.held, so a test knows
//	                 for certain that a batch is inside the plugin
//	version          a label logged and recorded with every batch
//	env_file         write the plugin's environment to this file (a JSON array of
//	                 "NAME=value" strings) when configured, so a test sees what the host passed
//	reason_bytes     pad every reason, code and provider message id to this many bytes
//	log_lines        log this many extra lines in every Send
//	probe            comma-separated files (PPID: the parent's pid) Send tries to read; every
//	                 result is Permanent, its reason "PATH=ok" or "PATH=refused" for each
//
// Build-time variables (go build -ldflags "-X main.version=2.0.0 -X main.brokenHealth=true")
// set the PluginVersion in Describe and make a variant whose Health fails;
// -X main.ranFile=PATH makes a variant that appends a line to PATH as soon
// as it starts, so a test can prove that this build never ran;
// -X main.dieAtStart=TEXT makes a broken build that writes TEXT to stderr and
// exits 1 before the handshake; -X main.class=best-effort makes a variant that
// declares its channel best effort (the default declares it persistent).
package main

import (
	"fmt"
	"os"

	"github.com/heraldhq/herald/sdk"
)

// Set with -ldflags -X.
var (
	version      = "1.0.0"
	brokenHealth = "false"
	ranFile      = ""
	dieAtStart   = ""
	class        = "persistent"
)

func main() {
	if dieAtStart != "" {
		fmt.Fprintln(os.Stderr, dieAtStart)
		os.Exit(1)
	}
	if ranFile != "" {
		if err := appendFile(ranFile, fmt.Appendf(nil, "pid %d ran %s\n", os.Getpid(), version)); err != nil {
			fmt.Fprintln(os.Stderr, "sink: ranFile:", err)
		}
	}
	sdk.Serve(New)
}
