package models

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DeviceKind says where a model's instances run.
type DeviceKind string

// Device kinds.
const (
	// DeviceAuto places one instance set per visible GPU, or on the CPU
	// when there is none.
	DeviceAuto DeviceKind = "auto"
	// DeviceCPU runs on the CPU only.
	DeviceCPU DeviceKind = "cpu"
	// DeviceCUDA requires GPUs: every visible one; no usable GPU is a
	// startup error.
	DeviceCUDA DeviceKind = "cuda"
	// DeviceList runs on the GPUs listed in Device.GPUs.
	DeviceList DeviceKind = "list"
)

// Device is the `device` field: auto, cpu, cuda, or a list of GPU indexes
// such as [0, 2].
type Device struct {
	Kind DeviceKind
	GPUs []int // DeviceList only
}

// String formats d as it is written in the config.
func (d Device) String() string {
	if d.Kind != DeviceList {
		return string(d.Kind)
	}
	parts := make([]string, len(d.GPUs))
	for i, g := range d.GPUs {
		parts[i] = strconv.Itoa(g)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// UnmarshalYAML reads "auto", "cpu", "cuda", a GPU index, or a list of GPU
// indexes.
func (d *Device) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		v := strings.ToLower(strings.TrimSpace(n.Value))
		switch DeviceKind(v) {
		case DeviceAuto, DeviceCPU, DeviceCUDA:
			*d = Device{Kind: DeviceKind(v)}
			return nil
		case "":
			*d = Device{Kind: DeviceAuto}
			return nil
		}
		if i, err := strconv.Atoi(v); err == nil {
			*d = Device{Kind: DeviceList, GPUs: []int{i}}
			return nil
		}
		return fmt.Errorf("line %d: device: want auto, cpu, cuda or a list of GPU indexes such as [0, 1]", n.Line)
	case yaml.SequenceNode:
		var gpus []int
		if err := n.Decode(&gpus); err != nil {
			return fmt.Errorf("line %d: device: a list must hold GPU indexes such as [0, 1]", n.Line)
		}
		*d = Device{Kind: DeviceList, GPUs: gpus}
		return nil
	}
	return fmt.Errorf("line %d: device: want auto, cpu, cuda or a list of GPU indexes", n.Line)
}

// MarshalYAML writes d as it is read.
func (d Device) MarshalYAML() (any, error) {
	if d.Kind == DeviceList {
		return d.GPUs, nil
	}
	return string(d.Kind), nil
}
