// Package inferencepb is the Go code of the Open Inference Protocol's gRPC
// API (KServe v2; service inference.GRPCInferenceService, which Triton
// serves too), generated from grpc_predict_v2.proto, a verbatim copy of
// KServe's file (Apache-2.0; see its header for the source and commit)
// but for five RPCs of Triton's added to the service, whose messages are in
// triton_extensions.proto: inferq's own subset of Triton's messages, with
// Triton's package, names and field numbers (the wire is Triton's; only
// the fields inferq uses are declared).
//
// The generated files are committed, so building needs no protoc. To
// regenerate them, install protoc (Debian: apt-get install protobuf-compiler;
// these were made with 3.21.12) and the two plugins at the versions whose
// output compiles against the grpc version go.mod pins (kubemq-go's
// constraint keeps grpc at v1.63.2):
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.3.0
//	go generate ./oip/inferencepb
package inferencepb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative "--go_opt=Mgrpc_predict_v2.proto=github.com/inferq/inferq/oip/inferencepb;inferencepb" "--go_opt=Mtriton_extensions.proto=github.com/inferq/inferq/oip/inferencepb;inferencepb" --go-grpc_out=. --go-grpc_opt=paths=source_relative "--go-grpc_opt=Mgrpc_predict_v2.proto=github.com/inferq/inferq/oip/inferencepb;inferencepb" "--go-grpc_opt=Mtriton_extensions.proto=github.com/inferq/inferq/oip/inferencepb;inferencepb" grpc_predict_v2.proto triton_extensions.proto
