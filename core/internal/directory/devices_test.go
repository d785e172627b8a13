package directory_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
)

// TestDevices: device entries of each kind decode; a bad one gets every
// problem at once, each naming its field.
func TestDevices(t *testing.T) {
	t.Parallel()
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256dh := base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes())
	auth := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	apns := strings.Repeat("ab", 32)
	good := `{"recipients": [{"user_id": "u1", "user_type": "C", "device_tokens": ["legacy"], "devices": [
  {"kind": "fcm", "token": "fcm-1"},
  {"kind": "apns", "token": "` + apns + `"},
  {"kind": "webpush", "endpoint": "https://push.example/s/1", "p256dh": "` + p256dh + `", "auth": "` + auth + `"}
]}]}`
	res, err := directory.Parse(strings.NewReader(good), "good.json", directory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Problems != nil {
		t.Fatalf("good devices: %v", res.Problems)
	}
	want := []directory.Device{{Kind: "fcm", Token: "fcm-1"}, {Kind: "apns", Token: apns},
		{Kind: "webpush", Endpoint: "https://push.example/s/1", P256dh: p256dh, Auth: auth}}
	if diff := cmp.Diff(want, res.Directory.Recipients[0].Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}

	offCurve := make([]byte, 65)
	offCurve[0] = 4
	bad := `{"recipients": [{"user_id": "u1", "user_type": "C", "device_tokens": ["fcm-1"], "devices": [
  {"kind": "fcm", "token": "fcm-1"},
  {"kind": "apns", "token": "nothex!"},
  {"kind": "webpush", "endpoint": "http://push.example/s/1"},
  {"kind": "webpush", "endpoint": "https://push.example/s/2", "p256dh": "` + base64.RawURLEncoding.EncodeToString(offCurve) + `", "auth": "AAAA"},
  {"kind": "webpush", "endpoint": "https://push.example/s/3", "p256dh": "!!", "auth": "` + auth + `", "token": "x"},
  {"kind": "telegram", "token": "t"},
  {"kind": "fcm"},
  {"token": "t"},
  {"kind": "apns", "token": "` + apns + `", "auth": "` + auth + `"}
]}]}`
	res, err = directory.Parse(strings.NewReader(bad), "bad.json", directory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantProbs := []string{
		`bad.json:1: recipients[0] (user u1): devices[0]: duplicate device: the same address as device_tokens[0]`,
		`bad.json:3: recipients[0] (user u1): devices[1].token: want the APNs device token in hex (64 or more hex digits), got 7 characters that are not all hex`,
		`bad.json:4: recipients[0] (user u1): devices[2].endpoint: "http://push.example/s/1": want an https URL such as https://fcm.googleapis.com/fcm/send/...`,
		`bad.json:4: recipients[0] (user u1): devices[2].p256dh: missing (required for kind webpush: the subscription's keys.p256dh)`,
		`bad.json:4: recipients[0] (user u1): devices[2].auth: missing (required for kind webpush: the subscription's keys.auth)`,
		`bad.json:5: recipients[0] (user u1): devices[3].p256dh: not a point on the P-256 curve`,
		`bad.json:5: recipients[0] (user u1): devices[3].auth: want base64url of 16 bytes`,
		`bad.json:6: recipients[0] (user u1): devices[4].token: not used by kind webpush (the subscription's endpoint is its address)`,
		`bad.json:6: recipients[0] (user u1): devices[4].p256dh: want base64url of an uncompressed P-256 public key (65 bytes starting 0x04)`,
		`bad.json:7: recipients[0] (user u1): devices[5].kind: "telegram": want fcm, apns or webpush`,
		`bad.json:8: recipients[0] (user u1): devices[6].token: missing (required for kind fcm)`,
		`bad.json:9: recipients[0] (user u1): devices[7].kind: missing (required)`,
		`bad.json:10: recipients[0] (user u1): devices[8].auth: not used by kind apns`,
	}
	got := strings.Split(res.Problems.Error(), "\n")
	if diff := cmp.Diff(wantProbs, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
