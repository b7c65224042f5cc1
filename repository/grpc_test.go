package repository_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/models/examples"
	pb "github.com/inferq/inferq/oip/inferencepb"
	"github.com/inferq/inferq/repository"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcClient dials r's gRPC endpoint.
func grpcClient(t *testing.T, r *rig) pb.GRPCInferenceServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(r.w.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewGRPCInferenceServiceClient(cc)
}

// withToken is ctx carrying the rig's bearer token.
func withToken(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer secret")
}

func grpcIndex(t *testing.T, ctx context.Context, c pb.GRPCInferenceServiceClient) map[string]*pb.RepositoryIndexResponse_ModelIndex {
	t.Helper()
	resp, err := c.RepositoryIndex(withToken(ctx), &pb.RepositoryIndexRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pb.RepositoryIndexResponse_ModelIndex{}
	for _, e := range resp.Models {
		out[e.Name+"/"+e.Version] = e
	}
	return out
}

// Explicit mode over gRPC, as TestExplicitLoadUnload over HTTP: Triton's
// RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload, with
// the token only; an unknown model is NOT_FOUND, a failed load
// INVALID_ARGUMENT with why.
func TestExplicitLoadUnloadGRPC(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/mlp/"+repository.ConfigFile, mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlExplicit, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := grpcClient(t, r)

	writeFile(t, dir+"/other/"+repository.ConfigFile, mlpConfig)
	writeModel(t, dir, "other", 3, examples.MLPVariant(2))
	if e := grpcIndex(t, ctx, c)["other/"]; e.GetState() != repository.StateUnavailable || e.GetReason() != "unloaded" {
		t.Fatalf("index before load: other is %v", e)
	}
	if _, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("index without the token: %v", err)
	}
	if _, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "other"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("load without the token: %v", err)
	}
	if _, err := c.RepositoryModelLoad(withToken(ctx), &pb.RepositoryModelLoadRequest{ModelName: "other"}); err != nil {
		t.Fatalf("load: %v\n%s", err, r.logs.String())
	}
	if e := grpcIndex(t, ctx, c)["other/3"]; e.GetState() != repository.StateReady {
		t.Fatalf("index after load: other/3 is %v", e)
	}
	ready, err := c.RepositoryIndex(withToken(ctx), &pb.RepositoryIndexRequest{Ready: true})
	if err != nil || len(ready.Models) != 2 {
		t.Fatalf("ready index: %v %v", ready, err)
	}
	if _, err := c.ModelMetadata(withToken(ctx), &pb.ModelMetadataRequest{Name: "other", Version: "3"}); err != nil {
		t.Fatalf("metadata of the loaded model: %v", err)
	}
	id, err := r.c.Enqueue(ctx, "other", mlpInput())
	if err != nil {
		t.Fatal(err)
	}
	if o := wait(ctx, r.c, id); o.err != nil || o.version != "3" {
		t.Fatalf("task on other: %+v", o)
	}

	if _, err := c.RepositoryModelUnload(withToken(ctx), &pb.RepositoryModelUnloadRequest{ModelName: "other"}); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if _, polled := r.w.Server().PollerStats()["inferq.other"]; polled {
		t.Fatal("the queue of an unloaded model is still polled")
	}
	if e := grpcIndex(t, ctx, c)["other/"]; e.GetState() != repository.StateUnavailable {
		t.Fatalf("index after unload: other is %v", e)
	}
	if _, err := c.ModelMetadata(withToken(ctx), &pb.ModelMetadataRequest{Name: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("metadata of the unloaded model: %v, want NotFound", err)
	}
	if _, err := c.RepositoryModelUnload(withToken(ctx), &pb.RepositoryModelUnloadRequest{ModelName: "other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unload of an unloaded model: %v, want NotFound", err)
	}

	writeFile(t, dir+"/broken/1/"+repository.ModelFile, "not an onnx model")
	_, err = c.RepositoryModelLoad(withToken(ctx), &pb.RepositoryModelLoadRequest{ModelName: "broken"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("load of a broken model: %v", err)
	}
	if e := grpcIndex(t, ctx, c)["broken/1"]; e.GetState() != repository.StateUnavailable || e.GetReason() == "" {
		t.Fatalf("index: broken/1 is %v", e)
	}
	if _, err := c.RepositoryModelLoad(withToken(ctx), &pb.RepositoryModelLoadRequest{ModelName: "nothere"}); status.Code(err) != codes.NotFound {
		t.Fatalf("load of a model not in the repository: %v", err)
	}
}

// Outside explicit mode loads and unloads are UNAVAILABLE, as Triton
// answers them with polling on (HTTP: 503).
func TestPollModeGRPCLoadRefused(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/mlp/"+repository.ConfigFile, mlpConfig)
	writeModel(t, dir, "mlp", 1, examples.MLP())
	r := startRig(t, dir, models.ControlPoll, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := grpcClient(t, r)
	_, err := c.RepositoryModelLoad(withToken(ctx), &pb.RepositoryModelLoadRequest{ModelName: "mlp"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "explicit") {
		t.Errorf("load in poll mode: %v, want Unavailable", err)
	}
	if _, err := c.RepositoryModelUnload(withToken(ctx), &pb.RepositoryModelUnloadRequest{ModelName: "mlp"}); status.Code(err) != codes.Unavailable {
		t.Errorf("unload in poll mode: %v, want Unavailable", err)
	}
	if e := grpcIndex(t, ctx, c)["mlp/1"]; e.GetState() != repository.StateReady {
		t.Errorf("index: mlp/1 is %v", e)
	}
}
