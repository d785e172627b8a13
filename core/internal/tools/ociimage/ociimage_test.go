package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/herald"), []byte("#!binary"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var/lib/herald"), 0o750))
	must(os.Mkdir(filepath.Join(root, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	long := filepath.Join(root, "usr/share/doc", strings.Repeat("d", 60), strings.Repeat("f", 60)+".md")
	must(os.MkdirAll(filepath.Dir(long), 0o755))
	must(os.WriteFile(long, []byte("doc"), 0o644))
	must(os.Symlink("herald", filepath.Join(root, "usr/bin/h")))
	return root
}

var testConfig = Config{
	Name:       "localhost/herald:1.2.3",
	Created:    time.Date(2026, 11, 22, 21, 38, 33, 0, time.UTC),
	User:       "65532:65532",
	Entrypoint: []string{"/usr/bin/herald"},
	Cmd:        []string{"serve"},
	Env:        []string{"TMPDIR=/tmp"},
	Volumes:    []string{"/tmp"},
	Labels:     map[string]string{"org.opencontainers.image.version": "1.2.3"},
}

// TestWriteIsReproducible: the same tree written twice (with the files'
// times changed between) gives the same bytes.
func TestWriteIsReproducible(t *testing.T) {
	root := testTree(t)
	var a, b bytes.Buffer
	ra, err := Write(&a, root, testConfig, []Owner{{Path: "var/lib/herald", UID: 65532, GID: 65532}})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(root, "usr/bin/herald"), later, later); err != nil {
		t.Fatal(err)
	}
	rb, err := Write(&b, root, testConfig, []Owner{{Path: "var/lib/herald", UID: 65532, GID: 65532}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || ra != rb {
		t.Fatalf("two writes of one tree differ: %+v and %+v", ra, rb)
	}
}

// TestWriteLayout reads the archive back as podman would: index.json to
// the manifest, to the config and the layer, each blob matching its digest.
func TestWriteLayout(t *testing.T) {
	root := testTree(t)
	var buf bytes.Buffer
	res, err := Write(&buf, root, testConfig, []Owner{{Path: "/var/lib/herald/", UID: 65532, GID: 65532}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(testConfig.Created) {
			t.Errorf("%s: time %s, want the Created time", hdr.Name, hdr.ModTime)
		}
		data, _ := io.ReadAll(tr)
		files[hdr.Name] = data
	}
	blob := func(digest string) []byte {
		t.Helper()
		data, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", digest)
		}
		sum := sha256.Sum256(data)
		if "sha256:"+hex.EncodeToString(sum[:]) != digest {
			t.Fatalf("blob %s does not match its digest", digest)
		}
		return data
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", files["oci-layout"])
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if index.Manifests[0].Digest != res.Digest || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Errorf("index.json names %+v, want %s tagged 1.2.3", index.Manifests[0], res.Digest)
	}
	var manifest struct {
		MediaType string
		Config    struct{ Digest string }
		Layers    []struct{ Digest, MediaType string }
	}
	if err := json.Unmarshal(blob(res.Digest), &manifest); err != nil || len(manifest.Layers) != 1 || manifest.MediaType != MediaTypeManifest {
		t.Fatalf("manifest: %v %+v", err, manifest)
	}
	var cfg struct {
		Config struct {
			User    string
			Volumes map[string]struct{}
			Labels  map[string]string
		}
		Rootfs struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || cfg.Config.Labels["org.opencontainers.image.version"] != "1.2.3" {
		t.Errorf("config %+v", cfg.Config)
	}
	if _, ok := cfg.Config.Volumes["/tmp"]; !ok {
		t.Errorf("volumes %v", cfg.Config.Volumes)
	}
	var docker []struct{ Config string }
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 || docker[0].Config != "blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:") {
		t.Errorf("manifest.json: %v %s", err, files["manifest.json"])
	}

	// The layer: its uncompressed digest is the config's diff id, and
	// every entry has the owner and mode it should.
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if len(cfg.Rootfs.DiffIDs) != 1 || cfg.Rootfs.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("diff ids %v", cfg.Rootfs.DiffIDs)
	}
	entries := map[string]*tar.Header{}
	lr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[hdr.Name] = hdr
	}
	for name, want := range map[string]struct {
		mode     int64
		uid, gid int
	}{
		"usr/bin/herald":  {0o755, 0, 0},
		"var/lib/herald/": {0o750, 65532, 65532},
		"tmp/":            {0o1777, 0, 0},
	} {
		h := entries[name]
		if h == nil {
			t.Errorf("%s missing from the layer", name)
			continue
		}
		if h.Mode != want.mode || h.Uid != want.uid || h.Gid != want.gid || h.Uname != "" {
			t.Errorf("%s: mode %o owner %d:%d %q, want %o %d:%d", name, h.Mode, h.Uid, h.Gid, h.Uname, want.mode, want.uid, want.gid)
		}
	}
	if h := entries["usr/bin/h"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "herald" {
		t.Errorf("symlink: %+v", h)
	}
	long := "usr/share/doc/" + strings.Repeat("d", 60) + "/" + strings.Repeat("f", 60) + ".md"
	if entries[long] == nil {
		t.Errorf("the long name %s is missing", long)
	}
}

// TestWriteRefusesBadInput: no time, no name, a device or a socket in the
// tree are errors naming what is wrong.
func TestWriteRefusesBadInput(t *testing.T) {
	root := testTree(t)
	cfg := testConfig
	cfg.Created = time.Time{}
	if _, err := Write(io.Discard, root, cfg, nil); err == nil || !strings.Contains(err.Error(), "Created") {
		t.Errorf("no Created: %v", err)
	}
	cfg = testConfig
	cfg.Name = ""
	if _, err := Write(io.Discard, root, cfg, nil); err == nil || !strings.Contains(err.Error(), "Name") {
		t.Errorf("no Name: %v", err)
	}
	if err := os.Symlink("/nonexistent", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Skip("no mkfifo here:", err)
	}
	if _, err := Write(io.Discard, root, testConfig, nil); err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("a FIFO in the tree: %v", err)
	}
}
