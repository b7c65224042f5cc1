// Package oip is inferq's Open Inference Protocol front ends (KServe v2,
// Triton's HTTP and gRPC APIs) and the operations endpoints beside them:
//
//	http.go      Handler: /healthz, /readyz, /metrics, /v1/models,
//	             /v1/tasks/{id}, the bearer token, and the /v2 routes of
//	oip.go       the protocol over HTTP: metadata, health, infer (JSON and
//	             the binary tensor extension)
//	grpc.go      NewGRPCServer: inference.GRPCInferenceService, its health,
//	             metadata and ModelInfer, with the same token and limits
//	grpcconv.go  gRPC tensors to and from what admission reads
//	grpcrepo.go  Triton's model repository RPCs (a ModelRepository)
//	triton.go    Triton's ModelConfig and ModelStatistics
//	tritonhttp.go the same over HTTP (/config, /stats), the repository
//	             index without a repository, JSON answers to unknown routes
//	inferencepb  the generated gRPC code
//
// Why a package of its own: the protocols are one concern (routes, wire
// forms, status codes, tokens, concurrency caps) and serving is another
// (the queue loop, batchers, queue policy, tracing, result records). The
// front ends reach serving only through the small interfaces of server.go,
// declared here, where they are used: a Catalog (Model, Models) for the
// model routes, an Inferer (Infer) for infer, Health and Records for the
// readiness and task routes; Server and Inference bundle them.
// *consumer.Server satisfies Server[*consumer.Model], and package consumer
// does not import this one. A Catalog is generic in its model type (Model:
// admission's admit.Model and the version serving now) so that it hands
// back the consumer's own models without a type assertion; Handler and
// NewGRPCServer infer it from the server they are given.
//
// Infer takes an admit.Input (admission is package admit's, the same for
// every path) and runs the request ahead of queued tasks; the front end
// encodes the answer in the Reply it passes (JSON and binary over HTTP,
// the typed or raw tensors of gRPC), so that the request's trace covers
// the encoding. It returns the verdict and the outcome label, which the
// front end maps to Triton's HTTP statuses and gRPC codes. The front end
// counts every request once, where it ends, through an Observer
// (*consumer.Metrics: inferq_http_infer_total, inferq_grpc_infer_total,
// the Triton counters, inferq_sync_duration_seconds), since some requests
// end here before serving sees them (an unknown model, a body over the
// limit, a full concurrency cap). ModelStatistics reads the metrics every
// path reports to from a prometheus.Gatherer, by their names.
//
// Concurrency: Handler's http.Handler and NewGRPCServer's server are safe
// for concurrent use; each infer request holds one of MaxConcurrentInfer
// slots while it is admitted and runs, once its body has arrived (a
// client trickling its body holds no slot; HTTPConfig.MaxBodyMemory
// bounds the bodies being read). The interfaces' methods must
// be safe for concurrent use: models come and go while requests run, and
// a request sees the models served when it is admitted.
package oip
