use std::time::Duration;

use base64::Engine as _;
use rollout_policies::FailurePolicy;
use tonic::Code;

use super::*;
use rollout_proto::v1alpha1::Hook;

const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn the_designs_configmap_format_is_valid_as_it_stands() {
    let text = format!(
        "plugins:\n  - name: my-rollout-1\n    endpoint: my-rollout.my-namespace:10843\n    caCertificate:\n      caBundle: \"{}\"\n",
        b64(CA_PEM)
    );
    let cfg = parse(&text).expect("valid");
    assert_eq!(cfg.plugins.len(), 1);
    let p = &cfg.plugins[0];
    assert_eq!(p.endpoint.to_string(), "my-rollout.my-namespace:10843");
    assert!(matches!(p.transport, Transport::Tls { .. }));
    assert_eq!(p.policy, Policy::default());
}

#[test]
fn the_contracts_full_example_is_valid_and_overrides_field_by_field() {
    let text = r#"
hub: hub-a
clientCertificate:
  certFile: /var/run/secrets/gateway/tls.crt
  keyFile: /var/run/secrets/gateway/tls.key
defaults:
  timeout: 30s
  failurePolicy: Fail
  retry:
    maxAttempts: 3
    initialBackoff: 100ms
    maxBackoff: 2s
    backoffMultiplier: 2
    retryableStatusCodes: [UNAVAILABLE]
  retryBudget:
    ratio: 0.2
    minPerSecond: 10
  circuitBreaker:
    consecutiveFailures: 5
    openFor: 10s
    maxOpenFor: 5m
plugins:
  - name: smoke-test
    endpoint: 127.0.0.1:7001
    insecure: true
    timeout: 5s
    failurePolicy: Ignore
    retry:
      maxAttempts: 2
    hubs: [hub-a, hub-b]
  - name: traffic-weights
    endpoint: 127.0.0.1:7002
    insecure: true
pipelines:
  - name: safe-canary
    plugins: [traffic-weights, smoke-test]
"#;
    let cfg = parse(text).expect("valid");
    assert_eq!(cfg.hub, Some(Hub::new("hub-a")));
    let smoke = &cfg.plugins[0];
    assert_eq!(smoke.policy.timeout, Duration::from_secs(5));
    assert_eq!(smoke.policy.failure_policy, FailurePolicy::Ignore);
    assert_eq!(smoke.policy.retry.max_attempts, 2);
    // Not overridden: inherited from defaults.
    assert_eq!(smoke.policy.retry.max_backoff, Duration::from_secs(2));
    assert_eq!(
        smoke.policy.circuit_breaker.max_open_for,
        Duration::from_secs(300)
    );
    assert_eq!(
        smoke.hubs.as_deref(),
        Some(&[Hub::new("hub-a"), Hub::new("hub-b")][..])
    );
    assert_eq!(
        cfg.pipelines[0].plugins,
        vec!["traffic-weights", "smoke-test"]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = r#"
plugins:
  - name: a
    endpoint: nohost
    insecure: true
    timeout: 45s
  - name: b
    endpoint: 127.0.0.1:1
  - name: a
    endpoint: 127.0.0.1:2
    insecure: true
    failurePolicy: Maybe
    retry:
      maxAttempts: 0
      retryableStatusCodes: [UNAVAILBLE]
    circuitBreaker:
      openFor: 10x
  - name: Bad_Name
    endpoint: http://x:1
    insecure: true
    colour: blue
pipelines:
  - name: p
    plugins: [a, ghost, p2]
  - name: p2
    plugins: []
  - name: a
    plugins: [a]
"#;
    let err = parse(text).expect_err("invalid");
    let all = err.to_string();
    for needle in [
        "plugins[0] (a).endpoint: \"nohost\" is not host:port",
        "plugins[0] (a).timeout: must be more than 0 and at most 30s",
        "plugins[1] (b).caCertificate: is required",
        "plugins[2] (a).name: \"a\" is defined twice",
        "plugins[2] (a).failurePolicy: \"Maybe\" is not Fail or Ignore",
        "plugins[2] (a).retry.maxAttempts: 0 is out of range",
        "plugins[2] (a).retry.retryableStatusCodes[0]: \"UNAVAILBLE\"",
        "plugins[2] (a).circuitBreaker.openFor: \"10x\" is not a duration",
        "plugins[3] (Bad_Name).name: \"Bad_Name\" may hold only",
        "plugins[3] (Bad_Name).endpoint: \"http://x:1\" must be host:port without a scheme",
        "plugins[3] (Bad_Name).colour: unknown field",
        "pipelines[0] (p).plugins[1]: \"ghost\" is not a plugin defined in this file",
        "pipelines[0] (p).plugins[2]: \"p2\" is a pipeline",
        "pipelines[1] (p2).plugins: lists no plugin",
        "pipelines[2] (a).name: \"a\" is already the name of a plugin or pipeline",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    // A member that is a pipeline is reported once, as a pipeline.
    assert!(!all.contains("\"p2\" is not a plugin defined"), "{all}");
    assert_eq!(err.problems.len(), 15, "{all}");
}

#[test]
fn failure_policies_can_be_set_per_hook() {
    let text = "defaults:\n  failurePolicyByHook:\n    BeginRollout: Ignore\nplugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    failurePolicyByHook:\n      ValidateRolloutCompletion: Ignore\n      BeginRollout: Fail\n";
    let cfg = parse(text).expect("valid");
    let p = &cfg.plugins[0].policy;
    assert_eq!(
        p.failure_policy_for(Some(Hook::ValidateRolloutCompletion)),
        FailurePolicy::Ignore
    );
    assert_eq!(
        p.failure_policy_for(Some(Hook::BeginRollout)),
        FailurePolicy::Fail,
        "the plugin's entry wins"
    );
    assert_eq!(
        p.failure_policy_for(Some(Hook::MutateManifestWork)),
        FailurePolicy::Fail
    );
    assert_eq!(p.failure_policy_for(None), FailurePolicy::Fail);
    let err = parse("plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    failurePolicyByHook:\n      Mutate: Ignore\n      BeginRollout: Maybe\n")
            .expect_err("bad");
    let all = err.to_string();
    assert!(
        all.contains("failurePolicyByHook.Mutate: is not a hook"),
        "{all}"
    );
    assert!(
        all.contains("failurePolicyByHook.BeginRollout: \"Maybe\" is not Fail or Ignore"),
        "{all}"
    );
}

#[test]
fn an_unknown_field_suggests_the_nearest_known_one() {
    let text = "plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    timout: 5s\n    retry:\n      maxAtempts: 2\n    colour: red\npipelines:\n  - name: p\n    plugin: [a]\n";
    let all = parse(text).expect_err("unknown fields").to_string();
    for want in [
        "plugins[0] (a).timout: unknown field; did you mean `timeout`?",
        "plugins[0] (a).retry.maxAtempts: unknown field; did you mean `maxAttempts`?",
        "plugins[0] (a).colour: unknown field",
        "pipelines[0] (p).plugin: unknown field; did you mean `plugins`?",
    ] {
        assert!(all.contains(want), "{want} in {all}");
    }
    assert!(!all.contains("colour: unknown field; did"), "{all}");
}

#[test]
fn an_unknown_default_suggests_the_nearest_known_one() {
    let text = "defaults:\n  timout: 5s\n  failurePolicy: Ignore\n  colour: red\n  retry:\n    maxAtempts: 2\nplugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n";
    let all = parse(text).expect_err("unknown fields").to_string();
    for want in [
        "defaults.timout: unknown field; did you mean `timeout`?",
        "defaults.colour: unknown field",
        "defaults.retry.maxAtempts: unknown field; did you mean `maxAttempts`?",
    ] {
        assert!(all.contains(want), "{want} in {all}");
    }
    assert!(!all.contains("colour: unknown field; did"), "{all}");
}

#[test]
fn a_ca_bundle_that_is_not_base64_says_where_and_what_to_do() {
    let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"QUJD!EF\"\n";
    let all = parse(text).expect_err("bad").to_string();
    assert!(
        all.contains("caCertificate.caBundle: is not base64: it has '!' at character 5"),
        "{all}"
    );
    assert!(all.contains("base64 -w0"), "{all}");
    assert!(!all.contains("Invalid symbol"), "{all}");
}

#[test]
fn ca_bundle_must_be_base64_pem() {
    let text =
        "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"!!!\"\n";
    assert!(
        parse(text)
            .expect_err("bad")
            .to_string()
            .contains("is not base64")
    );
    let text = format!(
        "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"{}\"\n",
        b64("hello")
    );
    assert!(
        parse(&text)
            .expect_err("bad")
            .to_string()
            .contains("PEM bundle")
    );
    let text = format!(
        "plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    caCertificate:\n      caBundle: \"{}\"\n",
        b64(CA_PEM)
    );
    assert!(
        parse(&text)
            .expect_err("bad")
            .to_string()
            .contains("exclude each other")
    );
}

#[test]
fn a_ca_may_come_from_a_file_and_exactly_one_source_is_set() {
    let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caFile: /etc/plugin-ca/ca.crt\n";
    let cfg = parse(text).expect("valid");
    assert_eq!(
        cfg.plugins[0].transport,
        Transport::Tls {
            ca: CaSource::File {
                path: "/etc/plugin-ca/ca.crt".into()
            }
        }
    );
    let both = format!(
        "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caFile: ca.crt\n      caBundle: \"{}\"\n",
        b64(CA_PEM)
    );
    let neither = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate: {}\n";
    for text in [both.as_str(), neither] {
        let err = parse(text).expect_err("one source");
        assert_eq!(
            err.problems,
            vec![Problem {
                path: "plugins[0] (a).caCertificate".into(),
                message: "set exactly one of caBundle and caFile".into()
            }],
            "{text}"
        );
    }
    let empty =
        "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caFile: \"\"\n";
    assert!(
        parse(empty)
            .expect_err("empty")
            .to_string()
            .contains("plugins[0] (a).caCertificate.caFile: is empty")
    );
}

#[test]
fn yaml_syntax_errors_are_reported() {
    let err = parse("plugins: [\n  - name: a").expect_err("bad yaml");
    assert!(
        err.to_string().contains("not a valid registry file"),
        "{err}"
    );
    let err = parse("plugins:\n  - name: [1, 2]\n").expect_err("bad type");
    assert!(
        err.to_string().contains("not a valid registry file"),
        "{err}"
    );
}

#[test]
fn a_yaml_error_does_not_echo_the_file() {
    let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"SECRETLOOKINGBUNDLE\"\n    hubs: [a, b\n";
    let err = parse(text).expect_err("bad yaml").to_string();
    assert!(err.contains("not a valid registry file"), "{err}");
    assert!(!err.contains("SECRETLOOKINGBUNDLE"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn durations_parse_go_style() {
    let table = [
        ("500ms", Some(Duration::from_millis(500))),
        ("10s", Some(Duration::from_secs(10))),
        ("2m", Some(Duration::from_secs(120))),
        ("1h30m", Some(Duration::from_secs(5400))),
        ("1.5s", Some(Duration::from_millis(1500))),
        ("250us", Some(Duration::from_micros(250))),
        ("0", Some(Duration::ZERO)),
        ("10", None),
        ("10x", None),
        ("", None),
        ("ms", None),
        ("-1s", None),
    ];
    for (text, want) in table {
        assert_eq!(parse_duration(text).ok(), want, "{text}");
    }
    assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
    assert_eq!(format_duration(Duration::from_secs(10)), "10s");
    assert_eq!(format_duration(Duration::from_secs(300)), "5m");
}

#[test]
fn endpoints_parse() {
    assert_eq!(
        parse_endpoint("a.b:10843").map(|e| e.to_string()),
        Ok("a.b:10843".into())
    );
    assert_eq!(parse_endpoint("[::1]:80").map(|e| e.host), Ok("::1".into()));
    assert!(parse_endpoint("a:0").is_err());
    assert!(parse_endpoint("a:99999").is_err());
    assert!(parse_endpoint(":80").is_err());
    // Refused here, with the reason, not later by the connection.
    for (text, reason) in [
        ("a[b:80", "'[' is not allowed"),
        ("a b:80", "' ' is not allowed"),
        ("u@h:1", "'@' is not allowed"),
        ("a..b:80", "an empty label"),
        (".a:80", "an empty label"),
        ("::1:80", "without brackets"),
        ("[::g]:80", "invalid IPv6 address"),
        ("[]:80", "invalid IPv6 address"),
        ("a.0:80", "neither an IPv4 address"),
        ("10.0.0.256:80", "neither an IPv4 address"),
        ("-a.b:80", "starts or ends with '-'"),
    ] {
        let e = parse_endpoint(text).expect_err(text).to_string();
        assert!(e.contains(reason), "{text}: {e}");
    }
    assert_eq!(
        parse_endpoint("plugin.ns.svc.cluster.local.:443").map(|e| e.host),
        Ok("plugin.ns.svc.cluster.local.".into())
    );
    assert!(parse_endpoint(&format!("{}:80", "a".repeat(64))).is_err());
    assert!(parse_endpoint(&format!("{}:80", "a".repeat(63))).is_ok());
}

#[test]
fn blank_files_are_recognised() {
    assert!(is_blank(""));
    assert!(is_blank("\n  \n# only a comment\n---\n"));
    assert!(!is_blank("plugins: []"));
}

#[test]
fn codes_parse_by_name_or_number() {
    assert_eq!(parse_code("unavailable"), Some(Code::Unavailable));
    assert_eq!(parse_code("14"), Some(Code::Unavailable));
    assert_eq!(parse_code("NOPE"), None);
    assert_eq!(parse_code("17"), None);
}
