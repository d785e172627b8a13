// Package ociimage writes a container image, one layer built from a
// directory tree, as an OCI image layout in a tar archive: the file `make
// image` produces and `podman load` or `docker load` reads. It needs no base
// image, no registry and no container runtime (Herald's binaries are static).
//
// The archive is a function of its inputs alone: entries sorted by name,
// every timestamp the Config's Created time, numeric owners without names,
// no clock reading anywhere, so one commit built twice gives the same bytes
// and the same image digest. Beside the OCI layout (oci-layout, index.json,
// blobs/sha256/...) it carries docker's manifest.json, as `docker save`
// writes it, so older docker load versions read it as well.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Config describes the image: what runs, as whom, and what it says of
// itself.
type Config struct {
	// Name is the image's reference, e.g. "localhost/herald:1.2.3": the
	// name the loaded image gets (index.json's ref.name and containerd
	// annotations, manifest.json's RepoTags).
	Name string
	// Created is the time of every file in the layer and of the image
	// itself: the commit's time, never the clock's.
	Created time.Time
	// User is the uid:gid the process runs as.
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// ExposedPorts are "8080/tcp" and so on.
	ExposedPorts []string
	// Volumes are the paths the image declares writable mounts for.
	Volumes    []string
	StopSignal string
	Labels     map[string]string
}

// Owner gives a path of the tree (slash-separated, relative to the root,
// "" for the root) to another owner than root.
type Owner struct {
	Path     string
	UID, GID int
}

// Result names what Write wrote.
type Result struct {
	// Digest is the manifest's digest ("sha256:..."): the image digest a
	// registry would report.
	Digest string
	// ConfigDigest is the config's: podman and docker show its hex as the
	// image id.
	ConfigDigest string
	// LayerDigest and DiffID are the compressed and the uncompressed
	// layer's.
	LayerDigest, DiffID string
}

// Write writes the image of the tree at root to w. Every file and directory
// is owned by root (uid and gid 0) but those owners names; modes are taken
// from the tree, without set-id bits, and symbolic links are kept as
// links. Only regular files, directories and symbolic links may be in the
// tree.
func Write(w io.Writer, root string, cfg Config, owners []Owner) (Result, error) {
	if cfg.Created.IsZero() {
		return Result{}, errors.New("ociimage: Config.Created is not set (the commit's time)")
	}
	if cfg.Name == "" {
		return Result{}, errors.New("ociimage: Config.Name is not set")
	}
	created := cfg.Created.UTC().Truncate(time.Second)
	own := map[string]Owner{}
	for _, o := range owners {
		own[strings.Trim(o.Path, "/")] = o
	}

	// The layer goes to a temporary file: its digest names the blob, and
	// the blob's tar header (its size) comes before its bytes.
	tmp, err := os.CreateTemp("", "herald-image-layer-")
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = os.Remove(tmp.Name()); _ = tmp.Close() }()
	layerSum := sha256.New()
	zw, err := gzip.NewWriterLevel(io.MultiWriter(tmp, layerSum), gzip.DefaultCompression)
	if err != nil {
		return Result{}, err
	}
	diffSum := sha256.New()
	if err := writeLayer(io.MultiWriter(zw, diffSum), root, created, own); err != nil {
		return Result{}, err
	}
	if err := zw.Close(); err != nil {
		return Result{}, err
	}
	layerSize, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return Result{}, err
	}
	res := Result{LayerDigest: digest(layerSum), DiffID: digest(diffSum)}

	configJSON, err := json.Marshal(imageConfig(cfg, created, res.DiffID))
	if err != nil {
		return Result{}, err
	}
	res.ConfigDigest = digestOf(configJSON)
	manifestJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        descriptor(MediaTypeConfig, res.ConfigDigest, int64(len(configJSON))),
		"layers":        []any{descriptor(MediaTypeLayer, res.LayerDigest, layerSize)},
		"annotations":   cfg.Labels,
	})
	if err != nil {
		return Result{}, err
	}
	res.Digest = digestOf(manifestJSON)
	tag := cfg.Name
	if i := strings.LastIndex(tag, ":"); i > strings.LastIndex(tag, "/") {
		tag = tag[i+1:]
	}
	manifestDesc := descriptor(MediaTypeManifest, res.Digest, int64(len(manifestJSON)))
	manifestDesc["annotations"] = map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          cfg.Name,
	}
	indexJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeIndex,
		"manifests":     []any{manifestDesc},
	})
	if err != nil {
		return Result{}, err
	}
	dockerJSON, err := json.Marshal([]map[string]any{{
		"Config":   blobPath(res.ConfigDigest),
		"RepoTags": []string{cfg.Name},
		"Layers":   []string{blobPath(res.LayerDigest)},
	}})
	if err != nil {
		return Result{}, err
	}

	// The archive: the layout's files, blobs in digest order.
	blobs := map[string]func(*tar.Writer) error{
		res.ConfigDigest: bytesEntry(blobPath(res.ConfigDigest), configJSON, created),
		res.Digest:       bytesEntry(blobPath(res.Digest), manifestJSON, created),
		res.LayerDigest: func(tw *tar.Writer) error {
			if _, err := tmp.Seek(0, io.SeekStart); err != nil {
				return err
			}
			if err := tw.WriteHeader(fileHeader(blobPath(res.LayerDigest), layerSize, created)); err != nil {
				return err
			}
			_, err := io.Copy(tw, tmp)
			return err
		},
	}
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: created, Format: tar.FormatUSTAR}); err != nil {
			return Result{}, err
		}
	}
	keys := make([]string, 0, len(blobs))
	for k := range blobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := blobs[k](tw); err != nil {
			return Result{}, err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"index.json", indexJSON},
		{"manifest.json", dockerJSON},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	} {
		if err := bytesEntry(f.name, f.data, created)(tw); err != nil {
			return Result{}, err
		}
	}
	return res, tw.Close()
}

