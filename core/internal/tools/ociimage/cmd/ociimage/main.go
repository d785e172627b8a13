// Command ociimage writes the OCI image archive of a staged root tree
// (scripts/image.sh runs it for `make image`). It prints the image digest
// and the image id, one a line.
//
//	ociimage --root DIR --out FILE --name localhost/herald:1.2.3 --created 2026-11-22T21:38:33Z \
//	  --user 65532:65532 --entrypoint /usr/bin/herald --cmd serve --env K=V ... \
//	  --label K=V ... --volume /tmp --port 8080/tcp --owner var/lib/herald=65532:65532
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/core/internal/tools/ociimage"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		root, out, created                             string
		cfg                                            ociimage.Config
		entrypoint, cmd, env, labels, vols, ports, own list
	)
	flag.StringVar(&root, "root", "", "the staged root tree")
	flag.StringVar(&out, "out", "", "the archive to write")
	flag.StringVar(&cfg.Name, "name", "", "image reference, e.g. localhost/herald:1.2.3")
	flag.StringVar(&created, "created", "", "the image's time, RFC 3339 (the commit's)")
	flag.StringVar(&cfg.User, "user", "", "uid:gid the process runs as")
	flag.StringVar(&cfg.WorkingDir, "workdir", "", "working directory")
	flag.StringVar(&cfg.StopSignal, "stop-signal", "SIGTERM", "stop signal")
	flag.Var(&entrypoint, "entrypoint", "entrypoint argument (repeat)")
	flag.Var(&cmd, "cmd", "command argument (repeat)")
	flag.Var(&env, "env", "NAME=VALUE (repeat)")
	flag.Var(&labels, "label", "KEY=VALUE (repeat)")
	flag.Var(&vols, "volume", "a path the image declares a volume (repeat)")
	flag.Var(&ports, "port", "an exposed port, 8080/tcp (repeat)")
	flag.Var(&own, "owner", "PATH=UID:GID, a path not owned by root (repeat)")
	versionEnv := flag.Bool("version-env", false, "read `herald version --json` on stdin and print HERALD_VERSION, HERALD_COMMIT and HERALD_BUILD_DATE as shell assignments")
	flag.Parse()
	if *versionEnv {
		return printVersionEnv()
	}
	if root == "" || out == "" {
		return fmt.Errorf("--root and --out are required")
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("--created: %w", err)
	}
	cfg.Created = t
	cfg.Entrypoint, cfg.Cmd, cfg.Env, cfg.Volumes, cfg.ExposedPorts = entrypoint, cmd, env, vols, ports
	cfg.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		cfg.Labels[k] = v
	}
	var owners []ociimage.Owner
	for _, o := range own {
		p, ids, ok := strings.Cut(o, "=")
		u, g, ok2 := strings.Cut(ids, ":")
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return fmt.Errorf("--owner %q: want PATH=UID:GID", o)
		}
		owners = append(owners, ociimage.Owner{Path: p, UID: uid, GID: gid})
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	res, err := ociimage.Write(f, root, cfg, owners)
	if err == nil {
		err = f.Close()
	} else {
		_ = f.Close()
	}
	if err != nil {
		_ = os.Remove(out + ".tmp")
		return err
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return err
	}
	fmt.Println(res.Digest)
	fmt.Println(strings.TrimPrefix(res.ConfigDigest, "sha256:"))
	return nil
}

// printVersionEnv prints what `herald version --json` says (on stdin) as
// single-quoted shell assignments, for scripts/image.sh's labels.
func printVersionEnv() error {
	var v struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		BuildDate string `json:"build_date"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&v); err != nil {
		return fmt.Errorf("herald version --json: %w", err)
	}
	if _, err := time.Parse(time.RFC3339, v.BuildDate); err != nil {
		return fmt.Errorf("herald version --json: build_date %q is not RFC 3339", v.BuildDate)
	}
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	fmt.Printf("HERALD_VERSION=%s\nHERALD_COMMIT=%s\nHERALD_BUILD_DATE=%s\n", q(v.Version), q(v.Commit), q(v.BuildDate))
	return nil
}
