// Package chart_test renders the Helm chart deploy/helm/herald with helm
// (built from this module's tool directive, so from the Go module proxy)
// for each values file of testdata/, decodes every manifest strictly into
// its Kubernetes API type (an unknown or duplicated field fails), checks
// what the chart promises (docs/deploy.md, "Kubernetes"), and runs helm
// lint. It is a module of its own so that helm's and Kubernetes'
// dependencies stay out of Herald's go.mod; scripts/test.sh runs it.
package chart_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../herald"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm builds the pinned helm (go tool -n) once and returns its path.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		out, err := exec.Command("go", "tool", "-n", "helm").CombinedOutput()
		helmPath, helmErr = strings.TrimSpace(string(out)), err
		if err != nil {
			helmErr = fmt.Errorf("go tool -n helm: %v\n%s", err, out)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	// helm keeps caches and config under HOME; a test's own.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache",
		"HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func valuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in testdata: %v", err)
	}
	return files
}

// TestChartLint runs helm lint --strict with each values file.
func TestChartLint(t *testing.T) {
	for _, f := range valuesFiles(t) {
		if out, err := runHelm(t, "lint", "--strict", chartDir, "-f", f); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}

// TestChartDefaultsNeedRules: the defaults alone name no rules, and the
// chart says which values to give.
func TestChartDefaultsNeedRules(t *testing.T) {
	_, err := runHelm(t, "template", "herald", chartDir)
	if err == nil || !strings.Contains(err.Error(), "rules.files") {
		t.Fatalf("helm template with the defaults: %v; want a failure naming rules.files", err)
	}
}

// rendered is one release's manifests, decoded.
type rendered struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	configMaps      []corev1.ConfigMap
	serviceAccounts []corev1.ServiceAccount
	jobs            []batchv1.Job
	pdbs            []policyv1.PodDisruptionBudget
	serviceMonitors []monitoringv1.ServiceMonitor
}

// decode decodes every document of a helm template output strictly.
func decode(t *testing.T, out string) rendered {
	t.Helper()
	var r rendered
	for i, doc := range strings.Split(out, "\n---") {
		doc = strings.TrimSpace(doc)
		if doc == "" || strings.Trim(doc, "-\n ") == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var target any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			r.deployments = append(r.deployments, appsv1.Deployment{})
			target = &r.deployments[len(r.deployments)-1]
		case "v1 Service":
			r.services = append(r.services, corev1.Service{})
			target = &r.services[len(r.services)-1]
		case "v1 ConfigMap":
			r.configMaps = append(r.configMaps, corev1.ConfigMap{})
			target = &r.configMaps[len(r.configMaps)-1]
		case "v1 ServiceAccount":
			r.serviceAccounts = append(r.serviceAccounts, corev1.ServiceAccount{})
			target = &r.serviceAccounts[len(r.serviceAccounts)-1]
		case "batch/v1 Job":
			r.jobs = append(r.jobs, batchv1.Job{})
			target = &r.jobs[len(r.jobs)-1]
		case "policy/v1 PodDisruptionBudget":
			r.pdbs = append(r.pdbs, policyv1.PodDisruptionBudget{})
			target = &r.pdbs[len(r.pdbs)-1]
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.serviceMonitors = append(r.serviceMonitors, monitoringv1.ServiceMonitor{})
			target = &r.serviceMonitors[len(r.serviceMonitors)-1]
		default:
			t.Fatalf("document %d: %s %s is a kind the test does not know; add its type\n%s", i, head.APIVersion, head.Kind, doc)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Fatalf("document %d (%s): %v\n%s", i, head.Kind, err, doc)
		}
	}
	return r
}

// TestChartManifests renders the chart with each values file and checks
// every manifest against the API types and the chart's promises.
func TestChartManifests(t *testing.T) {
	for _, f := range valuesFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			out, err := runHelm(t, "template", "herald", chartDir, "--namespace", "notify", "-f", f)
			if err != nil {
				t.Fatal(err)
			}
			r := decode(t, out)
			checkRelease(t, filepath.Base(f), r)
		})
	}
}

