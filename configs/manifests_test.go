// Package configs holds the example configs and Kubernetes manifests; its
// only code is this test, which parses every manifest and checks the fields
// that matter. configs/typecheck, a module of its own, decodes each
// manifest strictly into its typed object (unknown fields, wrong types).
package configs

import (
	"bytes"
	"errors"
	"fmt"
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
	"github.com/inferq/inferq/shard"
)

type obj = map[string]any

// manifests decodes every document of configs/kubernetes/*.yaml by kind:
// inferq's own objects (label app.kubernetes.io/name: inferq, and the
// Kustomization) under their kind, the others under "<name label>/<kind>",
// e.g. "inferq-scaler/Deployment", "inferq-headless/Service".
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
	for _, k := range []string{"StatefulSet", "ConfigMap", "Service", "inferq-headless/Service", "PodMonitor", "ScaledObject", "Kustomization", "inferq-scaler/Deployment", "inferq-scaler/Service"} {
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

func TestStatefulSet(t *testing.T) {
	d := manifests(t)["StatefulSet"]
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

	// The grace period outlasts --shutdown-grace (the tasks), then
	// --spool-flush-timeout (the results to the broker), then the 10 s of
	// HTTP shutdown and spool write to disk that follow.
	var grace, flush time.Duration
	var config string
	for _, a := range get(t, c, "args").([]any) {
		s := a.(string)
		for flag, d := range map[string]*time.Duration{"--shutdown-grace=": &grace, "--spool-flush-timeout=": &flush} {
			if v, ok := strings.CutPrefix(s, flag); ok {
				var err error
				if *d, err = time.ParseDuration(v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if v, ok := strings.CutPrefix(s, "--config="); ok {
			config = v
		}
	}
	if grace == 0 || flush == 0 || config == "" {
		t.Fatalf("args %v: want --config, --shutdown-grace and --spool-flush-timeout", get(t, c, "args"))
	}
	term, _ := get(t, pod, "terminationGracePeriodSeconds").(int)
	if time.Duration(term)*time.Second <= grace+flush+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is not above --shutdown-grace %s + --spool-flush-timeout %s + 10s", term, grace, flush)
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

// The image's entrypoint is inferq serve, which the StatefulSet's args
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
	if !loopback(c.HTTP.Listen) && c.HTTP.AuthTokenFile == "" && tokenSecret(t, manifests(t)["StatefulSet"]) == nil {
		t.Errorf("http.listen %q is reachable beyond the pod and no bearer token is set: want INFERQ_HTTP_AUTH_TOKEN from a Secret in the StatefulSet", c.HTTP.Listen)
	}
	if name := get(t, manifests(t)["StatefulSet"], "spec", "template", "spec", "volumes", 0, "configMap", "name"); name != get(t, cm, "metadata", "name") {
		t.Errorf("the StatefulSet mounts ConfigMap %v, the manifest is %v", name, get(t, cm, "metadata", "name"))
	}
	// The ScaledObject watches every queue a model consumes: with
	// minReplicaCount 0, a queue left out would never wake the StatefulSet.
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
	if get(t, so, "spec", "scaleTargetRef", "kind") != "StatefulSet" || get(t, so, "spec", "scaleTargetRef", "apiVersion") != "apps/v1" ||
		get(t, so, "spec", "scaleTargetRef", "name") != get(t, all["StatefulSet"], "metadata", "name") {
		t.Errorf("the ScaledObject targets %v, want the StatefulSet", get(t, so, "spec", "scaleTargetRef"))
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

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Each pod advertises its own stable DNS name as http.advertise_url: the
// StatefulSet's headless Service (serviceName) selects the pods, publishes
// them while not ready, and its port reaches the container's HTTP port; the
// URL the kubelet expands for pod inferq-1 is valid for inferq and names
// that pod, that Service, its namespace and the port inferq listens on.
func TestAdvertiseURLIsThePodsName(t *testing.T) {
	all := manifests(t)
	sts, hl := all["StatefulSet"], all["inferq-headless/Service"]
	name, _ := get(t, hl, "metadata", "name").(string)
	ns, _ := get(t, hl, "metadata", "namespace").(string)
	if get(t, sts, "spec", "serviceName") != name {
		t.Fatalf("StatefulSet serviceName %v, want the headless Service %s", get(t, sts, "spec", "serviceName"), name)
	}
	if get(t, hl, "spec", "clusterIP") != "None" || get(t, hl, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("Service %s: clusterIP %v publishNotReadyAddresses %v, want None and true", name,
			get(t, hl, "spec", "clusterIP"), get(t, hl, "spec", "publishNotReadyAddresses"))
	}
	labels := get(t, sts, "spec", "template", "metadata", "labels").(obj)
	for k, v := range get(t, hl, "spec", "selector").(obj) {
		if labels[k] != v {
			t.Errorf("Service %s selects %s=%v, the pods have %v", name, k, v, labels[k])
		}
	}
	if p := get(t, hl, "spec", "ports", 0); get(t, p, "port") != 8080 || get(t, p, "targetPort") != "http" {
		t.Errorf("Service %s port %v, want 8080 to the named port http", name, p)
	}

	// The kubelet expands $(VAR) from the variables defined before it.
	pod := map[string]string{"metadata.name": "inferq-1", "metadata.namespace": ns}
	vars := map[string]string{}
	var advertise string
	for _, e := range get(t, sts, "spec", "template", "spec", "containers", 0, "env").([]any) {
		n, _ := get(t, e, "name").(string)
		v, _ := get(t, e, "value").(string)
		if f, ok := get(t, e, "valueFrom", "fieldRef", "fieldPath").(string); ok {
			v = pod[f]
		}
		for k, val := range vars {
			v = strings.ReplaceAll(v, "$("+k+")", val)
		}
		vars[n] = v
		if n == "INFERQ_HTTP_ADVERTISE_URL" {
			advertise = v
		}
	}
	if want := "http://inferq-1." + name + "." + ns + ".svc:8080"; advertise != want {
		t.Errorf("pod inferq-1 advertises %q, want %q", advertise, want)
	}
	cm := all["ConfigMap"]
	data, _ := get(t, cm, "data", "inferq.yaml").(string)
	c, err := models.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, port, _ := net.SplitHostPort(c.HTTP.Listen); port != "8080" {
		t.Errorf("http.listen %s is not on the advertised port 8080", c.HTTP.Listen)
	}
	c.HTTP.AdvertiseURL = advertise
	if err := c.Validate(); err != nil {
		t.Errorf("the ConfigMap with the pod's advertise_url: %v", err)
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

// tokenSecret returns the secretKeyRef the StatefulSet's container sets
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
// StatefulSet sets it from a Secret, the PodMonitor scrapes with the same
// one, and the probes ask for routes that need none.
func TestHTTPTokenFromSecret(t *testing.T) {
	all := manifests(t)
	ref := tokenSecret(t, all["StatefulSet"])
	if ref == nil {
		t.Fatal("the StatefulSet does not set INFERQ_HTTP_AUTH_TOKEN from a (non-optional) Secret")
	}
	ep := get(t, all["PodMonitor"], "spec", "podMetricsEndpoints", 0)
	if get(t, ep, "authorization", "type") != "Bearer" || get(t, ep, "authorization", "credentials", "name") != ref["name"] ||
		get(t, ep, "authorization", "credentials", "key") != ref["key"] {
		t.Errorf("the PodMonitor's authorization %v is not the Bearer token of Secret %v key %v", get(t, ep, "authorization"), ref["name"], ref["key"])
	}
	c := get(t, all["StatefulSet"], "spec", "template", "spec", "containers", 0)
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
// its root file system is read-only: data_dir is on the StatefulSet's
// per-pod persistent volume (volumeClaimTemplates), not on a volume that
// dies with the pod, below its root, and that volume holds a full spool.
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
	sts := manifests(t)["StatefulSet"]
	pod := get(t, sts, "spec", "template", "spec")
	var volume, mount string
	for _, m := range get(t, pod, "containers", 0, "volumeMounts").([]any) {
		mp, _ := get(t, m, "mountPath").(string)
		if (mp == c.DataDir || strings.HasPrefix(c.DataDir, mp+"/")) && get(t, m, "readOnly") != true {
			volume, _ = get(t, m, "name").(string)
			mount = mp
		}
	}
	if volume == "" {
		t.Fatalf("data_dir %s is not on a writable volume mount of the StatefulSet", c.DataDir)
	}
	// With fsGroup the kubelet makes the volume's root group-writable,
	// which inferq refuses for a data_dir (issue 27 item 3): data_dir is a
	// directory below it that inferq creates 0700.
	if get(t, pod, "securityContext", "fsGroup") != nil && c.DataDir == mount {
		t.Errorf("data_dir %s is the root of a volume mounted with fsGroup (group-writable, refused): want a subdirectory", c.DataDir)
	}
	vols, _ := get(t, pod, "volumes").([]any)
	for _, v := range vols {
		if get(t, v, "name") == volume {
			t.Errorf("data_dir's volume %s is a pod volume (%v), gone with the pod; want a volumeClaimTemplate", volume, v)
		}
	}
	var claim any
	for _, v := range get(t, sts, "spec", "volumeClaimTemplates").([]any) {
		if get(t, v, "metadata", "name") == volume {
			claim = v
		}
	}
	if claim == nil {
		t.Fatalf("data_dir's volume %s is no volumeClaimTemplate of the StatefulSet", volume)
	}
	if modes := get(t, claim, "spec", "accessModes"); !slices.Contains(modes.([]any), any("ReadWriteOnce")) {
		t.Errorf("data volume access modes %v, want ReadWriteOnce (one pod per volume)", modes)
	}
	size, _ := get(t, claim, "spec", "resources", "requests", "storage").(string)
	spool := c.Results.SpoolMaxDiskBytes
	if spool == 0 {
		spool = 4 << 30 // results' default
	}
	if n, ok := strings.CutSuffix(size, "Gi"); !ok || atoi(t, n)<<30 <= spool {
		t.Errorf("data volume of %q, want more than the spool's bound of %d bytes (in Gi)", size, spool)
	}
	if p := get(t, sts, "spec", "persistentVolumeClaimRetentionPolicy", "whenScaled"); p != nil && p != "Retain" {
		t.Errorf("persistentVolumeClaimRetentionPolicy.whenScaled %v deletes a scaled-down pod's unflushed results; want Retain", p)
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
		{"the worker StatefulSet", get(t, all["StatefulSet"], "spec", "selector", "matchLabels")},
		{"the worker Service", get(t, all["Service"], "spec", "selector")},
		{"the worker headless Service", get(t, all["inferq-headless/Service"], "spec", "selector")},
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

// workloads are the manifests with a pod template, by key.
func workloads(t *testing.T) map[string]obj {
	t.Helper()
	out := map[string]obj{}
	for k, o := range manifests(t) {
		if get(t, o, "spec", "template", "spec") != nil {
			out[k] = o
		}
	}
	if len(out) < 2 {
		t.Fatalf("workloads %v, want the StatefulSet and the scaler's Deployment", out)
	}
	return out
}

// Every pod passes Pod Security "restricted" (issue 27 item 7): seccomp
// RuntimeDefault, non-root, no privilege escalation, every capability
// dropped, the volume types it allows, no host namespaces or ports; and
// no service account token, which neither inferq nor its scaler uses.
func TestPodSecurityRestricted(t *testing.T) {
	allowedVolumes := []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
	for key, w := range workloads(t) {
		pod := get(t, w, "spec", "template", "spec").(obj)
		psc, _ := get(t, pod, "securityContext").(obj)
		if get(t, pod, "automountServiceAccountToken") != false {
			t.Errorf("%s: automountServiceAccountToken %v, want false", key, get(t, pod, "automountServiceAccountToken"))
		}
		for _, host := range []string{"hostNetwork", "hostPID", "hostIPC", "hostUsers"} {
			if v := pod[host]; v == true {
				t.Errorf("%s: %s is set", key, host)
			}
		}
		if uid, ok := get(t, psc, "runAsUser").(int); ok && uid == 0 {
			t.Errorf("%s: pod runAsUser 0", key)
		}
		for _, v := range get(t, pod, "volumes").([]any) {
			var kinds []string
			for k := range v.(obj) {
				if k != "name" {
					kinds = append(kinds, k)
				}
			}
			if len(kinds) != 1 || !slices.Contains(allowedVolumes, kinds[0]) {
				t.Errorf("%s: volume %v of type %v, restricted allows %v", key, get(t, v, "name"), kinds, allowedVolumes)
			}
		}
		var containers []any
		for _, f := range []string{"initContainers", "containers", "ephemeralContainers"} {
			if l, ok := pod[f].([]any); ok {
				containers = append(containers, l...)
			}
		}
		for _, c := range containers {
			name := get(t, c, "name")
			csc, _ := get(t, c, "securityContext").(obj)
			pick := func(field string) any { // the container's setting, else the pod's
				if v, ok := csc[field]; ok {
					return v
				}
				return psc[field]
			}
			if get(t, pick("seccompProfile"), "type") != "RuntimeDefault" {
				t.Errorf("%s/%v: seccompProfile %v, want type RuntimeDefault", key, name, pick("seccompProfile"))
			}
			if pick("runAsNonRoot") != true {
				t.Errorf("%s/%v: runAsNonRoot is not true", key, name)
			}
			if uid, ok := csc["runAsUser"].(int); ok && uid == 0 {
				t.Errorf("%s/%v: runAsUser 0", key, name)
			}
			if csc["allowPrivilegeEscalation"] != false {
				t.Errorf("%s/%v: allowPrivilegeEscalation %v, want false", key, name, csc["allowPrivilegeEscalation"])
			}
			if csc["privileged"] == true {
				t.Errorf("%s/%v: privileged", key, name)
			}
			drop, _ := get(t, csc, "capabilities", "drop").([]any)
			if !slices.Contains(drop, any("ALL")) {
				t.Errorf("%s/%v: capabilities.drop %v, want ALL", key, name, drop)
			}
			if add, _ := get(t, csc, "capabilities", "add").([]any); len(add) > 0 && !slices.Equal(add, []any{"NET_BIND_SERVICE"}) {
				t.Errorf("%s/%v: capabilities.add %v", key, name, add)
			}
			ports, _ := get(t, c, "ports").([]any)
			for _, p := range ports {
				if get(t, p, "hostPort") != nil {
					t.Errorf("%s/%v: hostPort %v", key, name, get(t, p, "hostPort"))
				}
			}
		}
	}
}

// A container with a read-only root file system has a writable /tmp
// (an emptyDir): the broker TLS bridge makes its socket there
// ("mq: tls bridge: stat ...: no such file or directory" at start).
func TestWritableTmp(t *testing.T) {
	for key, w := range workloads(t) {
		pod := get(t, w, "spec", "template", "spec")
		emptyDirs := map[any]bool{}
		for _, v := range get(t, pod, "volumes").([]any) {
			if get(t, v, "emptyDir") != nil {
				emptyDirs[get(t, v, "name")] = true
			}
		}
		for _, c := range get(t, pod, "containers").([]any) {
			if get(t, c, "securityContext", "readOnlyRootFilesystem") != true {
				continue
			}
			var tmp bool
			mounts, _ := get(t, c, "volumeMounts").([]any)
			for _, m := range mounts {
				if get(t, m, "mountPath") == "/tmp" && get(t, m, "readOnly") != true && emptyDirs[get(t, m, "name")] {
					tmp = true
				}
			}
			if !tmp {
				t.Errorf("%s/%v: read-only root file system without a writable emptyDir at /tmp", key, get(t, c, "name"))
			}
		}
	}
}

// KEDA owns the replica count of what it scales: a replicas field there
// would reset it on every kubectl apply.
func TestNoReplicasWhereKEDAScales(t *testing.T) {
	all := manifests(t)
	ref := get(t, all["ScaledObject"], "spec", "scaleTargetRef").(obj)
	var target obj
	for _, o := range all {
		if o["kind"] == ref["kind"] && get(t, o, "metadata", "name") == ref["name"] {
			target = o
		}
	}
	if target == nil {
		t.Fatalf("no %v %v among the manifests", ref["kind"], ref["name"])
	}
	if r, ok := get(t, target, "spec").(obj)["replicas"]; ok {
		t.Errorf("%v %v sets replicas: %v; KEDA owns the count", ref["kind"], ref["name"], r)
	}
}

// dockerStages splits a Dockerfile into its stages by name ("" for an
// unnamed one), each with its base image and lines.
func dockerStages(t *testing.T, path string) (names []string, base map[string]string, lines map[string][]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	base, lines = map[string]string{}, map[string][]string{}
	cur := ""
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "FROM" {
			cur = ""
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				cur = f[3]
			}
			names = append(names, cur)
			base[cur] = f[1]
			continue
		}
		lines[cur] = append(lines[cur], l)
	}
	return names, base, lines
}

// The scaler runs on a small CPU image of its own (Dockerfile.cuda's
// scaler stage): not the multi-GB CUDA image, whose defaults may expose
// every GPU of the node to it; the default build is still the CUDA image.
func TestScalerImage(t *testing.T) {
	all := manifests(t)
	dep, sts := all["inferq-scaler/Deployment"], all["StatefulSet"]
	scalerImage, _ := get(t, dep, "spec", "template", "spec", "containers", 0, "image").(string)
	if scalerImage == "" || scalerImage == get(t, sts, "spec", "template", "spec", "containers", 0, "image") {
		t.Errorf("the scaler runs image %q, the worker's", scalerImage)
	}
	names, base, lines := dockerStages(t, "../Dockerfile.cuda")
	if !slices.Contains(names, "scaler") {
		t.Fatalf("Dockerfile.cuda has no scaler stage (stages %v)", names)
	}
	if b := strings.ToLower(base["scaler"]); strings.Contains(b, "cuda") || strings.Contains(b, "nvidia") || strings.Contains(b, "$") {
		t.Errorf("the scaler stage is built FROM %s; want a small CPU base image, named", base["scaler"])
	}
	var entry bool
	for _, l := range lines["scaler"] {
		if strings.Contains(l, "NVIDIA_") || strings.Contains(l, "CUDA_") {
			t.Errorf("the scaler stage sets GPU variables: %s", l)
		}
		entry = entry || strings.HasPrefix(l, "ENTRYPOINT ") && strings.Contains(l, `"scaler"`)
		if strings.HasPrefix(l, "USER ") && !strings.Contains(l, "10001") {
			t.Errorf("the scaler stage runs as %s", l)
		}
	}
	if !entry {
		t.Error("the scaler stage's ENTRYPOINT does not run inferq scaler")
	}
	if last := names[len(names)-1]; !strings.Contains(strings.ToLower(base[last]), "cuda") {
		t.Errorf("the last stage (the default build) is FROM %s, want the CUDA image", base[last])
	}
	c := get(t, dep, "spec", "template", "spec", "containers", 0)
	env, _ := get(t, c, "env").([]any)
	for _, e := range env {
		if n, _ := get(t, e, "name").(string); strings.HasPrefix(n, "NVIDIA_") || strings.HasPrefix(n, "CUDA_") {
			t.Errorf("the scaler's container sets %s", n)
		}
	}
	if get(t, c, "resources", "limits", "nvidia.com/gpu") != nil || get(t, dep, "spec", "template", "spec", "runtimeClassName") != nil {
		t.Error("the scaler asks for a GPU or the NVIDIA runtime")
	}
}

// The build context leaves out what the image does not need: .git, the
// 44 MB lib/, builds, data.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "/"), "/")
		have[l] = true
	}
	for _, want := range []string{".git", "lib", "bin", "data", "dist", "tmp"} {
		if !have[want] {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

// Crash reports are signed (issue 27 item 2): every inferq pod reads the
// fleet key from a file, --crash-key-file, mounted read-only from a
// Secret that is not optional (no pod starts without it, rather than
// accept forged reports) and not readable by others; the key is never a
// literal in a manifest (INFERQ_CRASH_KEY from a value).
func TestCrashKeyFromSecret(t *testing.T) {
	d := manifests(t)["StatefulSet"]
	pod := get(t, d, "spec", "template", "spec")
	c := get(t, pod, "containers", 0)
	var keyFile string
	args, _ := get(t, c, "args").([]any)
	for _, a := range args {
		if s, _ := a.(string); strings.HasPrefix(s, "--crash-key-file=") {
			keyFile = strings.TrimPrefix(s, "--crash-key-file=")
		}
		if a == "--local-crash-counts" {
			t.Errorf("the StatefulSet turns the fleet's crash counts off")
		}
	}
	if keyFile == "" || !filepath.IsAbs(keyFile) {
		t.Fatalf("the StatefulSet's args %v set no absolute --crash-key-file", args)
	}
	env, _ := get(t, c, "env").([]any)
	for _, e := range env {
		if n := get(t, e, "name"); (n == "INFERQ_CRASH_KEY" || n == "INFERQ_CRASH_KEY_FILE") && get(t, e, "value") != nil {
			t.Errorf("%v is set to a literal value", n)
		}
	}
	var mount obj
	for _, m := range get(t, c, "volumeMounts").([]any) {
		if p, _ := get(t, m, "mountPath").(string); p == filepath.Dir(keyFile) {
			mount = m.(obj)
		}
	}
	if mount == nil || mount["readOnly"] != true {
		t.Fatalf("no read-only volume mounted at %s, the directory of --crash-key-file: %v", filepath.Dir(keyFile), mount)
	}
	var vol obj
	for _, v := range get(t, pod, "volumes").([]any) {
		if get(t, v, "name") == mount["name"] {
			vol = v.(obj)
		}
	}
	secret, _ := get(t, vol, "secret").(obj)
	if secret == nil || secret["secretName"] == nil || secret["optional"] == true {
		t.Fatalf("volume %v is not a Secret that must exist: %v", mount["name"], vol)
	}
	if mode, ok := secret["defaultMode"].(int); !ok || mode&0o007 != 0 || mode&0o222 != 0 {
		t.Errorf("the key's file mode %#o: want it readable by the pod's user or group only (e.g. 0440)", secret["defaultMode"])
	}
	key := filepath.Base(keyFile)
	if items, _ := secret["items"].([]any); items != nil {
		found := false
		for _, it := range items {
			if get(t, it, "path") == key {
				found = true
			}
		}
		if !found {
			t.Errorf("the Secret's items %v do not make the file %s", items, key)
		}
	}
	// The Secret is the operator's to create (a key in the repository
	// would be every user's, and kubectl apply would reset a real one):
	// the manifest says how.
	data, err := os.ReadFile("kubernetes/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("create secret generic %v", secret["secretName"]); !strings.Contains(string(data), want) {
		t.Errorf("statefulset.yaml does not say how to create the Secret (%q)", want)
	}
	for k, o := range manifests(t) {
		if strings.HasSuffix(k, "Secret") && get(t, o, "metadata", "name") == secret["secretName"] {
			t.Errorf("the manifests ship the Secret %v: its key would be every user's", secret["secretName"])
		}
	}
}

// The StatefulSet runs as a fleet (docs/operating.md "Fleets"): every
// replica spreads its queues over the same shard count, at least
// maxReplicaCount + 1 (shard.ForFleet), so that producers that do not
// shard are served by every replica, and the ScaledObject sums the same
// shards.
func TestFleetShards(t *testing.T) {
	all := manifests(t)
	c := get(t, all["StatefulSet"], "spec", "template", "spec", "containers", 0)
	shards := ""
	for _, a := range get(t, c, "args").([]any) {
		if s, _ := a.(string); strings.HasPrefix(s, "--queue-shards=") {
			shards = strings.TrimPrefix(s, "--queue-shards=")
		}
	}
	so := all["ScaledObject"]
	maxReplicas, _ := get(t, so, "spec", "maxReplicaCount").(int)
	if n := atoi(t, shards); int(n) < shard.ForFleet(maxReplicas) {
		t.Errorf("--queue-shards=%s: want at least %d for maxReplicaCount %d", shards, shard.ForFleet(maxReplicas), maxReplicas)
	}
	if got := get(t, get(t, so, "spec", "triggers", 0), "metadata", "queueShards"); got != shards {
		t.Errorf("the ScaledObject's queueShards %v, want the replicas' %s", got, shards)
	}
}
