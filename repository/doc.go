// Package repository serves models from a model repository in Triton's
// layout and reloads them without a restart:
//
//	DIR/<model>/config.yaml          optional: the fields of a models: entry, plus version_policy
//	DIR/<model>/<version>/model.onnx one directory per version, a positive integer
//
// Scan reads the layout. A Repository loads what a scan selects (the
// version policy: latest 1 by default), keeps each model's versions behind
// one Switch (the consumer.Batcher the consumer holds; a task runs on the
// highest version loaded) and, in poll mode, rescans every repository_poll
// and reloads what changed; in explicit mode it loads and unloads on
// request (Load, Unload; the HTTP repository extension in Handler).
//
// A reload builds and warms the new version's sessions before it takes
// traffic, switches atomically, lets the old version's batcher run
// everything it accepted (in-flight and queued requests finish on the old
// version), then stops it and closes its sessions: no queued task is
// dropped or failed. A version that fails to load leaves what was serving
// in place; Index says why.
package repository
