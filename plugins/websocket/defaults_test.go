package main

import (
	"testing"

	"github.com/heraldhq/herald/internal/liveproto"
	"github.com/heraldhq/herald/plugins/internal/channeltest"
)

// TestTagDefaultsMatchConstants checks that the defaults written in
// Config's tags (what the host shows and applies) are the Default constants
// the code and docs name.
func TestTagDefaultsMatchConstants(t *testing.T) {
	t.Parallel()
	channeltest.TagDefaults(t, Config{}, map[string]string{FieldAMQPURL: DefaultAMQPURL, FieldExchange: liveproto.DefaultExchange, FieldPublishTimeout: DefaultPublishTimeout.String()})
}
