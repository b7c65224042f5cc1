// Package configs holds the example configs and Kubernetes manifests; its
// only code is this test, which parses every manifest and checks the fields
// that matter.
package configs

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/scaler"
)

type obj = map[string]any

// manifests decodes every document of configs/kubernetes/*.yaml by kind:
// inferq's own objects (label app.kubernetes.io/name: inferq, and the
// Kustomization) under their kind, the others under "<name label>/<kind>",
// e.g. "inferq-scaler/Deployment".
func manifests(t *testing.T) map[string]obj {
	t.Helper()
	paths, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	byKind := map[string]obj{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o obj
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			kind, _ := o["kind"].(string)
			if kind == "" || o["apiVersion"] == nil {
				t.Fatalf("%s: a document without kind or apiVersion", p)
			}
			if kind != "Kustomization" && get(t, o, "metadata", "name") == nil {
				t.Errorf("%s: %s without metadata.name", p, kind)
			}
			key := kind
			if app, _ := get(t, o, "metadata", "labels", "app.kubernetes.io/name").(string); app != "" && app != "inferq" {
				key = app + "/" + kind
			}
			if _, dup := byKind[key]; dup {
				t.Fatalf("%s: a second %s", p, key)
			}
			byKind[key] = o
		}
	}
	for _, k := range []string{"Deployment", "ConfigMap", "Service", "PodMonitor", "ScaledObject", "Kustomization", "inferq-scaler/Deployment", "inferq-scaler/Service"} {
		if byKind[k] == nil {
			t.Errorf("no %s among the manifests", k)
		}
	}
	return byKind
}

// get walks o by map keys and list indexes (int).
func get(t *testing.T, o any, path ...any) any {
	t.Helper()
	cur := o
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(obj)
			if !ok {
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

func TestDeployment(t *testing.T) {
	d := manifests(t)["Deployment"]
	pod := get(t, d, "spec", "template", "spec")
	if rc := get(t, pod, "runtimeClassName"); rc != "nvidia" {
		t.Errorf("runtimeClassName = %v, want nvidia", rc)
	}
	c := get(t, pod, "containers", 0)
	if gpus, _ := get(t, c, "resources", "limits", "nvidia.com/gpu").(int); gpus < 1 {
		t.Errorf("nvidia.com/gpu limit = %v, want at least 1", get(t, c, "resources", "limits", "nvidia.com/gpu"))
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := get(t, c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path = %v, want %s", probe, got, path)
		}
		if port := get(t, c, probe, "httpGet", "port"); port != "http" {
			t.Errorf("%s port = %v, want the named port http", probe, port)
		}
	}
	if p := get(t, c, "ports", 0, "containerPort"); p != 8080 {
		t.Errorf("containerPort = %v", p)
	}

	// The grace period outlasts --shutdown-grace plus the 10 s of HTTP
	// shutdown and spool flush that follow it.
	var grace time.Duration
	var config string
	for _, a := range get(t, c, "args").([]any) {
		s := a.(string)
		if v, ok := strings.CutPrefix(s, "--shutdown-grace="); ok {
			var err error
			if grace, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
		if v, ok := strings.CutPrefix(s, "--config="); ok {
			config = v
		}
	}
	if grace == 0 || config == "" {
		t.Fatalf("args %v: want --config and --shutdown-grace", get(t, c, "args"))
	}
	term, _ := get(t, pod, "terminationGracePeriodSeconds").(int)
	if time.Duration(term)*time.Second <= grace+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is not above --shutdown-grace %s + 10s", term, grace)
	}

	// --config points into the mounted ConfigMap.
	var mounted bool
	for _, m := range get(t, c, "volumeMounts").([]any) {
		mp := get(t, m, "mountPath").(string)
		if get(t, m, "name") == "config" && filepath.Dir(config) == mp {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("--config=%s is not in the config volume's mount", config)
	}
	if get(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Error("the pod may run as root")
	}
	sel := get(t, d, "spec", "selector", "matchLabels", "app.kubernetes.io/name")
	if sel == nil || sel != get(t, d, "spec", "template", "metadata", "labels", "app.kubernetes.io/name") {
		t.Error("the selector does not match the pod labels")
	}
}

// The image's entrypoint is inferq serve, which the Deployment's args
// follow; it runs as a non-root user and checks /healthz.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile.cuda")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{
		`ENTRYPOINT ["/usr/local/bin/inferq", "serve"]`, "USER 10001", "http://127.0.0.1:8080/healthz",
		"make setup-gpu", "CGO_ENABLED=1", "cudnn-runtime", "ENV INFERQ_ORT_LIB=/usr/local/lib/inferq",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile.cuda lacks %q", want)
		}
	}
	if strings.Count(df, "\nFROM ") < 3 {
		t.Error("Dockerfile.cuda is not multi-stage")
	}
}

