// Package v1alpha1 is KEDA's keda.sh/v1alpha1 API types (ScaledObject,
// ScaledJob, TriggerAuthentication, ClusterTriggerAuthentication), for
// decoding inferq's manifests strictly.
//
// Every other .go file here is a verbatim copy of the file of the same
// name in github.com/kedacore/keda/v2/apis/keda/v1alpha1 at KEDA v2.20.2
// (Apache License 2.0, the header of each file); keda-types.sh, beside
// go.mod, copies them again, and with -check says whether they still match.
// Left out: KEDA's groupversion_info.go, scalable_object.go and the
// webhooks, which import controller-runtime and with it client-go's
// clientset: with KEDA's package itself this module's test compiles about
// 950 packages instead of 380 (docs/operating.md "Kubernetes"). This file
// stands in for groupversion_info.go and the few names the copies take from
// the webhooks, on apimachinery alone.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is group version used to register these objects
	GroupVersion = schema.GroupVersion{Group: "keda.sh", Version: "v1alpha1"}

	// SchemeGroupVersion is group version used to register these objects
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder collects the types the copied files register in their
	// init functions, as controller-runtime's scheme.Builder does.
	SchemeBuilder = &schemeBuilder{}

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// schemeBuilder is controller-runtime's scheme.Builder on apimachinery's
// runtime.SchemeBuilder.
type schemeBuilder struct {
	runtime.SchemeBuilder
}

// Register adds objects to the GroupVersion's types.
func (b *schemeBuilder) Register(objects ...runtime.Object) *schemeBuilder {
	b.SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objects...)
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})
	return b
}

// What the copied files use of the webhooks (scaledobject_webhook.go and
// the others), which are left out: the validators' types, empty there too,
// and the names of the resource metrics.
type (
	ScaledObjectCustomValidator                 struct{}
	ScaledJobCustomValidator                    struct{}
	TriggerAuthenticationCustomValidator        struct{}
	ClusterTriggerAuthenticationCustomValidator struct{}
)

var (
	memoryString = "memory"
	cpuString    = "cpu"
)

const workloadString = "workload"

// Kind takes an unqualified kind and returns back a Group qualified GroupKind
func Kind(kind string) schema.GroupKind {
	return GroupVersion.WithKind(kind).GroupKind()
}

// Resource takes an unqualified resource and returns a Group qualified GroupResource
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}
