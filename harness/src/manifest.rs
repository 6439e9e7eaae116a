//! A realistic `ManifestWork` (`work.open-cluster-management.io/v1`) of a
//! chosen size, as compact JSON, for the `MutateManifestWork` payload.
//!
//! The work carries one `apps/v1` Deployment, the usual shape of a rollout.
//! It is padded to the target size with extra container environment
//! variables holding opaque alphanumeric values (think of a config blob
//! passed through the environment), so the JSON stays valid and the size is
//! exact for any target above the size of the bare work (1.3 KB).

use serde_json::{Value, json};

/// `metadata.name` of the generated work.
pub const WORK_NAME: &str = "bench-work";
/// `metadata.namespace` of the generated work (the managed cluster's namespace).
pub const WORK_NAMESPACE: &str = "cluster-001";

/// Largest value of one padding variable, in bytes.
const PAD_CHUNK: usize = 1024;

/// Builds the ManifestWork JSON, exactly `target_bytes` long when
/// `target_bytes` is at least the size of the bare work, else the bare work.
pub fn manifest_work_json(target_bytes: usize) -> Vec<u8> {
    let bare = render(Vec::new());
    // The env array of the bare work is not empty, so every padding entry
    // costs its own serialized length plus one comma.
    let mut remaining = target_bytes.saturating_sub(bare.len());
    let mut padding = Vec::new();
    let mut filler = Filler::new();
    loop {
        let overhead = pad_entry(padding.len(), "").to_string().len() + 1;
        if remaining < overhead {
            break;
        }
        let room = remaining - overhead;
        // Take the whole rest when another entry would not fit after a full
        // chunk, so the last entry lands exactly on the target.
        let value_len = if room > PAD_CHUNK + overhead {
            PAD_CHUNK
        } else {
            room
        };
        padding.push(pad_entry(padding.len(), &filler.take(value_len)));
        remaining -= overhead + value_len;
    }
    if padding.is_empty() {
        return bare;
    }
    render(padding)
}

/// One padding environment variable; the name has a fixed width so every
/// entry has the same overhead.
fn pad_entry(index: usize, value: &str) -> Value {
    json!({"name": format!("BENCH_PAD_{index:06}"), "value": value})
}

fn render(padding: Vec<Value>) -> Vec<u8> {
    let mut env = vec![
        json!({"name": "LOG_LEVEL", "value": "info"}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
    ];
    env.extend(padding);
    let labels = json!({
        "app.kubernetes.io/name": "bench-app",
        "app.kubernetes.io/version": "1.4.2",
    });
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "bench-app",
            "namespace": "default",
            "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": "7"},
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "bench-app"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "app",
                        "image": "quay.io/example/bench-app:1.4.2",
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "env": env,
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"memory": "256Mi"},
                        },
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5},
                    }],
                },
            },
        },
    });
    let work = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {
            "name": WORK_NAME,
            "namespace": WORK_NAMESPACE,
            "labels": {"work.open-cluster-management.io/manifestworkreplicaset": "default.bench-mwrs"},
        },
        "spec": {
            "workload": {"manifests": [deployment]},
            "deleteOption": {"propagationPolicy": "Foreground"},
        },
    });
    // Serializing a `Value` cannot fail; fall back to an empty object rather
    // than panic should that ever change.
    serde_json::to_vec(&work).unwrap_or_else(|_| b"{}".to_vec())
}

/// Deterministic alphanumeric filler (xorshift), so payloads do not look
/// like one repeated byte yet are the same on every run.
struct Filler(u64);

impl Filler {
    const ALPHABET: &'static [u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

    fn new() -> Self {
        Self(0x9E37_79B9_7F4A_7C15)
    }

    fn take(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                char::from(Self::ALPHABET[(self.0 % Self::ALPHABET.len() as u64) as usize])
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(target: usize) {
        let bytes = manifest_work_json(target);
        let deviation = (bytes.len() as f64 - target as f64).abs() / target as f64;
        assert!(deviation <= 0.02, "target {target}, got {}", bytes.len());
        let work: Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert!(work.is_object());
        assert_eq!(work["apiVersion"], "work.open-cluster-management.io/v1");
        assert_eq!(work["kind"], "ManifestWork");
        assert_eq!(work["metadata"]["name"], WORK_NAME);
        assert_eq!(work["metadata"]["namespace"], WORK_NAMESPACE);
        assert_eq!(
            work["spec"]["workload"]["manifests"][0]["kind"],
            "Deployment"
        );
    }

    #[test]
    fn sizes_within_two_percent() {
        for target in [4 << 10, 64 << 10, 4 << 20] {
            check(target);
        }
    }

    #[test]
    fn sizes_are_exact_above_the_bare_work() {
        let bare = manifest_work_json(0).len();
        for target in [bare + 40, bare + 1000, 4096, 4097, 5000, 65536, 100_003] {
            assert_eq!(manifest_work_json(target).len(), target, "target {target}");
        }
    }

    #[test]
    fn small_targets_give_the_bare_work() {
        let bare = manifest_work_json(0);
        assert_eq!(manifest_work_json(10), bare);
        let work: Value = serde_json::from_slice(&bare).expect("valid JSON");
        assert_eq!(work["kind"], "ManifestWork");
    }
}
