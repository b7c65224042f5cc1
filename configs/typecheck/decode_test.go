package typecheck

import (
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kustomize "sigs.k8s.io/kustomize/api/types"

	kedav1alpha1 "github.com/inferq/inferq/configs/typecheck/internal/keda/v1alpha1"
)

const statefulSet = `# a comment before the first document
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: w
spec:
  serviceName: w
  selector:
    matchLabels: {app: w}
  template:
    metadata:
      labels: {app: w}
    spec:
      containers:
        - name: c
          image: i
          ports:
            - name: http
              containerPort: 8080
          readinessProbe:
            httpGet: {path: /readyz, port: http}
          resources:
            limits: {memory: 1Gi, nvidia.com/gpu: 2}
`

const scaledObject = `apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: s
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: w}
  minReplicaCount: 0
  triggers:
    - type: external
      metadata:
        scalerAddress: a:6000
        targetDepth: "256"
`

const podMonitor = `apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: p
spec:
  selector:
    matchLabels: {app: w}
  podMetricsEndpoints:
    - port: http
      path: /metrics
      interval: 15s
      authorization:
        type: Bearer
        credentials: {name: s, key: token}
`

// Each manifest decodes into the type of its kind, with its fields.
func TestDecodeTyped(t *testing.T) {
	stream := statefulSet + "---\n" + scaledObject + "--- # the monitor\n" + podMonitor +
		"---\n# only a comment\n---\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n"
	docs, err := Decode("x.yaml", []byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 4 {
		t.Fatalf("%d documents, want 4 (the comment-only one skipped)", len(docs))
	}
	sts, ok := docs[0].Object.(*appsv1.StatefulSet)
	if !ok {
		t.Fatalf("document 1 is %T", docs[0].Object)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if c.Ports[0].ContainerPort != 8080 || c.ReadinessProbe.HTTPGet.Port.StrVal != "http" {
		t.Errorf("container %+v", c)
	}
	if gpus := c.Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]; gpus.Value() != 2 {
		t.Errorf("gpu limit %v", gpus)
	}
	so, ok := docs[1].Object.(*kedav1alpha1.ScaledObject)
	if !ok || *so.Spec.MinReplicaCount != 0 || so.Spec.Triggers[0].Metadata["targetDepth"] != "256" || so.Spec.ScaleTargetRef.Kind != "StatefulSet" {
		t.Errorf("document 2: %T %+v", docs[1].Object, docs[1].Object)
	}
	pm, ok := docs[2].Object.(*monitoringv1.PodMonitor)
	if !ok || pm.Spec.PodMetricsEndpoints[0].Authorization.Credentials.Key != "token" {
		t.Errorf("document 3: %T %+v", docs[2].Object, docs[2].Object)
	}
	if k, ok := docs[3].Object.(*kustomize.Kustomization); !ok || k.Resources[0] != "a.yaml" {
		t.Errorf("document 4: %T %+v", docs[3].Object, docs[3].Object)
	}
	wantLines := []int{2, 25, 38, 55}
	for i, d := range docs {
		if d.Index != i+1 || d.Line != wantLines[i] || d.File != "x.yaml" {
			t.Errorf("document %d: index %d line %d file %s, want index %d line %d", i, d.Index, d.Line, d.File, i+1, wantLines[i])
		}
	}
}

// What strict decoding refuses, and the error naming file, line,
// document and field.
func TestDecodeRefuses(t *testing.T) {
	sub := func(old, new string) string {
		if !strings.Contains(statefulSet, old) {
			t.Fatalf("the StatefulSet has no %q", old)
		}
		return strings.Replace(statefulSet, old, new, 1)
	}
	for _, tc := range []struct {
		name string
		doc  string
		want []string // in the error, all of them
	}{
		{"unknown field", sub("          image: i\n", "          image: i\n          imagePullPolicyy: Always\n"),
			[]string{"x.yaml:2: document 1 (StatefulSet w)", `unknown field "spec.template.spec.containers[0].imagePullPolicyy"`}},
		{"field in another case", sub("containerPort:", "containerport:"),
			[]string{`unknown field "spec.template.spec.containers[0].ports[0].containerport"`}},
		{"key twice", sub("  serviceName: w\n", "  serviceName: w\n  serviceName: v\n"),
			[]string{"x.yaml:2: document 1", `"serviceName" already set`}},
		{"wrong type", sub("containerPort: 8080", `containerPort: "8080"`),
			[]string{"document 1 (StatefulSet w)", "cannot unmarshal string", "containerPort", "int32"}},
		{"bad quantity", sub("memory: 1Gi", "memory: 1Gx"),
			[]string{"document 1 (StatefulSet w)", "quantities must match"}},
		{"field at the wrong level", sub("  serviceName: w\n", "  serviceName: w\n  containers: []\n"),
			[]string{`unknown field "spec.containers"`}},
		{"old apiVersion", sub("apps/v1", "apps/v1beta1"),
			[]string{`apiVersion "apps/v1beta1" does not serve kind StatefulSet: want apps/v1`}},
		{"unknown kind", sub("kind: StatefulSet", "kind: StatefulSett"),
			[]string{"kind StatefulSett (apiVersion apps/v1) is not one the check knows", "configs/typecheck/kinds.go"}},
		{"no kind", sub("kind: StatefulSet\n", ""),
			[]string{"document 1 (w)", "apiVersion or kind is missing"}},
		{"no name", sub("  name: w\n", "  labels: {a: b}\n"),
			[]string{"document 1 (StatefulSet)", "metadata.name is missing"}},
		{"a list", "- a\n- b\n", []string{"x.yaml:1: document 1", "not a mapping"}},
		{"not YAML", sub("  name: w\n", "  name: [w\n"), []string{"x.yaml:2: document 1: not valid YAML", "line 5"}},
		{"KEDA: unknown field", strings.Replace(scaledObject, "minReplicaCount", "minReplicas", 1),
			[]string{"(ScaledObject s)", `unknown field "spec.minReplicas"`}},
		{"KEDA: a number for a string", strings.Replace(scaledObject, `"256"`, "256", 1),
			[]string{"(ScaledObject s)", "cannot unmarshal number", "spec.triggers.metadata"}},
		{"KEDA: wrong group", strings.Replace(scaledObject, "keda.sh/v1alpha1", "keda.k8s.io/v1alpha1", 1),
			[]string{`apiVersion "keda.k8s.io/v1alpha1" does not serve kind ScaledObject: want keda.sh/v1alpha1`}},
		{"Prometheus Operator: unknown field", strings.Replace(podMonitor, "      path: /metrics", "      pth: /metrics", 1),
			[]string{"(PodMonitor p)", `unknown field "spec.podMetricsEndpoints[0].pth"`}},
		{"kustomize: unknown field", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n",
			[]string{"(Kustomization)", `unknown field "resource"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("x.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// A bad document among good ones is named by its index and first line;
// the good ones still decode.
func TestDecodeNamesTheDocument(t *testing.T) {
	bad := strings.Replace(scaledObject, "  minReplicaCount: 0\n", "  minReplicaCount: zero\n", 1)
	docs, err := Decode("configs/k.yaml", []byte(statefulSet+"---\n"+bad+"---\n"+podMonitor))
	if err == nil || !strings.Contains(err.Error(), "configs/k.yaml:25: document 2 (ScaledObject s)") || !strings.Contains(err.Error(), "minReplicaCount") {
		t.Fatalf("error %v", err)
	}
	if len(docs) != 2 || docs[1].GVK.Kind != "PodMonitor" || docs[1].Index != 3 {
		t.Errorf("decoded %+v, want the StatefulSet and the PodMonitor (document 3)", docs)
	}
}

// Every kind Kinds lists decodes an object of its own kind, with a name.
func TestKindsDecode(t *testing.T) {
	for g := range Kinds() {
		doc := "apiVersion: " + g.APIVersion + "\nkind: " + g.Kind + "\nmetadata:\n  name: obj\n"
		docs, err := Decode("k.yaml", []byte(doc))
		if err != nil || len(docs) != 1 || docs[0].GVK != g {
			t.Errorf("%s: %v %+v", g, err, docs)
		}
	}
}

// Decode never panics, and what it accepts is of a kind it knows.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{statefulSet, scaledObject, podMonitor, statefulSet + "---\n" + podMonitor, "---\n---\n", "a: [", "- 1\n"} {
		f.Add([]byte(s))
	}
	kinds := Kinds()
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := Decode("f.yaml", data)
		if err != nil && !strings.Contains(err.Error(), "f.yaml:") {
			t.Errorf("error without the file: %v", err)
		}
		for _, d := range docs {
			if kinds[d.GVK] == nil || d.Object == nil {
				t.Errorf("accepted %+v", d)
			}
		}
	})
}
