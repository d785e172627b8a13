package directory_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldhq/herald/core/internal/directory"
)

// roundTrip encodes d in format and parses it back.
func roundTrip(t testing.TB, d *directory.Directory, format directory.Format) (*directory.Directory, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := directory.Encode(&buf, d, format); err != nil {
		t.Fatalf("encode %s: %v", format, err)
	}
	res, err := directory.Parse(bytes.NewReader(buf.Bytes()), "export."+string(format), directory.Options{Format: format})
	if err != nil || !res.OK() {
		t.Fatalf("%s export refused: %v %v\n%s", format, err, res.Problems, buf.Bytes())
	}
	return &res.Directory, buf.Bytes()
}

// TestEncodeRoundTrips: every example and test file, encoded in each
// format, parses back to the same directory, and encoding that again gives
// the same bytes (export is stable).
func TestEncodeRoundTrips(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"testdata/good.yaml", "testdata/good.jsonl", "../../../examples/directory/acme.json", "../../../examples/directory/restaurant5.json"} {
		res, err := parseFile(t, p, directory.Options{})
		if err != nil || !res.OK() {
			t.Fatalf("%s: %v %v", p, err, res.Problems)
		}
		for _, f := range []directory.Format{directory.JSON, directory.YAML, directory.JSONL} {
			back, first := roundTrip(t, &res.Directory, f)
			if diff := cmp.Diff(res.Directory, *back); diff != "" {
				t.Errorf("%s as %s differs after the round trip:\n%s", p, f, diff)
			}
			if _, again := roundTrip(t, back, f); !bytes.Equal(first, again) {
				t.Errorf("%s as %s: a second export differs:\n%s\n---\n%s", p, f, first, again)
			}
		}
	}
	if err := directory.Encode(&bytes.Buffer{}, &directory.Directory{}, "toml"); err == nil {
		t.Error("format toml: no error")
	}
}

// FuzzEncode: whatever the parser accepts as clean, Encode writes in every
// format so that the parser reads back the same directory.
func FuzzEncode(f *testing.F) {
	for _, p := range []string{"testdata/good.yaml", "testdata/good.jsonl", "../../../examples/directory/acme.json"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(formatIndex(directory.FormatOf(p))))
	}
	f.Add([]byte(`{"recipients": [{"user_id": "yes", "user_type": "null", "locale": "0x1F", "attributes": {"a": "- b: c", "#": "'\"\n"}}]}`), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, fi uint8) {
		format := []directory.Format{directory.JSON, directory.YAML, directory.JSONL}[int(fi)%3]
		res, err := directory.Parse(bytes.NewReader(data), "fuzz", directory.Options{Format: format})
		if err != nil || !res.OK() || res.Entries == 0 {
			return
		}
		for _, out := range []directory.Format{directory.JSON, directory.YAML, directory.JSONL} {
			back, _ := roundTrip(t, &res.Directory, out)
			if diff := cmp.Diff(res.Directory, *back); diff != "" {
				t.Fatalf("%s round trip differs:\n%s", out, diff)
			}
		}
	})
}
