package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "open-cluster-management.io/rollout-hooks/gen/go/ocm/rolloutplugin/v1alpha1"
)

// Name is the plugin's name, as it answers Initialize and prints when
// listening.
const Name = "cluster-gate"

// Version is the plugin's version.
const Version = "0.1.0"

// Gate decides ValidateRolloutCompletion: the clusters in Blocked fail,
// every other cluster succeeds. While the rollout aborts (the last good
// revision is being restored) every cluster passes: the restored revision is
// the one that worked.
type Gate struct {
	Blocked map[string]bool
}

// NewGate returns a gate blocking the named clusters.
func NewGate(blocked []string) *Gate {
	g := &Gate{Blocked: map[string]bool{}}
	for _, c := range blocked {
		if c = strings.TrimSpace(c); c != "" {
			g.Blocked[c] = true
		}
	}
	return g
}

// RolloutConfig is what the gate reads from a rollout's plugin
// configuration (plugin_config_json, the ManifestWorkReplicaSet's
// rolloutStrategy.pluginConfig). Keys of other plugins are ignored.
type RolloutConfig struct {
	// FailClusters, when present, replaces -fail for this rollout (an empty
	// list blocks none).
	FailClusters *[]string `json:"failClusters"`
}

// isBlocked says whether r's cluster is blocked in r's rollout: by the
// rollout's failClusters if it has one, else by -fail.
func (g *Gate) isBlocked(r *pb.RolloutPluginRequest) (bool, error) {
	cluster := r.GetClusterName()
	js := r.GetPluginConfigJson()
	if js == "" {
		return g.Blocked[cluster], nil
	}
	var config RolloutConfig
	if err := json.Unmarshal([]byte(js), &config); err != nil {
		return false, status.Errorf(codes.InvalidArgument, "plugin_config_json (the rollout's pluginConfig): %v", err)
	}
	if config.FailClusters == nil {
		return g.Blocked[cluster], nil
	}
	for _, c := range *config.FailClusters {
		if c == cluster {
			return true, nil
		}
	}
	return false, nil
}

// Decide is the gate's answer for one request. It depends only on the
// request, so the same request always gets the same answer.
func (g *Gate) Decide(r *pb.RolloutPluginRequest) (*pb.ValidateResponse, error) {
	if r.GetClusterName() == "" {
		return nil, status.Error(codes.InvalidArgument, "ValidateRolloutCompletion without a cluster_name")
	}
	cluster, revision := r.GetClusterName(), r.GetDesiredRevision()
	blocked, err := g.isBlocked(r)
	if err != nil {
		return nil, err
	}
	if blocked && !r.GetAborting() {
		return &pb.ValidateResponse{
			Result:  pb.ValidationResult_VALIDATION_RESULT_FAILED,
			Message: fmt.Sprintf("cluster-gate: %s is blocked (revision %s)", cluster, revision),
		}, nil
	}
	return &pb.ValidateResponse{
		Result:  pb.ValidationResult_VALIDATION_RESULT_SUCCEEDED,
		Message: fmt.Sprintf("cluster-gate: %s may proceed (revision %s)", cluster, revision),
	}, nil
}

// BlockedList is the blocked clusters, sorted, for logs.
func (g *Gate) BlockedList() []string {
	out := make([]string, 0, len(g.Blocked))
	for c := range g.Blocked {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Service serves the gate as a RolloutPluginService. Embedding the
// generated Unimplemented server keeps it compiling when the API gains
// methods.
type Service struct {
	pb.UnimplementedRolloutPluginServiceServer
	Gate *Gate
}

// Initialize names the plugin and the two hooks it implements.
func (s *Service) Initialize(_ context.Context, r *pb.InitializeRequest) (*pb.InitializeResponse, error) {
	log.Printf("initialized by %q hub=%q", r.GetControllerVersion(), r.GetHubName())
	return &pb.InitializeResponse{
		Name:    Name,
		Version: Version,
		Hooks: []pb.Hook{
			pb.Hook_HOOK_PROGRESS_ROLLOUT,
			pb.Hook_HOOK_VALIDATE_ROLLOUT_COMPLETION,
		},
		// It reads only the counts: the per-cluster lists are not sent.
		StateDetail: pb.RolloutStateDetail_ROLLOUT_STATE_DETAIL_COUNTS,
	}, nil
}

// ProgressRollout logs how far the placement's rollout is.
func (s *Service) ProgressRollout(_ context.Context, r *pb.RolloutPluginRequest) (*emptypb.Empty, error) {
	c := r.GetCounts()
	log.Printf("progress mwrs=%s/%s placement=%s succeeded=%d/%d failed=%d aborting=%t",
		r.GetMwrsNamespace(), r.GetMwrsName(), r.GetPlacementName(),
		c.GetSucceeded(), r.GetTotalClusterCount(), c.GetFailed(), r.GetAborting())
	return &emptypb.Empty{}, nil
}

// ValidateRolloutCompletion answers with the gate's decision.
func (s *Service) ValidateRolloutCompletion(_ context.Context, r *pb.ValidateCompletionRequest) (*pb.ValidateResponse, error) {
	answer, err := s.Gate.Decide(r.GetRollout())
	if err == nil {
		log.Printf("validated cluster=%s revision=%s result=%s",
			r.GetRollout().GetClusterName(), r.GetRollout().GetDesiredRevision(), answer.GetResult())
	}
	return answer, err
}
