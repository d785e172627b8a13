package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/heraldhq/herald/plugins/internal/channeltest"
)

// TestTagDefaultsMatchConstants checks that the defaults written in
// Config's tags (what the host shows and applies) are the Default constants
// the code and docs name.
func TestTagDefaultsMatchConstants(t *testing.T) {
	t.Parallel()
	channeltest.TagDefaults(t, Config{}, map[string]string{FieldEndpoint: DefaultEndpoint, FieldTimeout: DefaultTimeout.String(), FieldConcurrency: strconv.Itoa(DefaultConcurrency), FieldValidateOnly: "false",
		FieldProviders: ProviderFCM, FieldWebPushTTL: strings.TrimSuffix(DefaultWebPushTTL.String(), "0m0s"), FieldWebPushUrgency: DefaultWebPushUrgency,
		FieldAPNsEndpoint: DefaultAPNsEndpoint, FieldAPNsPushType: DefaultAPNsPushType, FieldAPNsPriority: strconv.Itoa(DefaultAPNsPriority),
		FieldAPNsExpiration: "0s", FieldWebPushPrivate: "false"})
}
