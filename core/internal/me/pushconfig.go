package me

import (
	"net/http"
	"slices"
	"sort"

	"github.com/heraldhq/herald/core/internal/api"
	"github.com/heraldhq/herald/core/internal/channel"
	"github.com/heraldhq/herald/core/internal/rules"
)

// Keys of the push plugin's provider config that push-config reads: the
// services a provider sends through, and the VAPID public key. The
// private key (vapid_private_key) is never read here.
const (
	pushPlugin        = "push"
	pushProvidersKey  = "providers"
	pushWebPush       = "webpush"
	vapidPublicKeyKey = "vapid_public_key"
)

// PushConfig is the answer of GET /v1/me/push-config: what a browser needs
// to subscribe to Web Push. WebPush is null when no channel sends Web Push.
type PushConfig struct {
	WebPush *WebPushConfig `json:"web_push"`
}

// WebPushConfig is the Web Push provider's public side.
type WebPushConfig struct {
	// VAPIDPublicKey is the applicationServerKey to subscribe with
	// (base64url of the uncompressed P-256 point): the key the provider
	// signs its VAPID JWTs for, so the push service accepts its messages.
	VAPIDPublicKey string `json:"vapid_public_key"`
	// Channels are the channels whose providers send Web Push with it.
	Channels []string `json:"channels"`
}

// WebPushOf finds the Web Push provider in the rules: the push plugin's
// providers that send through webpush, in channel order and, within a
// channel, in failover order (priority); the first one's public key is the
// one to subscribe with (a subscription is bound to one key, so every
// provider a channel fails over to should share it). nil: none.
func WebPushOf(rs *rules.RuleSet) *WebPushConfig {
	if rs == nil {
		return nil
	}
	var out *WebPushConfig
	for _, ch := range rs.Channels() {
		provs := slices.Clone(ch.Providers)
		sort.SliceStable(provs, func(i, j int) bool { return provs[i].Priority < provs[j].Priority })
		for _, p := range provs {
			key, ok := webPushKey(p)
			if !ok {
				continue
			}
			if out == nil {
				out = &WebPushConfig{VAPIDPublicKey: key}
			}
			if key == out.VAPIDPublicKey && !slices.Contains(out.Channels, ch.Name) {
				out.Channels = append(out.Channels, ch.Name)
			}
		}
	}
	return out
}

// webPushKey returns the VAPID public key of a push plugin provider that
// sends through webpush.
func webPushKey(p channel.Provider) (string, bool) {
	if p.Plugin != pushPlugin {
		return "", false
	}
	sends := false
	switch v := p.Config[pushProvidersKey].(type) {
	case []string:
		sends = slices.Contains(v, pushWebPush)
	case []any:
		sends = slices.Contains(v, any(pushWebPush))
	}
	key, _ := p.Config[vapidPublicKeyKey].(string)
	return key, sends && key != ""
}

func (s *Server) pushConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, PushConfig{WebPush: WebPushOf(s.ruleset())})
}