func TestConfigMapParses(t *testing.T) {
	cm := manifests(t)["ConfigMap"]
	data, _ := get(t, cm, "data", "inferq.yaml").(string)
	c, err := models.Parse([]byte(data))
	if err != nil {
		t.Fatalf("the ConfigMap's inferq.yaml: %v", err)
	}
	if len(c.Models) < 2 {
		t.Errorf("%d models, want a two-model config", len(c.Models))
	}
	gpuModels := 0
	for _, m := range c.Models {
		if m.Device.Kind != models.DeviceCPU {
			gpuModels++
		}
	}
	if gpuModels < 2 {
		t.Errorf("%d models on GPUs, want 2", gpuModels)
	}
	if !strings.HasPrefix(c.HTTP.Listen, "0.0.0.0:8080") {
		t.Errorf("http.listen %q is not reachable by the probes on port 8080", c.HTTP.Listen)
	}
	if !loopback(c.HTTP.Listen) && c.HTTP.AuthTokenFile == "" && tokenSecret(t, manifests(t)["Deployment"]) == nil {
		t.Errorf("http.listen %q is reachable beyond the pod and no bearer token is set: want INFERQ_HTTP_AUTH_TOKEN from a Secret in the Deployment", c.HTTP.Listen)
	}
	if name := get(t, manifests(t)["Deployment"], "spec", "template", "spec", "volumes", 0, "configMap", "name"); name != get(t, cm, "metadata", "name") {
		t.Errorf("the Deployment mounts ConfigMap %v, the manifest is %v", name, get(t, cm, "metadata", "name"))
	}
	// The ScaledObject watches every queue a model consumes: with
	// minReplicaCount 0, a queue left out would never wake the Deployment.
	md := map[string]string{}
	for k, v := range get(t, manifests(t)["ScaledObject"], "spec", "triggers", 0, "metadata").(obj) {
		md[k], _ = v.(string)
	}
	target, err := scaler.ParseTarget(md)
	if err != nil {
		t.Fatalf("the ScaledObject's trigger metadata: %v", err)
	}
	for _, m := range c.Models {
		if !slices.Contains(target.Queues, m.Queue) {
			t.Errorf("the ScaledObject's queues %v lack model %s's queue %s", target.Queues, m.Name, m.Queue)
		}
	}
}

func TestServiceMonitorScaler(t *testing.T) {
	all := manifests(t)
	if p := get(t, all["Service"], "spec", "ports", 0, "targetPort"); p != "http" {
		t.Errorf("Service targetPort = %v", p)
	}
	pm := all["PodMonitor"]
	if get(t, pm, "spec", "podMetricsEndpoints", 0, "path") != "/metrics" || get(t, pm, "spec", "podMetricsEndpoints", 0, "port") != "http" {
		t.Errorf("PodMonitor endpoint = %v", get(t, pm, "spec", "podMetricsEndpoints", 0))
	}
	so := all["ScaledObject"]
	if get(t, so, "spec", "scaleTargetRef", "name") != get(t, all["Deployment"], "metadata", "name") {
		t.Error("the ScaledObject does not target the Deployment")
	}
	ks := all["Kustomization"]
	res := map[string]bool{}
	for _, r := range get(t, ks, "resources").([]any) {
		res[r.(string)] = true
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !res[b] {
			t.Errorf("kustomization.yaml does not list %s", b)
		}
	}
}

