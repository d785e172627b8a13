package webhook

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The Standard Webhooks reference vector (the spec's libraries test it).
func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	id := "msg_p5jXN8AQM9LWM0D4loKWxJek"
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	got, err := Sign([]string{secret}, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
	if err := Verify(secret, id, "1614265330", got, body, ts.Add(time.Minute), Tolerance); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	secret, other := NewSecret(), NewSecret()
	now := time.Now()
	body := []byte(`{"type":"delivery.sent"}`)
	both, err := Sign([]string{other, secret}, "id1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(secret, "id1", itoa(now), both, body, now, Tolerance); err != nil {
		t.Fatalf("the second of two signatures (rotation overlap) refused: %v", err)
	}
	tests := map[string]struct {
		id, ts string
		body   []byte
		now    time.Time
	}{
		"another id":           {id: "id2", ts: itoa(now), body: body, now: now},
		"another body":         {id: "id1", ts: itoa(now), body: []byte(`{}`), now: now},
		"old timestamp":        {id: "id1", ts: itoa(now), body: body, now: now.Add(Tolerance + time.Second)},
		"future timestamp":     {id: "id1", ts: itoa(now), body: body, now: now.Add(-Tolerance - time.Second)},
		"timestamp not a num":  {id: "id1", ts: "yesterday", body: body, now: now},
		"another id same body": {id: "", ts: itoa(now), body: body, now: now},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := Verify(secret, tc.id, tc.ts, both, tc.body, tc.now, Tolerance); !errors.Is(err, ErrSignature) {
				t.Fatalf("got %v, want ErrSignature", err)
			}
		})
	}
	only, _ := Sign([]string{other}, "id1", now, body)
	if err := Verify(secret, "id1", itoa(now), only, body, now, Tolerance); !errors.Is(err, ErrSignature) {
		t.Fatalf("another secret's signature: got %v", err)
	}
}

func itoa(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		url      string
		loopback bool
		want     string // "" → refused, with wantErr in the message
		wantErr  string
	}{
		"https":                      {url: "https://hooks.example.com/herald?x=1", want: "https://hooks.example.com/herald?x=1"},
		"https port":                 {url: "https://hooks.example.com:8443/h", want: "https://hooks.example.com:8443/h"},
		"http public":                {url: "http://hooks.example.com/h", wantErr: "must be https"},
		"http loopback, not allowed": {url: "http://127.0.0.1:9000/h", wantErr: "webhook_allow_loopback"},
		"http loopback, allowed":     {url: "http://127.0.0.1:9000/h", loopback: true, want: "http://127.0.0.1:9000/h"},
		"http localhost, allowed":    {url: "http://localhost:9000/h", loopback: true, want: "http://localhost:9000/h"},
		"http ::1, allowed":          {url: "http://[::1]:9000/h", loopback: true, want: "http://[::1]:9000/h"},
		"https localhost":            {url: "https://localhost/h", wantErr: "loopback"},
		"private v4":                 {url: "https://10.1.2.3/h", wantErr: "private or reserved"},
		"private 192.168":            {url: "https://192.168.0.1/h", wantErr: "private or reserved"},
		"link local metadata":        {url: "https://169.254.169.254/latest", wantErr: "private or reserved"},
		"unspecified":                {url: "https://0.0.0.0/", wantErr: "private or reserved"},
		"ula v6":                     {url: "https://[fd00::1]/", wantErr: "private or reserved"},
		"mapped private":             {url: "https://[::ffff:10.0.0.1]/", wantErr: "private or reserved"},
		"cgnat":                      {url: "https://100.64.0.1/", wantErr: "private or reserved"},
		"user info":                  {url: "https://u:p@hooks.example.com/", wantErr: "user info"},
		"fragment":                   {url: "https://hooks.example.com/#x", wantErr: "fragment"},
		"ftp":                        {url: "ftp://hooks.example.com/", wantErr: "scheme"},
		"no host":                    {url: "https:///path", wantErr: "no host"},
		"relative":                   {url: "/hook", wantErr: "no host"},
		"empty":                      {url: "", wantErr: "empty"},
		"space":                      {url: "https://hooks.example.com/a b", wantErr: "U+0020"},
		"nul":                        {url: "https://hooks.example.com/\x00", wantErr: "U+0000"},
		"invalid utf-8":              {url: "https://hooks.example.com/\xff", wantErr: "UTF-8"},
		"bad port":                   {url: "https://hooks.example.com:70000/", wantErr: "port"},
		"too long":                   {url: "https://hooks.example.com/" + strings.Repeat("a", MaxURLLen), wantErr: "more than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := CheckURL(tc.url, tc.loopback)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("CheckURL(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckURL(%q) = %q, %v; want an error with %q", tc.url, got, err, tc.wantErr)
			}
		})
	}
}

