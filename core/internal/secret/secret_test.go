package secret

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("s3cr3t-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crlf"), []byte("line\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "two"), []byte("a\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("x"), MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HERALD_SECRET_TEST", "s3cr3t-from-env")
	t.Setenv("HERALD_SECRET_EMPTY", "")
	tests := map[string]struct {
		in      string
		want    string
		ref     bool
		wantErr string
	}{
		"literal":          {in: "plain", want: "plain"},
		"empty":            {in: "", want: ""},
		"env":              {in: "env:HERALD_SECRET_TEST", want: "s3cr3t-from-env", ref: true},
		"env set empty":    {in: "env:HERALD_SECRET_EMPTY", want: "", ref: true},
		"env unset":        {in: "env:HERALD_SECRET_UNSET_X", ref: true, wantErr: "env:HERALD_SECRET_UNSET_X: environment variable HERALD_SECRET_UNSET_X is not set"},
		"env bad name":     {in: "env:NOT A NAME", ref: true, wantErr: "want env:NAME"},
		"env no name":      {in: "env:", ref: true, wantErr: "want env:NAME"},
		"file relative":    {in: "file:token", want: "s3cr3t-from-file", ref: true},
		"file absolute":    {in: "file:" + filepath.Join(dir, "token"), want: "s3cr3t-from-file", ref: true},
		"file crlf":        {in: "file:crlf", want: "line", ref: true},
		"file one newline": {in: "file:two", want: "a\n", ref: true},
		"file missing":     {in: "file:nope", ref: true, wantErr: "file:nope: cannot read " + filepath.Join(dir, "nope") + ": no such file or directory"},
		"file too big":     {in: "file:big", ref: true, wantErr: "larger than"},
		"file no path":     {in: "file:", ref: true, wantErr: "names no file"},
		"raw env":          {in: "raw:env:HERALD_SECRET_TEST", want: "env:HERALD_SECRET_TEST"},
		"raw raw":          {in: "raw:raw:x", want: "raw:x"},
		"upper case":       {in: "ENV:HERALD_SECRET_TEST", want: "ENV:HERALD_SECRET_TEST"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ref, err := Resolve(tc.in, dir)
			if ref != tc.ref {
				t.Errorf("ref = %v, want %v", ref, tc.ref)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for in, ok := range map[string]bool{
		"env:A_B1": true, "env:": false, "env:1A": false, "file:/x": true, "file:": false, "plain": true, "raw:env:": true,
	} {
		if err := Check(in); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok %v", in, err, ok)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ in, want, password string }{
		"postgres":      {"postgres://herald:pa55word@db:5432/herald?sslmode=verify-full", "postgres://herald:xxxxx@db:5432/herald?sslmode=verify-full", "pa55word"},
		"amqps":         {"amqps://u:p%40ss@mq/vh", "amqps://u:xxxxx@mq/vh", "p@ss"},
		"no password":   {"amqp://guest@mq/", "amqp://guest@mq/", ""},
		"key value":     {"host=db user=herald password=pa55word sslmode=verify-full", "host=db user=herald password=xxxxx sslmode=verify-full", "pa55word"},
		"quoted kv":     {"host=db password='pa 55\\'word' dbname=h", "host=db password=xxxxx dbname=h", "pa 55'word"},
		"unparsable":    {"amqp://guest:pa%zzss@mq/", "amqp://" + Redacted, ""},
		"kv first word": {"password=abc host=db", "password=xxxxx host=db", "abc"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := RedactURL(tc.in); got != tc.want {
				t.Errorf("RedactURL = %q, want %q", got, tc.want)
			}
			if got := URLPassword(tc.in); got != tc.password {
				t.Errorf("URLPassword = %q, want %q", got, tc.password)
			}
		})
	}
}

func TestRedactorScrubsLogLines(t *testing.T) {
	t.Parallel()
	const s1, s2 = `tok"en-with-quote`, "plain-secret-value"
	for _, jsonFormat := range []bool{false, true} {
		r := NewRedactor()
		var buf bytes.Buffer
		log := hclog.New(&hclog.LoggerOptions{Output: r.Writer(&buf), JSONFormat: jsonFormat})
		log.Info("before", "v", s2)
		r.Add(s1, s2, "short")
		log.Info("configured", "token", s1, "other", "x "+s2+" y", "short", "short")
		log.Error("error: " + s1)
		out := buf.String()
		before, after, _ := strings.Cut(out, "configured")
		if !strings.Contains(before, s2) {
			t.Fatalf("a value logged before it was registered is not redacted after the fact:\n%s", out)
		}
		for _, bad := range []string{"en-with-quote", "plain-secret"} {
			if strings.Contains(after, bad) {
				t.Errorf("json=%v: secret %q in log:\n%s", jsonFormat, bad, after)
			}
		}
		if !strings.Contains(after, Redacted) {
			t.Errorf("json=%v: nothing redacted:\n%s", jsonFormat, after)
		}
		if !strings.Contains(after, "short") {
			t.Errorf("json=%v: a value shorter than MinRedactLen was redacted:\n%s", jsonFormat, after)
		}
	}
}

func TestRedactorNil(t *testing.T) {
	t.Parallel()
	var r *Redactor
	r.Add("something-long")
	if got := r.String("something-long"); got != "something-long" {
		t.Fatal(got)
	}
}

// FuzzRedactURL checks that RedactURL never panics and that the password
// of a URL built from parts does not survive it (raw or percent-encoded).
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"pa55word-long", "p@ss:w/rd?#%zz", "with space", "x", "h\u00e9llo-w\u00f6rld"} {
		f.Add("herald", s, "db.internal:5432", "/herald")
	}
	f.Fuzz(func(t *testing.T, user, pass, host, path string) {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pass), Host: host, Path: path}
		raw := u.String()
		got := RedactURL(raw)
		_ = URLPassword(raw)
		_ = RedactURL(pass) // anything at all
		if len(pass) < 6 || strings.Contains(user+host+path, pass) {
			return
		}
		if strings.Contains(got, pass) || strings.Contains(got, url.UserPassword("", pass).String()[1:]) {
			t.Fatalf("RedactURL(%q) = %q still holds the password", raw, got)
		}
	})
}
