// Package externalscalerpb is the Go code of KEDA's external scaler gRPC
// protocol (service externalscaler.ExternalScaler), generated from
// externalscaler.proto, a verbatim copy of KEDA's file (Apache-2.0; see its
// header for the source and version).
//
// The generated files are committed, so building needs no protoc. To
// regenerate them, install protoc (Debian: apt-get install protobuf-compiler)
// and the two plugins at the versions whose output compiles against the
// grpc version go.mod pins (kubemq-go's constraint keeps grpc at v1.63.2):
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.3.0
//	go generate ./scaler/externalscalerpb
package externalscalerpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative "--go_opt=Mexternalscaler.proto=github.com/inferq/inferq/scaler/externalscalerpb;externalscalerpb" --go-grpc_out=. --go-grpc_opt=paths=source_relative "--go-grpc_opt=Mexternalscaler.proto=github.com/inferq/inferq/scaler/externalscalerpb;externalscalerpb" externalscaler.proto