// loopback reports whether a listen address is reachable from its host
// only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenSecret returns the secretKeyRef the Deployment's container sets
// INFERQ_HTTP_AUTH_TOKEN from, or nil. An optional one counts as none: the
// pod would start without a token.
func tokenSecret(t *testing.T, d obj) obj {
	t.Helper()
	env, _ := get(t, d, "spec", "template", "spec", "containers", 0, "env").([]any)
	for _, e := range env {
		if get(t, e, "name") != "INFERQ_HTTP_AUTH_TOKEN" {
			continue
		}
		ref, _ := get(t, e, "valueFrom", "secretKeyRef").(obj)
		if ref == nil || ref["optional"] == true || ref["name"] == nil || ref["key"] == nil {
			return nil
		}
		return ref
	}
	return nil
}

// The HTTP port is open to the cluster only with the bearer token: the
// Deployment sets it from a Secret, the PodMonitor scrapes with the same
// one, and the probes ask for routes that need none.
func TestHTTPTokenFromSecret(t *testing.T) {
	all := manifests(t)
	ref := tokenSecret(t, all["Deployment"])
	if ref == nil {
		t.Fatal("the Deployment does not set INFERQ_HTTP_AUTH_TOKEN from a (non-optional) Secret")
	}
	ep := get(t, all["PodMonitor"], "spec", "podMetricsEndpoints", 0)
	if get(t, ep, "authorization", "type") != "Bearer" || get(t, ep, "authorization", "credentials", "name") != ref["name"] ||
		get(t, ep, "authorization", "credentials", "key") != ref["key"] {
		t.Errorf("the PodMonitor's authorization %v is not the Bearer token of Secret %v key %v", get(t, ep, "authorization"), ref["name"], ref["key"])
	}
	c := get(t, all["Deployment"], "spec", "template", "spec", "containers", 0)
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		switch p := get(t, c, probe, "httpGet", "path"); p {
		case "/healthz", "/readyz", "/v2/health/live", "/v2/health/ready":
		default:
			t.Errorf("%s asks for %v, which needs the token the kubelet does not send", probe, p)
		}
	}
}

// The image's config listens on every interface; it cannot carry a secret,
// so it must say how to set the token.
func TestImageConfigNamesTheToken(t *testing.T) {
	df, err := os.ReadFile("../Dockerfile.cuda")
	if err != nil {
		t.Fatal(err)
	}
	var src string
	for _, line := range strings.Split(string(df), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "COPY" && f[2] == "/etc/inferq/inferq.yaml" {
			src = f[1]
		}
	}
	if src == "" {
		t.Skip("Dockerfile.cuda copies no config to /etc/inferq/inferq.yaml")
	}
	data, err := os.ReadFile(filepath.Join("..", src))
	if err != nil {
		t.Fatal(err)
	}
	c, err := models.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	if !loopback(c.HTTP.Listen) && c.HTTP.AuthToken == "" && c.HTTP.AuthTokenFile == "" && !strings.Contains(string(data), "INFERQ_HTTP_AUTH_TOKEN") {
		t.Errorf("%s listens on %s without a token and does not say to set INFERQ_HTTP_AUTH_TOKEN", src, c.HTTP.Listen)
	}
}

// The result spool is on disk, in a directory the pod can write although
// its root file system is read-only: data_dir is the data volume's mount.
func TestSpoolOnTheDataVolume(t *testing.T) {
	cm := manifests(t)["ConfigMap"]
	data, _ := get(t, cm, "data", "inferq.yaml").(string)
	c, err := models.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if c.Results.Spool != models.SpoolDisk {
		t.Errorf("results.spool = %q, want disk", c.Results.Spool)
	}
	pod := get(t, manifests(t)["Deployment"], "spec", "template", "spec")
	var mounted bool
	for _, m := range get(t, pod, "containers", 0, "volumeMounts").([]any) {
		if get(t, m, "mountPath") == c.DataDir && get(t, m, "readOnly") != true {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("data_dir %s is not a writable volume mount of the Deployment", c.DataDir)
	}
	for _, p := range []string{"embedded.yaml", "multi-gpu.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := models.Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if c.Results.Spool != models.SpoolDisk || c.DataDir == "" {
			t.Errorf("%s: spool %q in %q, want disk in a data_dir", p, c.Results.Spool, c.DataDir)
		}
	}
}