// The dial guard decides on the address it is handed; nothing is dialled.
func TestDialControlRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		addr     string
		loopback bool
		ok       bool
	}{
		"public v4":             {addr: "93.184.215.14:443", ok: true},
		"public v6":             {addr: "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443", ok: true},
		"rfc1918":               {addr: "10.0.0.1:443"},
		"172.16":                {addr: "172.16.5.4:443"},
		"metadata":              {addr: "169.254.169.254:80"},
		"loopback refused":      {addr: "127.0.0.1:443"},
		"loopback allowed":      {addr: "127.0.0.1:443", loopback: true, ok: true},
		"v6 loopback allowed":   {addr: "[::1]:443", loopback: true, ok: true},
		"mapped loopback":       {addr: "[::ffff:127.0.0.1]:443"},
		"ula":                   {addr: "[fc00::5]:443"},
		"link-local v6":         {addr: "[fe80::1]:443"},
		"multicast":             {addr: "224.0.0.1:443"},
		"broadcast":             {addr: "255.255.255.255:443"},
		"documentation":         {addr: "192.0.2.10:443"},
		"nat64 of private":      {addr: "[64:ff9b::a00:1]:443"},
		"6to4":                  {addr: "[2002:a00:1::]:443"},
		"private with loopback": {addr: "10.0.0.1:443", loopback: true},
		"no port":               {addr: "10.0.0.1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := DialControl(tc.loopback)("tcp", tc.addr, nil)
			if (err == nil) != tc.ok {
				t.Fatalf("DialControl(%s) = %v, want ok=%v", tc.addr, err, tc.ok)
			}
		})
	}
	if err := AllowedAddr(netip.Addr{}, true); err == nil {
		t.Fatal("the zero address allowed")
	}
}

func TestCheckKinds(t *testing.T) {
	t.Parallel()
	if got, err := CheckKinds([]string{"delivery.sent", "notification.read"}); err != nil || len(got) != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
	for in, want := range map[string][]string{
		"kinds is empty":       {},
		"kinds[1] is \"nope\"": {"delivery.sent", "nope"},
		"listed twice":         {"delivery.sent", "delivery.sent"},
		"kinds[0] is \"DELIV":  {"DELIVERY.SENT"},
	} {
		if _, err := CheckKinds(want); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("CheckKinds(%q) = %v, want an error with %q", want, err, in)
		}
	}
}

func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://a.example/x", "http://127.0.0.1:1/", "https://[::1]/", "https://10.0.0.1/", "https://u@h/", "\xff"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, loopback bool) {
		got, err := CheckURL(s, loopback)
		if err != nil {
			return
		}
		if !utf8.ValidString(got) || len(got) > MaxURLLen+16 {
			t.Fatalf("CheckURL(%q) = %q", s, got)
		}
		if !strings.HasPrefix(got, "https://") && !strings.HasPrefix(got, "http://") {
			t.Fatalf("CheckURL(%q) = %q: not http(s)", s, got)
		}
		if again, err := CheckURL(got, loopback); err != nil || again != got {
			t.Fatalf("CheckURL(%q) = %q, then %q, %v", s, got, again, err)
		}
	})
}
