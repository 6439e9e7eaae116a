package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "open-cluster-management.io/rollout-hooks/gen/go/ocm/rolloutplugin/v1alpha1"
)

// partial is the plugin most grpc-go authors start with: the generated
// Unimplemented server embedded, Initialize written, and none of the hooks
// yet, so every hook answers UNIMPLEMENTED.
type partial struct {
	pb.UnimplementedRolloutPluginServiceServer
	name  string
	hooks []pb.Hook
}

func (p *partial) Initialize(context.Context, *pb.InitializeRequest) (*pb.InitializeResponse, error) {
	return &pb.InitializeResponse{Name: p.name, Version: "0.0.1", Hooks: p.hooks}, nil
}

func servePartial(t *testing.T, p *partial) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	pb.RegisterRolloutPluginServiceServer(server, p)
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
	return lis.Addr().String()
}

// The gateway's rule for what a validation answer means, against a real
// grpc-go plugin: UNIMPLEMENTED from a plugin that declared every hook
// (an empty list) means "does not validate"; UNIMPLEMENTED for a hook the
// plugin named is its failure, never a SUCCEEDED.
func TestTheGatewayReadsUnimplementedByTheDeclaration(t *testing.T) {
	every := servePartial(t, &partial{name: "every"})
	named := servePartial(t, &partial{name: "named", hooks: []pb.Hook{pb.Hook_HOOK_VALIDATE_ROLLOUT_COMPLETION}})
	entry := "  - name: %s\n    endpoint: %s\n    insecure: true\n    failurePolicy: Fail\n"
	grpcAddr := startGateway(t, "plugins:\n"+fmt.Sprintf(entry, "every", every)+fmt.Sprintf(entry, "named", named))

	conn, err := grpc.Dial(grpcAddr, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRolloutPluginServiceClient(conn)
	validate := func(plugin string) (*pb.ValidateResponse, metadata.MD, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "ocm-rollout-plugin", plugin)
		var trailer metadata.MD
		answer, err := client.ValidateRolloutCompletion(ctx,
			&pb.ValidateCompletionRequest{Rollout: request("cluster-1", false)}, grpc.Trailer(&trailer))
		return answer, trailer, err
	}

	answer, trailer, err := validate("every")
	if err != nil {
		t.Fatalf("a plugin declaring every hook that does not validate: %v", err)
	}
	if answer.GetResult() != pb.ValidationResult_VALIDATION_RESULT_SUCCEEDED {
		t.Fatalf("want SUCCEEDED (the plugin does not validate), got %v", answer)
	}
	if got := trailer.Get("ocm-rollout-failed-open"); len(got) != 0 {
		t.Fatalf("not a failure, so nothing failed open: %v", got)
	}

	answer, _, err = validate("named")
	if err == nil {
		t.Fatalf("UNIMPLEMENTED for a hook the plugin named was answered %v", answer)
	}
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), `plugin "named"`) {
		t.Fatalf("want UNIMPLEMENTED naming the plugin, got %v", err)
	}
}
