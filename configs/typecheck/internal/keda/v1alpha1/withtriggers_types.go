/*
Copyright 2021 The KEDA Authors

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtime "k8s.io/apimachinery/pkg/runtime"
)

// listable is satisfied by duck types that can enumerate their list
// representation. Previously provided by knative.dev/pkg/apis.Listable.
type listable interface {
	runtime.Object
	GetListType() runtime.Object
}

// populatable is satisfied by skeleton resources that can fill in all
// fields for JSON round-trip verification.
// Previously provided by knative.dev/pkg/apis/duck.Populatable.
type populatable interface {
	listable
	Populate()
}

// implementable is satisfied by the embeddable duck-type fragment
// (e.g. ScaleTriggers) that points back to the full wrapper type.
// Previously provided by knative.dev/pkg/apis/duck.Implementable.
type implementable interface {
	GetFullType() populatable
}

const (
	// Default polling interval for a ScaledObject triggers if no pollingInterval is defined.
	defaultPollingInterval = 30
)

// +kubebuilder:object:root=true

// WithTriggers is a specification for a resource with triggers
type WithTriggers struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	InternalKind string           `json:"internalKind"`
	Spec         WithTriggersSpec `json:"spec"`
}

// WithTriggersSpec is the spec for a an object with triggers resource
type WithTriggersSpec struct {
	PollingInterval *int32          `json:"pollingInterval,omitempty"`
	Triggers        []ScaleTriggers `json:"triggers"`
}

var (
	_ populatable   = (*WithTriggers)(nil)
	_ implementable = (*ScaleTriggers)(nil)
	_ listable      = (*WithTriggers)(nil)
)

// GetFullType implements implementable.
func (*ScaleTriggers) GetFullType() populatable {
	return &WithTriggers{}
}

// Populate implements populatable.
func (t *WithTriggers) Populate() {
	t.Spec.Triggers = []ScaleTriggers{{}}
}

// GetListType implements listable.
func (*WithTriggers) GetListType() runtime.Object {
	return &WithTriggersList{}
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// WithTriggersList is a list of ScaledObject resources
type WithTriggersList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []WithTriggers `json:"items"`
}

// GetPollingInterval returns defined polling interval, if not set default is being returned
func (t *WithTriggers) GetPollingInterval() time.Duration {
	if t.Spec.PollingInterval != nil {
		return time.Second * time.Duration(*t.Spec.PollingInterval)
	}

	return time.Second * time.Duration(defaultPollingInterval)
}

// GenerateIdentifier returns identifier for the object in for "kind.namespace.name"
func (t *WithTriggers) GenerateIdentifier() string {
	return GenerateIdentifier(t.InternalKind, t.Namespace, t.Name)
}

// AsDuckWithTriggers tries to generate WithTriggers object for input object
// returns error if input object is unknown
func AsDuckWithTriggers(scalableObject interface{}) (*WithTriggers, error) {
	switch obj := scalableObject.(type) {
	case *ScaledObject:
		return &WithTriggers{
			TypeMeta:     obj.TypeMeta,
			ObjectMeta:   obj.ObjectMeta,
			InternalKind: "ScaledObject",
			Spec: WithTriggersSpec{
				PollingInterval: obj.Spec.PollingInterval,
				Triggers:        obj.Spec.Triggers,
			},
		}, nil
	case *ScaledJob:
		return &WithTriggers{
			TypeMeta:     obj.TypeMeta,
			ObjectMeta:   obj.ObjectMeta,
			InternalKind: "ScaledJob",
			Spec: WithTriggersSpec{
				PollingInterval: obj.Spec.PollingInterval,
				Triggers:        obj.Spec.Triggers,
			},
		}, nil
	default:
		// here could be the conversion from unknown Duck type potentially in the future
		return nil, fmt.Errorf("unknown scalable object type %v", scalableObject)
	}
}
