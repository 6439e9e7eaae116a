package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "open-cluster-management.io/rollout-hooks/gen/go/ocm/rolloutplugin/v1alpha1"
)

func request(cluster string, aborting bool) *pb.RolloutPluginRequest {
	return &pb.RolloutPluginRequest{
		MwrsName: "web", MwrsNamespace: "default", PlacementName: "placement",
		ClusterName: cluster, ClusterIndex: 1, TotalClusterCount: 2,
		DesiredRevision: "rev-1", Aborting: aborting,
	}
}

func TestTheGateFailsBlockedClustersUnlessAborting(t *testing.T) {
	gate := NewGate([]string{"bad", " ", ""})
	cases := []struct {
		cluster  string
		aborting bool
		want     pb.ValidationResult
	}{
		{"good", false, pb.ValidationResult_VALIDATION_RESULT_SUCCEEDED},
		{"bad", false, pb.ValidationResult_VALIDATION_RESULT_FAILED},
		{"bad", true, pb.ValidationResult_VALIDATION_RESULT_SUCCEEDED},
	}
	for _, c := range cases {
		got, err := gate.Decide(request(c.cluster, c.aborting))
		if err != nil || got.GetResult() != c.want {
			t.Errorf("%s aborting=%t: got %v, %v; want %v", c.cluster, c.aborting, got.GetResult(), err, c.want)
		}
	}
	if got := gate.BlockedList(); len(got) != 1 || got[0] != "bad" {
		t.Errorf("blocked: %v", got)
	}
	if _, err := gate.Decide(request("", false)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no cluster: got %v, want InvalidArgument", err)
	}
}

func TestTheRolloutConfigReplacesTheFailList(t *testing.T) {
	gate := NewGate([]string{"bad"})
	configured := func(cluster, config string) *pb.RolloutPluginRequest {
		r := request(cluster, false)
		r.PluginConfigJson = config
		return r
	}
	failed := pb.ValidationResult_VALIDATION_RESULT_FAILED
	succeeded := pb.ValidationResult_VALIDATION_RESULT_SUCCEEDED
	cases := []struct {
		cluster, config string
		want            pb.ValidationResult
	}{
		{"other", `{"failClusters":["other"]}`, failed},
		{"bad", `{"failClusters":["other"]}`, succeeded},
		{"bad", `{"failClusters":[]}`, succeeded},
		{"bad", `{"soakTime":"5m"}`, failed}, // another plugin's key: -fail holds
		{"bad", ``, failed},
	}
	for _, c := range cases {
		got, err := gate.Decide(configured(c.cluster, c.config))
		if err != nil || got.GetResult() != c.want {
			t.Errorf("%s with %q: got %v, %v; want %v", c.cluster, c.config, got.GetResult(), err, c.want)
		}
	}
	_, err := gate.Decide(configured("bad", `{"failClusters":"bad"}`))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "plugin_config_json") {
		t.Errorf("a config of the wrong type: got %v, want InvalidArgument naming plugin_config_json", err)
	}
}

// binary is the path in the environment variable name, or skips the test
// (fails it when ROLLOUT_HOOKS_E2E=1, as in CI).
func binary(t *testing.T, name string) string {
	path := os.Getenv(name)
	if path == "" {
		if os.Getenv("ROLLOUT_HOOKS_E2E") == "1" {
			t.Fatalf("%s is not set", name)
		}
		t.Skipf("%s names no binary", name)
	}
	return path
}

// servePlugin serves the gate on 127.0.0.1:0 until the test ends.
func servePlugin(t *testing.T, blocked ...string) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := NewServer(NewGate(blocked))
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
	return lis.Addr().String()
}

func TestRolloutPluginCheckPasses(t *testing.T) {
	check := binary(t, "ROLLOUT_PLUGIN_CHECK")
	addr := servePlugin(t)
	out, err := exec.Command(check, addr).CombinedOutput()
	if err != nil {
		t.Fatalf("rollout-plugin-check %s: %v\n%s", addr, err, out)
	}
	// The gate does not mutate: identity does not apply to it.
	if n := strings.Count(string(out), "PASS "); n != 6 {
		t.Fatalf("%d rules passed, want 6:\n%s", n, out)
	}
	if !strings.Contains(string(out), "SKIP identity: the plugin does not declare MutateManifestWork") {
		t.Fatalf("identity not skipped:\n%s", out)
	}
}

// startGateway runs rollout-gateway with the registry given, waits until
// it is ready and returns its gRPC address.
func startGateway(t *testing.T, registry string) string {
	t.Helper()
	gatewayBin := binary(t, "ROLLOUT_GATEWAY")
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(registry), 0o600); err != nil {
		t.Fatal(err)
	}
	gateway := exec.Command(gatewayBin, "--config", config, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	stdout, err := gateway.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gateway.Process.Kill(); _ = gateway.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no listening line: %v", err)
	}
	fields := map[string]string{}
	for _, word := range strings.Fields(line) {
		if k, v, ok := strings.Cut(word, "="); ok {
			fields[k] = v
		}
	}
	ready, err := http.Get("http://" + fields["admin"] + "/readyz")
	if err != nil || ready.StatusCode != http.StatusOK {
		t.Fatalf("gateway not ready: %v %v", ready, err)
	}
	ready.Body.Close()
	return fields["grpc"]
}

func TestACallThroughTheGateway(t *testing.T) {
	addr := servePlugin(t, "cluster-9")
	grpcAddr := startGateway(t, fmt.Sprintf("plugins:\n  - name: gate\n    endpoint: %s\n    insecure: true\n", addr))

	conn, err := grpc.Dial(grpcAddr, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "ocm-rollout-plugin", "gate")
	client := pb.NewRolloutPluginServiceClient(conn)
	answer, err := client.ValidateRolloutCompletion(ctx, &pb.ValidateCompletionRequest{Rollout: request("cluster-9", false)})
	if err != nil {
		t.Fatal(err)
	}
	if answer.GetResult() != pb.ValidationResult_VALIDATION_RESULT_FAILED ||
		!strings.Contains(answer.GetMessage(), "cluster-9 is blocked") {
		t.Fatalf("through the gateway: %v", answer)
	}
}