// imageConfig is the OCI image config of cfg with one layer.
func imageConfig(cfg Config, created time.Time, diffID string) map[string]any {
	c := map[string]any{}
	set := func(k string, v any, ok bool) {
		if ok {
			c[k] = v
		}
	}
	set("User", cfg.User, cfg.User != "")
	set("Entrypoint", cfg.Entrypoint, len(cfg.Entrypoint) > 0)
	set("Cmd", cfg.Cmd, len(cfg.Cmd) > 0)
	set("Env", cfg.Env, len(cfg.Env) > 0)
	set("WorkingDir", cfg.WorkingDir, cfg.WorkingDir != "")
	set("StopSignal", cfg.StopSignal, cfg.StopSignal != "")
	set("Labels", cfg.Labels, len(cfg.Labels) > 0)
	set("ExposedPorts", emptySet(cfg.ExposedPorts), len(cfg.ExposedPorts) > 0)
	set("Volumes", emptySet(cfg.Volumes), len(cfg.Volumes) > 0)
	return map[string]any{
		"created":      created.Format(time.RFC3339),
		"architecture": "amd64",
		"os":           "linux",
		"config":       c,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history":      []any{map[string]any{"created": created.Format(time.RFC3339), "created_by": "make image"}},
	}
}

func emptySet(keys []string) map[string]struct{} {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// writeLayer writes the tree at root as an uncompressed layer tar.
func writeLayer(w io.Writer, root string, created time.Time, own map[string]Owner) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel != "." {
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	// WalkDir walks in lexical order already; sorting again keeps the
	// order a property of this function.
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, rel := range paths {
		full := filepath.Join(root, filepath.FromSlash(rel))
		info, err := os.Lstat(full)
		if err != nil {
			return err
		}
		o := own[rel]
		hdr := &tar.Header{
			Name:    rel,
			Mode:    int64(info.Mode().Perm()),
			Uid:     o.UID,
			Gid:     o.GID,
			ModTime: created,
		}
		if info.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000 // /tmp
		}
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		default:
			return fmt.Errorf("ociimage: %s is neither a file, a directory nor a symbolic link (%s)", full, info.Mode().Type())
		}
		if len(hdr.Name) > 100 || len(hdr.Linkname) > 100 {
			hdr.Format = tar.FormatPAX
		} else {
			hdr.Format = tar.FormatUSTAR
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("ociimage: %s: %w", rel, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyFile(tw, full, info.Size()); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, name string, size int64) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err == nil && n != size {
		err = fmt.Errorf("ociimage: %s changed size while it was read", name)
	}
	return err
}

func fileHeader(name string, size int64, created time.Time) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: created, Format: tar.FormatUSTAR}
}

func bytesEntry(name string, data []byte, created time.Time) func(*tar.Writer) error {
	return func(tw *tar.Writer) error {
		if err := tw.WriteHeader(fileHeader(name, int64(len(data)), created)); err != nil {
			return err
		}
		_, err := io.Copy(tw, bytes.NewReader(data))
		return err
	}
}

func descriptor(mediaType, digest string, size int64) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest, "size": size}
}

func blobPath(digest string) string {
	return path.Join("blobs", strings.Replace(digest, ":", "/", 1))
}

func digest(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
