// Command localhub-spoke-status stands in, on a localhub bed's managed
// clusters, for the two parts of a cluster the bed does not run: the
// deployment controller and the kubelet. A bed has no nodes, so no pod of a
// Deployment ever runs; this writes, for every Deployment of every cluster it
// is given, the status those parts would write for a healthy rollout: first
// "rolling out" (the new generation observed, no replica updated yet), then,
// after --rollout-time, every replica updated and available.
//
// It writes the Deployment's status subresource and nothing else. OCM's work
// agent reads that status on the managed cluster and evaluates a work's
// condition rules on it, exactly as on a real cluster; the rollout controller
// under test reads only what the agent reports on the hub.
//
// Usage: localhub-spoke-status --rollout-time 1s KUBECONFIG...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

func main() {
	rolloutTime := flag.Duration("rollout-time", time.Second, "how long each Deployment takes to roll out")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: localhub-spoke-status [--rollout-time D] KUBECONFIG...")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, path := range flag.Args() {
		if err := watch(ctx, path, *rolloutTime); err != nil {
			fmt.Fprintf(os.Stderr, "localhub-spoke-status: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
	<-ctx.Done()
}

// watch starts an informer on one cluster's Deployments and answers each new
// generation with the status a healthy rollout of it would have.
func watch(ctx context.Context, kubeconfig string, rolloutTime time.Duration) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Apps().V1().Deployments().Informer()
	seen := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok && d.Status.ObservedGeneration < d.Generation {
			go roll(ctx, client, d.Namespace, d.Name, d.Generation, rolloutTime)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
}

// roll writes the rolling-out status of generation, waits rolloutTime, then
// writes the rolled-out one; a newer generation seen meanwhile wins.
func roll(ctx context.Context, client kubernetes.Interface, namespace, name string, generation int64, rolloutTime time.Duration) {
	write(ctx, client, namespace, name, generation, false)
	select {
	case <-ctx.Done():
		return
	case <-time.After(rolloutTime):
	}
	write(ctx, client, namespace, name, generation, true)
}

func write(ctx context.Context, client kubernetes.Interface, namespace, name string, generation int64, done bool) {
	deployments := client.AppsV1().Deployments(namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Generation != generation {
			return err
		}
		d.Status = status(d, done)
		_, err = deployments.UpdateStatus(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "localhub-spoke-status: %s/%s: %v\n", namespace, name, err)
	}
}

// status is what the deployment controller reports for d: all replicas
// updated and available when done, none yet otherwise.
func status(d *appsv1.Deployment, done bool) appsv1.DeploymentStatus {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	now := metav1.Now()
	s := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UnavailableReplicas: replicas}
	progressing := appsv1.DeploymentCondition{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated",
		Message: fmt.Sprintf("Deployment %q is progressing.", d.Name), LastUpdateTime: now, LastTransitionTime: now,
	}
	available := appsv1.DeploymentCondition{
		Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable",
		Message: "Deployment does not have minimum availability.", LastUpdateTime: now, LastTransitionTime: now,
	}
	if done {
		s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas = replicas, replicas, replicas, 0
		progressing.Reason = "NewReplicaSetAvailable"
		progressing.Message = fmt.Sprintf("ReplicaSet %q has successfully progressed.", d.Name)
		available.Status, available.Reason, available.Message = corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability."
	}
	s.Conditions = []appsv1.DeploymentCondition{available, progressing}
	return s
}
