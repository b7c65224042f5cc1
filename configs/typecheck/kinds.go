package typecheck

import (
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	kustomize "sigs.k8s.io/kustomize/api/types"

	kedav1alpha1 "github.com/inferq/inferq/configs/typecheck/internal/keda/v1alpha1"
)

// GVK names a kind as a manifest does: its apiVersion and kind.
type GVK struct {
	APIVersion string
	Kind       string
}

func (g GVK) String() string { return g.APIVersion + " " + g.Kind }

// Kinds returns the kinds the check knows, each with a constructor of
// the typed object a document of that kind decodes into: the Kubernetes
// kinds an inferq deployment may ship (k8s.io/api), KEDA's
// (internal/keda/v1alpha1), the Prometheus Operator's (monitoring/v1)
// and kustomize's. A document of any other kind fails the check: add
// its type here first.
func Kinds() map[GVK]func() any {
	return map[GVK]func() any{
		{"v1", "ConfigMap"}:             func() any { return new(corev1.ConfigMap) },
		{"v1", "Secret"}:                func() any { return new(corev1.Secret) },
		{"v1", "Service"}:               func() any { return new(corev1.Service) },
		{"v1", "ServiceAccount"}:        func() any { return new(corev1.ServiceAccount) },
		{"v1", "PersistentVolumeClaim"}: func() any { return new(corev1.PersistentVolumeClaim) },
		{"v1", "Namespace"}:             func() any { return new(corev1.Namespace) },
		{"v1", "LimitRange"}:            func() any { return new(corev1.LimitRange) },
		{"v1", "ResourceQuota"}:         func() any { return new(corev1.ResourceQuota) },
		{"v1", "Pod"}:                   func() any { return new(corev1.Pod) },

		{"apps/v1", "Deployment"}:  func() any { return new(appsv1.Deployment) },
		{"apps/v1", "StatefulSet"}: func() any { return new(appsv1.StatefulSet) },
		{"apps/v1", "DaemonSet"}:   func() any { return new(appsv1.DaemonSet) },

		{"batch/v1", "Job"}:                                    func() any { return new(batchv1.Job) },
		{"batch/v1", "CronJob"}:                                func() any { return new(batchv1.CronJob) },
		{"autoscaling/v2", "HorizontalPodAutoscaler"}:          func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
		{"policy/v1", "PodDisruptionBudget"}:                   func() any { return new(policyv1.PodDisruptionBudget) },
		{"networking.k8s.io/v1", "NetworkPolicy"}:              func() any { return new(networkingv1.NetworkPolicy) },
		{"networking.k8s.io/v1", "Ingress"}:                    func() any { return new(networkingv1.Ingress) },
		{"node.k8s.io/v1", "RuntimeClass"}:                     func() any { return new(nodev1.RuntimeClass) },
		{"scheduling.k8s.io/v1", "PriorityClass"}:              func() any { return new(schedulingv1.PriorityClass) },
		{"rbac.authorization.k8s.io/v1", "Role"}:               func() any { return new(rbacv1.Role) },
		{"rbac.authorization.k8s.io/v1", "RoleBinding"}:        func() any { return new(rbacv1.RoleBinding) },
		{"rbac.authorization.k8s.io/v1", "ClusterRole"}:        func() any { return new(rbacv1.ClusterRole) },
		{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding"}: func() any { return new(rbacv1.ClusterRoleBinding) },

		{"keda.sh/v1alpha1", "ScaledObject"}:                 func() any { return new(kedav1alpha1.ScaledObject) },
		{"keda.sh/v1alpha1", "ScaledJob"}:                    func() any { return new(kedav1alpha1.ScaledJob) },
		{"keda.sh/v1alpha1", "TriggerAuthentication"}:        func() any { return new(kedav1alpha1.TriggerAuthentication) },
		{"keda.sh/v1alpha1", "ClusterTriggerAuthentication"}: func() any { return new(kedav1alpha1.ClusterTriggerAuthentication) },

		{"monitoring.coreos.com/v1", "PodMonitor"}:     func() any { return new(monitoringv1.PodMonitor) },
		{"monitoring.coreos.com/v1", "ServiceMonitor"}: func() any { return new(monitoringv1.ServiceMonitor) },
		{"monitoring.coreos.com/v1", "PrometheusRule"}: func() any { return new(monitoringv1.PrometheusRule) },
		{"monitoring.coreos.com/v1", "Probe"}:          func() any { return new(monitoringv1.Probe) },

		{kustomize.KustomizationVersion, kustomize.KustomizationKind}: func() any { return new(kustomize.Kustomization) },
		{kustomize.ComponentVersion, kustomize.ComponentKind}:         func() any { return new(kustomize.Kustomization) },
	}
}