// The ScaledObject scales from zero through inferq's external scaler: its
// scalerAddress is the scaler Service's port, which reaches the scaler's
// container port, and the scaler listens there on every interface.
func TestScaledObjectUsesTheScaler(t *testing.T) {
	all := manifests(t)
	so, svc, dep := all["ScaledObject"], all["inferq-scaler/Service"], all["inferq-scaler/Deployment"]
	if n, _ := get(t, so, "spec", "minReplicaCount").(int); n != 0 {
		t.Errorf("minReplicaCount = %v, want 0", get(t, so, "spec", "minReplicaCount"))
	}
	trig := get(t, so, "spec", "triggers", 0)
	if typ := get(t, trig, "type"); typ != "external" && typ != "external-push" {
		t.Fatalf("trigger type = %v, want external", typ)
	}
	addr, _ := get(t, trig, "metadata", "scalerAddress").(string)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("scalerAddress %q: %v", addr, err)
	}
	ns, _ := get(t, svc, "metadata", "namespace").(string)
	if host != get(t, svc, "metadata", "name").(string)+"."+ns+".svc.cluster.local" {
		t.Errorf("scalerAddress host %q is not the Service %v in namespace %s", host, get(t, svc, "metadata", "name"), ns)
	}
	var target any
	for _, p := range get(t, svc, "spec", "ports").([]any) {
		if strconv.Itoa(get(t, p, "port").(int)) == port {
			target = get(t, p, "targetPort")
		}
	}
	if target == nil {
		t.Fatalf("the scaler Service has no port %s (scalerAddress %s)", port, addr)
	}
	c := get(t, dep, "spec", "template", "spec", "containers", 0)
	var container int
	for _, p := range get(t, c, "ports").([]any) {
		if get(t, p, "name") == target || get(t, p, "containerPort") == target {
			container = get(t, p, "containerPort").(int)
		}
	}
	if container == 0 {
		t.Fatalf("the Service's targetPort %v is no port of the scaler container", target)
	}
	// The container runs `inferq scaler --listen=0.0.0.0:<that port>`.
	cmd := append(append([]any{}, get(t, c, "command").([]any)...), get(t, c, "args").([]any)...)
	var sub bool
	var listen string
	for _, a := range cmd {
		s := a.(string)
		sub = sub || s == "scaler"
		if v, ok := strings.CutPrefix(s, "--listen="); ok {
			listen = v
		}
	}
	if !sub || listen != "0.0.0.0:"+strconv.Itoa(container) {
		t.Errorf("scaler container runs %v; want inferq scaler --listen=0.0.0.0:%d", cmd, container)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if p := get(t, c, probe, "grpc", "port"); p != container {
			t.Errorf("%s grpc port = %v, want %d", probe, p, container)
		}
	}
	// The scaler's pods are not selected as inferq workers.
	labels := get(t, dep, "spec", "template", "metadata", "labels").(obj)
	for _, o := range []struct {
		what string
		sel  any
	}{
		{"the worker Deployment", get(t, all["Deployment"], "spec", "selector", "matchLabels")},
		{"the worker Service", get(t, all["Service"], "spec", "selector")},
		{"the PodMonitor", get(t, all["PodMonitor"], "spec", "selector", "matchLabels")},
	} {
		matches := true
		for k, v := range o.sel.(obj) {
			matches = matches && labels[k] == v
		}
		if matches {
			t.Errorf("%s selects the scaler's pods (labels %v)", o.what, labels)
		}
	}
	if get(t, svc, "spec", "selector", "app.kubernetes.io/name") != labels["app.kubernetes.io/name"] {
		t.Errorf("the scaler Service does not select the scaler's pods")
	}
	// --config points into the mounted ConfigMap, as the worker's does.
	var config string
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a.(string), "--config="); ok {
			config = v
		}
	}
	var mounted bool
	for _, m := range get(t, c, "volumeMounts").([]any) {
		if get(t, m, "name") == "config" && filepath.Dir(config) == get(t, m, "mountPath") {
			mounted = true
		}
	}
	if config != "" && !mounted {
		t.Errorf("the scaler's --config=%s is not in its config volume's mount", config)
	}
}
