"""The controller's identity on the hub is the overlay's ServiceAccount, and
the hub's RBAC authorizer decides: what it needs is allowed, what the
ClusterRoles do not grant is refused."""

from __future__ import annotations

from tests.hub import Hub

ACCOUNT = "system:serviceaccount:rollout-hooks:rollout-controller"


def can(hub: Hub, kubeconfig, *args: str) -> bool:
    result = hub.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False)
    return result.stdout.strip() == "yes"


def test_the_token_is_the_service_accounts(controller, hub: Hub):
    whoami = hub.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                         kubeconfig=controller.kubeconfig).stdout
    assert whoami == ACCOUNT


def test_what_the_controller_needs_is_allowed(controller, hub: Hub):
    needed = [
        ("list", "manifestworkreplicasets.work.open-cluster-management.io", "-A"),
        ("watch", "manifestworkreplicasets.work.open-cluster-management.io", "-A"),
        ("patch", "manifestworkreplicasets.work.open-cluster-management.io", "--subresource=status", "-n", "x"),
        ("create", "manifestworks.work.open-cluster-management.io", "-n", "cluster1"),
        ("delete", "manifestworks.work.open-cluster-management.io", "-n", "cluster2"),
        ("watch", "controllerrevisions.apps", "-A"),
        ("create", "controllerrevisions.apps", "-n", "rollout-demo"),
        ("watch", "placementdecisions.cluster.open-cluster-management.io", "-A"),
        ("create", "manifestworkreplicasetrollouts.rollout-hooks.io", "-n", "rollout-demo"),
        ("create", "events.events.k8s.io", "-n", "rollout-demo"),
    ]
    refused = [" ".join(n) for n in needed if not can(hub, controller.kubeconfig, *n)]
    assert not refused, f"the hub's RBAC refuses the controller: {refused}"


def test_what_the_roles_do_not_grant_is_refused(controller, hub: Hub):
    for args in [("create", "secrets", "-n", "cluster1"), ("get", "secrets", "-n", "kube-system"),
                 ("delete", "namespaces"), ("create", "pods", "-n", "rollout-hooks"),
                 ("patch", "configmaps/kube-root-ca.crt", "-n", "rollout-hooks"),
                 ("delete", "customresourcedefinitions")]:
        assert not can(hub, controller.kubeconfig, *args), f"the controller may {' '.join(args)}"
    # And a write it is not allowed is refused by the API server itself.
    result = hub.kubectl("create", "secret", "generic", "stolen", "-n", "cluster1", "--from-literal=k=v",
                         kubeconfig=controller.kubeconfig, check=False)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    assert hub.get("secret", "stolen", "cluster1") is None


def test_namespace_tenants_own_their_carriers_through_the_aggregated_roles(installed, hub: Hub):
    """Whoever may edit a namespace may write its
    ManifestWorkReplicaSetRollouts, and a viewer may read them: the overlay's
    roles aggregate into Kubernetes' `edit` and `view` (the hub's
    kube-controller-manager aggregates them)."""
    hub.kubectl("create", "namespace", "team-a")
    hub.kubectl("create", "rolebinding", "alice-edit", "-n", "team-a", "--clusterrole=edit", "--user=alice")
    hub.kubectl("create", "rolebinding", "bob-view", "-n", "team-a", "--clusterrole=view", "--user=bob")
    carriers = "manifestworkreplicasetrollouts.rollout-hooks.io"

    def may(user: str, verb: str, namespace: str = "team-a") -> bool:
        result = hub.kubectl("auth", "can-i", verb, carriers, "-n", namespace, f"--as={user}", check=False)
        return result.stdout.strip() == "yes"

    hub.wait_for(lambda: may("alice", "create") and may("bob", "list"), 30,
                 "the aggregated roles to reach edit and view")
    assert may("alice", "delete")
    assert not may("bob", "create"), "a viewer may write carriers"
    assert not may("alice", "create", "default"), "the grant leaks out of the tenant's namespace"