func checkRelease(t *testing.T, name string, r rendered) {
	t.Helper()
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(r.deployments))
	}
	d := r.deployments[0]
	pod := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 1 {
		t.Errorf("replicas %v", d.Spec.Replicas)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != 65532 ||
		pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want non-root uid 65532 and seccomp RuntimeDefault", pod.SecurityContext)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("the pods mount a service account token")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	checkContainer(t, "herald", c)
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", c.ReadinessProbe)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("no resource requests: %+v", c.Resources)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("variable %s given twice", e.Name)
		}
		env[e.Name] = e
	}
	// Secrets by reference: the URLs and provider keys come from Secrets.
	for _, k := range []string{"HERALD_DATABASE_URL", "HERALD_DATABASE_API_URL", "HERALD_DATABASE_ADMIN_URL"} {
		if e, ok := env[k]; !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s is not read from a Secret: %+v", k, e)
		}
	}
	if e, ok := env["HERALD_AMQP_URL"]; !ok || (e.ValueFrom == nil && env["HERALD_AMQP_URLS"].ValueFrom == nil) {
		t.Errorf("the broker URL is not read from a Secret: %+v %+v", e, env["HERALD_AMQP_URLS"])
	}
	if env["HERALD_HTTP_ADMIN_TOKEN_FILE"].Value == "" {
		t.Errorf("no admin token file: the admin listener would refuse a non-loopback address")
	}
	// The read-only root needs a writable /tmp for the plugins' copies.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if m, ok := mounts["/tmp"]; !ok || m.ReadOnly || vols[m.Name].EmptyDir == nil {
		t.Errorf("/tmp is not a writable emptyDir: %+v", m)
	}
	if m, ok := mounts["/etc/herald/rules"]; !ok || vols[m.Name].ConfigMap == nil {
		t.Errorf("the rules are not mounted from a ConfigMap: %+v", m)
	}
	if d.Spec.Template.Annotations["checksum/rules"] == "" {
		t.Errorf("no checksum/rules annotation: a rules change would not roll the pods")
	}
	// The Service exposes the public API and not the admin listener.
	var adminPort int32
	for _, p := range c.Ports {
		if p.Name == "admin" {
			adminPort = p.ContainerPort
		}
	}
	for _, s := range r.services {
		if s.Labels["app.kubernetes.io/component"] == "metrics" {
			if len(r.serviceMonitors) == 0 {
				t.Errorf("metrics Service %s without a ServiceMonitor", s.Name)
			}
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.String() == "admin" || p.Port == adminPort || p.TargetPort.IntValue() == int(adminPort) {
				t.Errorf("Service %s exposes the admin listener: %+v", s.Name, p)
			}
		}
	}
	for _, j := range r.jobs {
		if j.Annotations["helm.sh/hook"] == "" {
			t.Errorf("Job %s is not a hook", j.Name)
		}
		js := j.Spec.Template.Spec
		if js.ServiceAccountName == "" || js.ServiceAccountName == pod.ServiceAccountName {
			t.Errorf("Job %s runs as %q, want a ServiceAccount of its own", j.Name, js.ServiceAccountName)
		}
		for _, jc := range js.Containers {
			checkContainer(t, j.Name+"/"+jc.Name, jc)
		}
	}
	switch name {
	case "minimal.yaml":
		if len(r.pdbs) != 1 || len(r.jobs) != 1 || len(r.serviceMonitors) != 0 {
			t.Errorf("minimal: %d PDBs, %d Jobs, %d ServiceMonitors; want 1, 1 (migrate), 0", len(r.pdbs), len(r.jobs), len(r.serviceMonitors))
		}
		if len(r.pdbs) == 1 && r.pdbs[0].Spec.MinAvailable.IntValue() != 1 {
			t.Errorf("PDB minAvailable %v", r.pdbs[0].Spec.MinAvailable)
		}
		if env["SMTP_PASSWORD"].ValueFrom == nil || env["SMTP_PASSWORD"].ValueFrom.SecretKeyRef.Name != "herald-providers" {
			t.Errorf("provider secret not passed by reference: %+v", env["SMTP_PASSWORD"])
		}
	case "full.yaml":
		if len(r.serviceMonitors) != 1 || len(r.jobs) != 2 {
			t.Fatalf("full: %d ServiceMonitors, %d Jobs; want 1 and 2", len(r.serviceMonitors), len(r.jobs))
		}
		ep := r.serviceMonitors[0].Spec.Endpoints
		if len(ep) != 1 || ep[0].Path != "/metrics" || ep[0].Authorization == nil || ep[0].Authorization.Credentials == nil {
			t.Errorf("ServiceMonitor endpoints %+v: want /metrics with the admin token", ep)
		}
		if c.Image != "registry.example.com/herald:1.4.0" {
			t.Errorf("image %q", c.Image)
		}
		if env["HERALD_AMQP_URLS"].ValueFrom == nil || env["HERALD_AMQP_TLS_CA_FILE"].Value == "" {
			t.Errorf("cluster URLs or broker CA missing: %+v", env)
		}
	case "existing.yaml":
		if len(r.pdbs) != 0 || len(r.jobs) != 0 || len(r.configMaps) != 0 || len(r.serviceAccounts) != 0 {
			t.Errorf("existing: %d PDBs, %d Jobs, %d ConfigMaps, %d ServiceAccounts; want none",
				len(r.pdbs), len(r.jobs), len(r.configMaps), len(r.serviceAccounts))
		}
		if v := vols["rules"]; v.ConfigMap == nil || v.ConfigMap.Name != "my-herald-rules" {
			t.Errorf("rules volume %+v, want ConfigMap my-herald-rules", v)
		}
	}
}

// checkContainer checks the systemd unit's sandbox, translated.
func checkContainer(t *testing.T, name string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: security context %+v: want no privilege escalation, read-only root, non-root, ALL capabilities dropped, seccomp RuntimeDefault", name, sc)
	}
}
