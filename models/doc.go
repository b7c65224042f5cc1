// Package models is inferq's model catalog: the YAML configuration schema,
// its defaults and its validation.
//
// Load and Parse return a Config with every default filled in and every
// field checked; an error names the model and the field at fault. Nothing
// here touches the network, the GPU or onnxruntime, and nothing reads the
// environment: cmd/inferq layers environment variables and flags on top.
//
// Model names are used verbatim as task names and in channel names; they are
// never turned into file paths.
package models
