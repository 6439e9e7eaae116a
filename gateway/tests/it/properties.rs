//! Property tests over everything the gateway reads from someone else: the
//! registry file (written by an operator, or by a hub in central mode), gRPC
//! frames and headers, and the ManifestWork JSON that the mutate chain checks
//! in each plugin's answer. Whatever the input, nothing here may panic; each
//! property also says what a right answer looks like.
//!
//! The `proptest!` tests run a few hundred cases each within `cargo test`
//! (`PROPTEST_CASES` changes how many). The `fuzz_*` tests are ignored by
//! default: they run the same checks for a bounded time each, the stable
//! stand-in for the cargo-fuzz targets in `gateway/fuzz/` (see its README):
//!
//! ```text
//! ROLLOUT_FUZZ_SECONDS=120 cargo test -p rollout-gateway --release --test it -- --ignored properties::fuzz_
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseResult, TestRunner};
use rollout_gateway::config::{self, CaSource, Config, Transport};
use rollout_gateway::manifest;
use rollout_gateway::transport::grpc;
use rollout_policies::{FailurePolicy, Policy};
use rollout_proto::v1alpha1::{
    ClusterRolloutStatus, Hook, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, RolloutState,
};
use serde_json::{Value, json};
use tonic::Code;

/// The quick runs in `cargo test`: `PROPTEST_CASES` cases, 256 by default.
fn quick() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        // Failures become named regression tests at the bottom of this file,
        // not files next to it.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// YAML documents, built as trees and written out in block or flow style.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Yaml {
    /// A string, written plain when that reads back as the same string,
    /// double-quoted otherwise.
    Str(String),
    /// Written exactly as it is: numbers, booleans, `.nan`, `~`, `[]`.
    Raw(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

fn s(text: impl Into<String>) -> Yaml {
    Yaml::Str(text.into())
}

fn raw(text: impl ToString) -> Yaml {
    Yaml::Raw(text.to_string())
}

fn float(f: f64) -> Yaml {
    if f.is_nan() {
        raw(".nan")
    } else if f.is_infinite() {
        raw(if f > 0.0 { ".inf" } else { "-.inf" })
    } else {
        raw(format!("{f:?}"))
    }
}

/// Plain only where YAML cannot read the text as anything but that string
/// (a name with a dash, a duration); everything else is quoted.
fn plain_is_safe(text: &str) -> bool {
    let name_with_dash = text.starts_with(|c: char| c.is_ascii_lowercase())
        && text.contains('-')
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !text.ends_with(['-', '.']);
    let duration = text.starts_with(|c: char| c.is_ascii_digit())
        && text.ends_with(['s', 'm', 'h'])
        && text.chars().all(|c| c.is_ascii_alphanumeric());
    name_with_dash || duration
}

fn quote(text: &str) -> String {
    // YAML 1.2 is a superset of JSON: a JSON string is a double-quoted
    // scalar, once the characters YAML will not take as they are (C1
    // controls, DEL, BOM, non-characters) are escaped too.
    let json = serde_json::to_string(text).expect("a string serializes");
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if matches!(
            c,
            '\u{7f}'..='\u{9f}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        ) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn key(k: &str) -> String {
    if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphabetic()) {
        k.to_string()
    } else {
        quote(k)
    }
}

fn flow(y: &Yaml, out: &mut String) {
    match y {
        Yaml::Str(t) if plain_is_safe(t) => out.push_str(t),
        Yaml::Str(t) => out.push_str(&quote(t)),
        Yaml::Raw(t) => out.push_str(t),
        Yaml::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(item, out);
            }
            out.push(']');
        }
        Yaml::Map(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&quote(k));
                out.push_str(": ");
                flow(v, out);
            }
            out.push('}');
        }
    }
}

fn is_block(y: &Yaml) -> bool {
    matches!(y, Yaml::Seq(v) if !v.is_empty()) || matches!(y, Yaml::Map(v) if !v.is_empty())
}

fn block(y: &Yaml, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    let value = |v: &Yaml, out: &mut String| {
        if is_block(v) {
            out.push('\n');
            block(v, indent + 2, out);
        } else {
            out.push(' ');
            flow(v, out);
            out.push('\n');
        }
    };
    match y {
        Yaml::Map(entries) if !entries.is_empty() => {
            for (k, v) in entries {
                out.push_str(&pad);
                out.push_str(&key(k));
                out.push(':');
                value(v, out);
            }
        }
        Yaml::Seq(items) if !items.is_empty() => {
            for v in items {
                out.push_str(&pad);
                out.push('-');
                value(v, out);
            }
        }
        leaf => {
            out.push_str(&pad);
            flow(leaf, out);
            out.push('\n');
        }
    }
}

fn render(y: &Yaml, flow_style: bool) -> String {
    let mut out = String::new();
    if flow_style {
        flow(y, &mut out);
        out.push('\n');
    } else {
        block(y, 0, &mut out);
    }
    out
}

/// Any YAML at all: what a wrong type in any place looks like.
fn chaos() -> BoxedStrategy<Yaml> {
    let leaf = prop_oneof![
        ".{0,10}".prop_map(Yaml::Str),
        prop::sample::select(vec![
            "0",
            "-1",
            "1.5",
            ".nan",
            ".inf",
            "true",
            "null",
            "~",
            "99999999999999999999999",
            "0x1f",
            "[]",
            "{}",
            "!!binary aGk=",
            "*nowhere",
        ])
        .prop_map(raw),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Yaml::Seq),
            prop::collection::vec(("[a-zA-Z]{1,8}", inner), 0..4).prop_map(Yaml::Map),
        ]
    })
    .boxed()
}

/// Mostly the right kind of value, now and then anything.
fn or_chaos(good: impl Strategy<Value = Yaml> + 'static) -> BoxedStrategy<Yaml> {
    prop_oneof![40 => good, 1 => chaos()].boxed()
}

// ---------------------------------------------------------------------------
// Field values: mostly good, sometimes wrong, so that both the accepting and
// the rejecting paths of the validator are taken.
// ---------------------------------------------------------------------------

/// A DNS-1123 subdomain, as names must be.
fn dns_name() -> impl Strategy<Value = String> {
    // DNS-1123 labels joined by single dots: a valid name and a valid host.
    "[a-z0-9]([a-z0-9-]{0,4}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,4}[a-z0-9])?){0,2}"
}

/// A plugin's host: DNS labels whose last one is not a number (which would
/// read as an IPv4 address).
fn host_name() -> impl Strategy<Value = String> {
    "([a-z0-9]([a-z0-9-]{0,4}[a-z0-9])?\\.){0,2}[a-z]([a-z0-9-]{0,4}[a-z0-9])?"
}

fn name() -> BoxedStrategy<String> {
    prop_oneof![
        60 => dns_name(),
        1 => Just(String::new()),
        1 => "[A-Za-z_ ./:@-]{1,6}",
        1 => ".{0,16}",
        1 => "[a-z]{254}",
    ]
    .boxed()
}

fn endpoint() -> BoxedStrategy<String> {
    prop_oneof![
        60 => (host_name(), 1u16..).prop_map(|(h, p)| format!("{h}:{p}")),
        1 => (0u32..=70_000).prop_map(|p| format!("127.0.0.1:{p}")),
        1 => any::<(std::net::Ipv6Addr, u16)>().prop_map(|(a, p)| format!("[{a}]:{p}")),
        1 => prop::sample::select(vec![
            "nohost", ":80", "http://a:1", "a:", "[::1]80", "a b:80", "", "a/b:1", "u@h:1",
            "[::1]:0", "h:-1", "h:+1", "[]:1", "a[b:80", "a]b:1", "::1:80", "[::g]:1", "a..b:1",
            "a%b:1", "a\\b:1",
        ])
        .prop_map(String::from),
        1 => ".{0,24}",
        2 => ("[A-Za-z0-9._-]{1,10}", 1u16..).prop_map(|(h, p)| format!("{h}:{p}")),
        1 => ("[0-9]{1,3}(\\.[0-9]{1,3}){0,4}\\.?", 1u16..).prop_map(|(h, p)| format!("{h}:{p}")),
    ]
    .boxed()
}

fn duration_text() -> BoxedStrategy<String> {
    prop_oneof![
        60 => (1u64..=30_000).prop_map(|ms| config::format_duration(Duration::from_millis(ms))),
        2 => (
            "[0-9]{0,4}(\\.[0-9]{0,3})?",
            prop::sample::select(vec!["ns", "us", "µs", "ms", "s", "m", "h", "", "x", "sec"]),
        )
            .prop_map(|(n, u)| format!("{n}{u}")),
        1 => prop::sample::select(vec![
            "0", "-1s", "1h30m", "1.5s", "1e3s", "inf", "NaN", "99999999999h", ".", "0s", "31s",
            "30s", "30.000000001s", "1..5s", "s5", " 2s ",
        ])
        .prop_map(String::from),
        1 => ".{0,12}",
    ]
    .boxed()
}

const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

fn code_text() -> BoxedStrategy<String> {
    prop_oneof![
        // Any code but OK is a right one.
        40 => prop::sample::select(&CODE_NAMES[1..]).prop_map(String::from),
        4 => prop::sample::select(&CODE_NAMES[1..]).prop_map(|c| c.to_lowercase()),
        4 => (1i32..=16).prop_map(|n| n.to_string()),
        1 => Just("OK".to_string()),
        1 => (-2i32..20).prop_map(|n| n.to_string()),
        1 => "[A-Z_]{0,12}",
    ]
    .boxed()
}

const HOOK_NAMES: [&str; 4] = [
    "BeginRollout",
    "ProgressRollout",
    "ValidateRolloutCompletion",
    "MutateManifestWork",
];

fn failure_policy_text() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => prop::sample::select(vec!["Fail", "Ignore"]).prop_map(String::from),
        1 => prop::sample::select(vec!["fail", "Maybe", ""]).prop_map(String::from),
    ]
}

/// An integer in `lo..=hi` (the field's range), now and then one just
/// outside it or any at all.
fn int(lo: i64, hi: i64) -> impl Strategy<Value = Yaml> {
    prop_oneof![
        40 => (lo..=hi).prop_map(raw),
        1 => prop::sample::select(vec![lo - 1, hi + 1]).prop_map(raw),
        1 => any::<i64>().prop_map(raw),
    ]
}

/// A float in `lo..=hi` (the field's range), now and then any at all.
fn ratio(lo: f64, hi: f64) -> impl Strategy<Value = Yaml> {
    prop_oneof![
        40 => (lo..=hi).prop_map(float),
        1 => prop::sample::select(vec![lo - 0.5, hi + 0.5]).prop_map(float),
        1 => any::<f64>().prop_map(float),
    ]
}

fn ca_bundle_b64() -> impl Strategy<Value = String> {
    use base64::Engine as _;
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    prop_oneof![
        20 => Just(b64("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")),
        1 => ".{0,12}".prop_map(move |t| b64(&t)),
        1 => ".{0,12}",
        1 => Just(String::new()),
    ]
}

/// A duration in a range where it fits beside the other fields (so that the
/// file may be right), now and then any duration text.
fn duration_between(lo: u64, hi: u64) -> impl Strategy<Value = Yaml> {
    prop_oneof![
        40 => (lo..=hi).prop_map(|ms| s(config::format_duration(Duration::from_millis(ms)))),
        1 => duration_text().prop_map(Yaml::Str),
    ]
}

/// `entries` with each present value added under its key.
fn entries(fields: Vec<(&str, Option<Yaml>)>) -> Vec<(String, Yaml)> {
    fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v?)))
        .collect()
}

/// Keys no part of the file knows, so each must be reported.
fn unknown_keys() -> impl Strategy<Value = BTreeMap<String, Yaml>> {
    prop_oneof![
        40 => Just(BTreeMap::new()),
        // None of them a known key: empty, or starting with an x.
        1 => prop::collection::btree_map("|x-[a-z]{1,6}|x[ .:_\"]?.{0,4}", chaos(), 1..3),
    ]
}

/// The policy fields of `defaults` and of each plugin.
fn policy_fields() -> BoxedStrategy<Vec<(String, Yaml)>> {
    let retry = (
        option::of(int(1, 10)),
        option::of(duration_between(1, 2_000)),
        option::of(duration_between(2_000, 30_000)),
        option::of(ratio(1.0, 100.0)),
        option::of(
            prop::collection::vec(code_text().prop_map(Yaml::Str), 0..3).prop_map(Yaml::Seq),
        ),
        unknown_keys(),
    )
        .prop_map(|(attempts, initial, max, mult, codes, unknown)| {
            let mut e = entries(vec![
                ("maxAttempts", attempts),
                ("initialBackoff", initial),
                ("maxBackoff", max),
                ("backoffMultiplier", mult),
                ("retryableStatusCodes", codes),
            ]);
            e.extend(unknown);
            Yaml::Map(e)
        });
    let budget = (
        option::of(ratio(0.0, 1000.0)),
        option::of(int(0, 1_000_000)),
        unknown_keys(),
    )
        .prop_map(|(r, m, unknown)| {
            let mut e = entries(vec![("ratio", r), ("minPerSecond", m)]);
            e.extend(unknown);
            Yaml::Map(e)
        });
    let breaker = (
        option::of(int(1, 1_000_000)),
        option::of(duration_between(1, 10_000)),
        option::of(duration_between(10_000, 600_000)),
        unknown_keys(),
    )
        .prop_map(|(n, open, max, unknown)| {
            let mut e = entries(vec![
                ("consecutiveFailures", n),
                ("openFor", open),
                ("maxOpenFor", max),
            ]);
            e.extend(unknown);
            Yaml::Map(e)
        });
    let by_hook = prop::collection::btree_map(
        prop_oneof![
            40 => prop::sample::select(&HOOK_NAMES[..]).prop_map(String::from),
            1 => "[A-Za-z]{1,10}",
        ],
        failure_policy_text(),
        0..3,
    )
    .prop_map(|m| Yaml::Map(m.into_iter().map(|(k, v)| (k, s(v))).collect()));
    (
        option::of(or_chaos(duration_between(1, 30_000))),
        option::of(or_chaos(failure_policy_text().prop_map(Yaml::Str))),
        option::of(or_chaos(by_hook)),
        option::of(or_chaos(retry)),
        option::of(or_chaos(budget)),
        option::of(or_chaos(breaker)),
        option::of(or_chaos(int(1, 100_000))),
    )
        .prop_map(|(timeout, fp, by_hook, retry, budget, breaker, max)| {
            entries(vec![
                ("timeout", timeout),
                ("failurePolicy", fp),
                ("failurePolicyByHook", by_hook),
                ("retry", retry),
                ("retryBudget", budget),
                ("circuitBreaker", breaker),
                ("maxConcurrentCalls", max),
            ])
        })
        .boxed()
}

fn plugin(plugin_name: String) -> BoxedStrategy<Yaml> {
    // How the plugin is reached: insecure, a CA bundle, both, neither.
    let transport = prop_oneof![
        40 => Just(vec![("insecure", Some(raw("true")))]),
        10 => ca_bundle_b64().prop_map(|b| vec![(
            "caCertificate",
            Some(Yaml::Map(vec![("caBundle".into(), s(b))])),
        )]),
        1 => Just(vec![("insecure", Some(raw("false")))]),
        1 => Just(vec![]),
        1 => ca_bundle_b64().prop_map(|b| vec![
            ("insecure", Some(raw("true"))),
            ("caCertificate", Some(Yaml::Map(vec![("caBundle".into(), s(b))]))),
        ]),
    ];
    (
        prop_oneof![40 => Just(Some(plugin_name)), 1 => Just(None)],
        option::weighted(0.98, or_chaos(endpoint().prop_map(Yaml::Str))),
        transport,
        option::weighted(
            0.2,
            prop_oneof![
                40 => prop::collection::vec(name().prop_map(Yaml::Str), 1..3),
                1 => Just(vec![]),
            ]
            .prop_map(Yaml::Seq),
        ),
        policy_fields(),
        unknown_keys(),
    )
        .prop_map(|(n, ep, transport, hubs, policy, unknown)| {
            let mut e = entries(vec![("name", n.map(Yaml::Str)), ("endpoint", ep)]);
            e.extend(entries(transport));
            e.extend(entries(vec![("hubs", hubs)]));
            e.extend(policy);
            e.extend(unknown);
            Yaml::Map(e)
        })
        .boxed()
}

/// A registry file as a user might write it, right or wrong in any place.
#[derive(Debug, Clone)]
struct Doc {
    text: String,
    /// Unknown top-level keys, each of which must be reported.
    unknown: Vec<String>,
}

fn registry_doc() -> BoxedStrategy<Doc> {
    prop::collection::vec(name(), 0..4).prop_flat_map(|plugin_names| {
        let pool = Arc::new(plugin_names.clone());
        let pick = pool.clone();
        // Pipeline members: mostly the file's plugins, sometimes not.
        let member = prop_oneof![
            20 => (0..pool.len().max(1)).prop_map(move |i| pick.get(i).cloned().unwrap_or_default()),
            1 => name(),
        ];
        let pipeline = (
            option::weighted(0.98, name()),
            option::weighted(
                0.98,
                prop_oneof![40 => prop::collection::vec(member.clone(), 1..4), 1 => Just(vec![])]
                    .prop_map(|m| Yaml::Seq(m.into_iter().map(Yaml::Str).collect())),
            ),
            unknown_keys(),
        )
            .prop_map(|(n, members, unknown)| {
                let mut e = entries(vec![("name", n.map(Yaml::Str)), ("plugins", members)]);
                e.extend(unknown);
                Yaml::Map(e)
            });
        let plugins: Vec<_> = plugin_names.into_iter().map(plugin).collect();
        let client_certificate = (
            option::weighted(0.95, "[a-z/.]{1,8}|.{0,8}"),
            option::weighted(0.95, "[a-z/.]{1,8}|.{0,8}"),
        )
            .prop_map(|(c, k)| {
                Yaml::Map(entries(vec![
                    ("certFile", c.map(Yaml::Str)),
                    ("keyFile", k.map(Yaml::Str)),
                ]))
            });
        (
            option::weighted(0.2, name()),
            option::weighted(0.1, client_certificate),
            option::weighted(0.3, policy_fields()),
            plugins,
            prop::collection::vec(pipeline, 0..3),
            unknown_keys(),
            any::<bool>(),
        )
    })
    .prop_map(
        |(hub, client_certificate, defaults, plugins, pipelines, unknown, flow_style)| {
            let mut e = entries(vec![
                ("hub", hub.map(Yaml::Str)),
                ("clientCertificate", client_certificate),
                ("defaults", defaults.map(Yaml::Map)),
                ("plugins", Some(Yaml::Seq(plugins))),
                ("pipelines", Some(Yaml::Seq(pipelines))),
            ]);
            let unknown_names = unknown.keys().cloned().collect();
            e.extend(unknown);
            Doc {
                text: render(&Yaml::Map(e), flow_style),
                unknown: unknown_names,
            }
        },
    )
    .boxed()
}

/// Text built from YAML's own punctuation and the registry's words: closer
/// to the parser's corners than uniformly random characters.
fn yamlish_text() -> BoxedStrategy<String> {
    let token = prop::sample::select(vec![
        "plugins:",
        "pipelines:",
        "defaults:",
        "hub:",
        "name: ",
        "endpoint: ",
        "insecure: true",
        "timeout: ",
        "retry:",
        "maxAttempts: ",
        "caCertificate:",
        "caBundle: ",
        "hubs: ",
        "a",
        "h:1",
        "10s",
        "\n",
        "\n  ",
        "\n    ",
        "  ",
        "- ",
        "-",
        ":",
        ": ",
        "{",
        "}",
        "[",
        "]",
        ",",
        "&a ",
        "*a",
        "!!str ",
        "!!map ",
        "!x ",
        "'",
        "\"",
        "#",
        "---\n",
        "...\n",
        "|",
        ">",
        "? ",
        "<<: ",
        "\t",
        "%YAML 1.2\n",
        "\\",
        "\u{feff}",
        "\r\n",
        "~",
        "null",
        "-1",
        "1e999",
        "\u{0}",
        "é",
    ]);
    prop::collection::vec(token, 0..64)
        .prop_map(|t| t.concat())
        .boxed()
}

// ---------------------------------------------------------------------------
// Registry files that are right in every place, with what they must mean.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Default)]
struct GoodPolicy {
    timeout_ms: Option<u64>,
    failure_policy: Option<FailurePolicy>,
    by_hook: BTreeMap<usize, FailurePolicy>,
    max_attempts: Option<u32>,
    /// Set together, so that initial <= max holds whatever the defaults say.
    backoffs_ms: Option<(u64, u64)>,
    multiplier: Option<f64>,
    codes: Option<Vec<usize>>,
    budget_ratio: Option<f64>,
    budget_min: Option<u32>,
    consecutive_failures: Option<u32>,
    open_for_ms: Option<(u64, u64)>,
    max_concurrent_calls: Option<u32>,
}

fn good_failure_policy() -> impl Strategy<Value = FailurePolicy> {
    prop_oneof![Just(FailurePolicy::Fail), Just(FailurePolicy::Ignore)]
}

fn good_policy() -> BoxedStrategy<GoodPolicy> {
    (
        (
            option::of(1u64..=30_000),
            option::of(good_failure_policy()),
            prop::collection::btree_map(0usize..4, good_failure_policy(), 0..3),
            option::of(1u32..=10),
            option::of((1u64..=5_000).prop_flat_map(|i| (Just(i), i..=i + 60_000))),
            option::of(1.0f64..=100.0),
        ),
        (
            // Any code but OK (index 0).
            option::of(prop::collection::vec(1usize..17, 0..4)),
            option::of(0.0f64..=1000.0),
            option::of(0u32..=1_000_000),
            option::of(1u32..=1_000_000),
            option::of((1u64..=60_000).prop_flat_map(|o| (Just(o), o..=o + 600_000))),
            option::of(1u32..=100_000),
        ),
    )
        .prop_map(
            |(
                (timeout_ms, failure_policy, by_hook, max_attempts, backoffs_ms, multiplier),
                (codes, budget_ratio, budget_min, consecutive_failures, open_for_ms, max_cc),
            )| GoodPolicy {
                timeout_ms,
                failure_policy,
                by_hook,
                max_attempts,
                backoffs_ms,
                multiplier,
                codes,
                budget_ratio,
                budget_min,
                consecutive_failures,
                open_for_ms,
                max_concurrent_calls: max_cc,
            },
        )
        .boxed()
}

fn ms(n: u64) -> Yaml {
    s(config::format_duration(Duration::from_millis(n)))
}

fn fp_text(fp: FailurePolicy) -> &'static str {
    match fp {
        FailurePolicy::Fail => "Fail",
        FailurePolicy::Ignore => "Ignore",
    }
}

impl GoodPolicy {
    fn yaml(&self) -> Vec<(String, Yaml)> {
        let retry = entries(vec![
            ("maxAttempts", self.max_attempts.map(raw)),
            ("initialBackoff", self.backoffs_ms.map(|(i, _)| ms(i))),
            ("maxBackoff", self.backoffs_ms.map(|(_, m)| ms(m))),
            ("backoffMultiplier", self.multiplier.map(float)),
            (
                "retryableStatusCodes",
                self.codes
                    .as_ref()
                    .map(|c| Yaml::Seq(c.iter().map(|&i| s(CODE_NAMES[i])).collect())),
            ),
        ]);
        let budget = entries(vec![
            ("ratio", self.budget_ratio.map(float)),
            ("minPerSecond", self.budget_min.map(raw)),
        ]);
        let breaker = entries(vec![
            ("consecutiveFailures", self.consecutive_failures.map(raw)),
            ("openFor", self.open_for_ms.map(|(o, _)| ms(o))),
            ("maxOpenFor", self.open_for_ms.map(|(_, m)| ms(m))),
        ]);
        let by_hook: Vec<_> = self
            .by_hook
            .iter()
            .map(|(&h, &fp)| (HOOK_NAMES[h].to_string(), s(fp_text(fp))))
            .collect();
        let some_map = |e: Vec<(String, Yaml)>| (!e.is_empty()).then_some(Yaml::Map(e));
        entries(vec![
            ("timeout", self.timeout_ms.map(ms)),
            ("failurePolicy", self.failure_policy.map(|f| s(fp_text(f)))),
            ("failurePolicyByHook", some_map(by_hook)),
            ("retry", some_map(retry)),
            ("retryBudget", some_map(budget)),
            ("circuitBreaker", some_map(breaker)),
            ("maxConcurrentCalls", self.max_concurrent_calls.map(raw)),
        ])
    }

    /// The policy that results from these fields over `base`.
    fn over(&self, base: &Policy) -> Policy {
        let mut p = base.clone();
        if let Some(t) = self.timeout_ms {
            p.timeout = Duration::from_millis(t);
        }
        if let Some(f) = self.failure_policy {
            p.failure_policy = f;
        }
        for (&h, &fp) in &self.by_hook {
            let hook = HOOKS[h];
            p.failure_policy_by_hook.retain(|(x, _)| *x != hook);
            p.failure_policy_by_hook.push((hook, fp));
        }
        if let Some(n) = self.max_attempts {
            p.retry.max_attempts = n;
        }
        if let Some((i, m)) = self.backoffs_ms {
            p.retry.initial_backoff = Duration::from_millis(i);
            p.retry.max_backoff = Duration::from_millis(m);
        }
        if let Some(m) = self.multiplier {
            p.retry.backoff_multiplier = m;
        }
        if let Some(c) = &self.codes {
            p.retry.retryable_codes = c.iter().map(|&i| Code::from_i32(i as i32)).collect();
        }
        if let Some(r) = self.budget_ratio {
            p.retry_budget.ratio = r;
        }
        if let Some(m) = self.budget_min {
            p.retry_budget.min_per_second = m;
        }
        if let Some(n) = self.consecutive_failures {
            p.circuit_breaker.consecutive_failures = n;
        }
        if let Some((o, m)) = self.open_for_ms {
            p.circuit_breaker.open_for = Duration::from_millis(o);
            p.circuit_breaker.max_open_for = Duration::from_millis(m);
        }
        if let Some(n) = self.max_concurrent_calls {
            p.max_concurrent_calls = n as usize;
        }
        p
    }
}

const HOOKS: [Hook; 4] = [
    Hook::BeginRollout,
    Hook::ProgressRollout,
    Hook::ValidateRolloutCompletion,
    Hook::MutateManifestWork,
];

#[derive(Debug, Clone)]
struct GoodPlugin {
    name: String,
    host: String,
    port: u16,
    hubs: Option<Vec<String>>,
    policy: GoodPolicy,
}

#[derive(Debug, Clone)]
struct GoodDoc {
    defaults: GoodPolicy,
    plugins: Vec<GoodPlugin>,
    pipelines: Vec<(String, Vec<String>)>,
    flow_style: bool,
}

fn good_doc() -> BoxedStrategy<GoodDoc> {
    // Plugins and pipelines share one namespace: disjoint by their prefixes.
    let plugin_names = prop::collection::btree_set(dns_name().prop_map(|n| format!("p-{n}")), 1..5);
    let pipeline_names =
        prop::collection::btree_set(dns_name().prop_map(|n| format!("l-{n}")), 0..3);
    (plugin_names, pipeline_names)
        .prop_flat_map(|(plugins, pipelines)| {
            let plugins: Vec<String> = plugins.into_iter().collect();
            let pool = plugins.clone();
            let good_plugins: Vec<_> = plugins
                .into_iter()
                .map(|n| {
                    (
                        host_name(),
                        1u16..,
                        option::weighted(0.2, prop::collection::vec(dns_name(), 1..3)),
                        good_policy(),
                    )
                        .prop_map(move |(host, port, hubs, policy)| {
                            GoodPlugin {
                                name: n.clone(),
                                host,
                                port,
                                hubs,
                                policy,
                            }
                        })
                })
                .collect();
            let good_pipelines: Vec<_> = pipelines
                .into_iter()
                .map(|n| {
                    (
                        Just(n),
                        prop::sample::subsequence(pool.clone(), 1..=pool.len()).prop_shuffle(),
                    )
                })
                .collect();
            (good_policy(), good_plugins, good_pipelines, any::<bool>())
        })
        .prop_map(|(defaults, plugins, pipelines, flow_style)| GoodDoc {
            defaults,
            plugins,
            pipelines,
            flow_style,
        })
        .boxed()
}

impl GoodDoc {
    fn text(&self) -> String {
        let plugins = self
            .plugins
            .iter()
            .map(|p| {
                let mut e = entries(vec![
                    ("name", Some(s(&p.name))),
                    ("endpoint", Some(s(format!("{}:{}", p.host, p.port)))),
                    ("insecure", Some(raw("true"))),
                    (
                        "hubs",
                        p.hubs
                            .as_ref()
                            .map(|h| Yaml::Seq(h.iter().map(s).collect())),
                    ),
                ]);
                e.extend(p.policy.yaml());
                Yaml::Map(e)
            })
            .collect();
        let pipelines = self
            .pipelines
            .iter()
            .map(|(n, members)| {
                Yaml::Map(vec![
                    ("name".into(), s(n)),
                    ("plugins".into(), Yaml::Seq(members.iter().map(s).collect())),
                ])
            })
            .collect();
        let defaults = self.defaults.yaml();
        let doc = Yaml::Map(entries(vec![
            (
                "defaults",
                (!defaults.is_empty()).then_some(Yaml::Map(defaults)),
            ),
            ("plugins", Some(Yaml::Seq(plugins))),
            ("pipelines", Some(Yaml::Seq(pipelines))),
        ]));
        render(&doc, self.flow_style)
    }
}

// ---------------------------------------------------------------------------
// The checks, shared by the quick properties and the timed fuzz runs.
// ---------------------------------------------------------------------------

/// `parse` answers every text with a config or with problems that each say
/// what is wrong and where; what it accepts holds together.
fn check_config_text(text: &str) -> TestCaseResult {
    // Neither may panic either.
    let _ = config::is_blank(text);
    match config::parse(text) {
        Ok(cfg) => check_config_invariants(&cfg),
        Err(e) => {
            prop_assert!(!e.problems.is_empty(), "an error without a problem");
            for p in &e.problems {
                prop_assert!(!p.message.trim().is_empty(), "no message: {p:?}");
                // Every problem names its place; only a file YAML cannot read
                // at all is reported as a whole, with the line in the message
                // or, where the YAML library has none, the field in backticks
                // (a duplicated top-level key written with a tag, such as
                // "!x hub: a\nhub: b", gives "duplicate field `hub`").
                prop_assert!(
                    !p.path.is_empty()
                        || (p.message.starts_with("not a valid registry file")
                            && (p.message.contains("line ") || p.message.contains('`'))),
                    "a problem that names no place: {p:?}"
                );
            }
            prop_assert!(!e.to_string().is_empty());
            Ok(())
        }
    }
}

fn check_config_invariants(cfg: &Config) -> TestCaseResult {
    let max_timeout = Duration::from_secs(30);
    let mut plugin_names = HashSet::new();
    for p in &cfg.plugins {
        prop_assert!(config::check_dns_subdomain(&p.name).is_ok(), "{:?}", p.name);
        prop_assert!(plugin_names.insert(p.name.as_str()), "{} twice", p.name);
        prop_assert!(p.endpoint.port != 0);
        prop_assert!(!p.endpoint.host.is_empty());
        prop_assert_eq!(
            config::parse_endpoint(&p.endpoint.to_string()),
            Ok(p.endpoint.clone())
        );
        if let Transport::Tls {
            ca: CaSource::Bundle { pem },
        } = &p.transport
        {
            prop_assert!(!pem.is_empty());
        }
        let pol = &p.policy;
        prop_assert!(
            !pol.timeout.is_zero() && pol.timeout <= max_timeout,
            "{}: timeout {:?}",
            p.name,
            pol.timeout
        );
        prop_assert!((1..=10).contains(&pol.retry.max_attempts));
        prop_assert!(!pol.retry.initial_backoff.is_zero());
        prop_assert!(pol.retry.initial_backoff <= pol.retry.max_backoff);
        prop_assert!((1.0..=100.0).contains(&pol.retry.backoff_multiplier));
        prop_assert!(!pol.retry.retryable_codes.contains(&Code::Ok));
        prop_assert!((0.0..=1000.0).contains(&pol.retry_budget.ratio));
        prop_assert!(pol.circuit_breaker.consecutive_failures >= 1);
        prop_assert!(!pol.circuit_breaker.open_for.is_zero());
        prop_assert!(pol.circuit_breaker.open_for <= pol.circuit_breaker.max_open_for);
        prop_assert!(pol.max_concurrent_calls >= 1);
        if let Some(hubs) = &p.hubs {
            prop_assert!(!hubs.is_empty());
            for h in hubs {
                prop_assert!(config::check_dns_subdomain(h.as_str()).is_ok(), "hub {h:?}");
            }
        }
    }
    if let Some(hub) = &cfg.hub {
        prop_assert!(
            config::check_dns_subdomain(hub.as_str()).is_ok(),
            "hub {hub:?}"
        );
    }
    let mut pipeline_names = HashSet::new();
    for pl in &cfg.pipelines {
        prop_assert!(config::check_dns_subdomain(&pl.name).is_ok());
        prop_assert!(
            !plugin_names.contains(pl.name.as_str()),
            "{} clashes",
            pl.name
        );
        prop_assert!(pipeline_names.insert(pl.name.as_str()), "{} twice", pl.name);
        prop_assert!(!pl.plugins.is_empty());
        let members: HashSet<&str> = pl.plugins.iter().map(String::as_str).collect();
        prop_assert_eq!(members.len(), pl.plugins.len(), "a member twice");
    }
    for pl in &cfg.pipelines {
        for m in &pl.plugins {
            prop_assert!(!pipeline_names.contains(m.as_str()), "{m} is a pipeline");
            // A hub's file may also name the shared files' plugins.
            if cfg.hub.is_none() {
                prop_assert!(
                    plugin_names.contains(m.as_str()),
                    "pipeline {} names {m}, not a plugin of the file",
                    pl.name
                );
            }
        }
    }
    Ok(())
}

fn check_registry_doc(doc: &Doc) -> TestCaseResult {
    check_config_text(&doc.text)?;
    match config::parse(&doc.text) {
        Ok(_) => prop_assert!(doc.unknown.is_empty(), "unknown keys accepted"),
        Err(e) => {
            let readable = !e.problems[0]
                .message
                .starts_with("not a valid registry file");
            if readable {
                for k in &doc.unknown {
                    prop_assert!(
                        e.problems
                            .iter()
                            .any(|p| (p.path == *k || p.path == format!("{k:?}"))
                                && p.message.starts_with("unknown field")),
                        "unknown key {k:?} not reported: {e}"
                    );
                }
            }
        }
    }
    Ok(())
}

/// A right file is accepted and means what it says, field by field, with
/// each plugin's fields over `defaults` over the built-in policy.
fn check_good_doc(doc: &GoodDoc) -> TestCaseResult {
    let text = doc.text();
    let cfg = match config::parse(&text) {
        Ok(cfg) => cfg,
        Err(e) => return Err(TestCaseError::fail(format!("{e}\n--- in:\n{text}"))),
    };
    check_config_invariants(&cfg)?;
    prop_assert_eq!(cfg.hub, None);
    prop_assert_eq!(cfg.plugins.len(), doc.plugins.len());
    let defaults = doc.defaults.over(&Policy::default());
    for (got, want) in cfg.plugins.iter().zip(&doc.plugins) {
        prop_assert_eq!(&got.name, &want.name);
        prop_assert_eq!(&got.endpoint.host, &want.host);
        prop_assert_eq!(got.endpoint.port, want.port);
        prop_assert_eq!(&got.transport, &Transport::Plaintext);
        let hubs: Option<Vec<&str>> = got
            .hubs
            .as_ref()
            .map(|h| h.iter().map(|h| h.as_str()).collect());
        let wanted: Option<Vec<&str>> = want
            .hubs
            .as_ref()
            .map(|h| h.iter().map(String::as_str).collect());
        prop_assert_eq!(hubs, wanted);
        let policy = want.policy.over(&defaults);
        let (g, w) = (&got.policy, &policy);
        prop_assert_eq!(g.timeout, w.timeout);
        prop_assert_eq!(g.failure_policy, w.failure_policy);
        for hook in HOOKS {
            prop_assert_eq!(
                g.failure_policy_for(Some(hook)),
                w.failure_policy_for(Some(hook)),
                "{:?}",
                hook
            );
        }
        prop_assert_eq!(&g.retry, &w.retry);
        prop_assert_eq!(&g.retry_budget, &w.retry_budget);
        prop_assert_eq!(&g.circuit_breaker, &w.circuit_breaker);
        prop_assert_eq!(g.max_concurrent_calls, w.max_concurrent_calls);
    }
    let got: Vec<_> = cfg
        .pipelines
        .iter()
        .map(|p| (p.name.clone(), p.plugins.clone()))
        .collect();
    prop_assert_eq!(got, doc.pipelines.clone());
    Ok(())
}

fn check_duration_text(text: &str) -> TestCaseResult {
    if let Ok(d) = config::parse_duration(text) {
        prop_assert!(d <= Duration::from_secs(1_000_000_000), "{text:?} -> {d:?}");
        prop_assert!(!text.trim_start().starts_with('-'), "{text:?} -> {d:?}");
    }
    Ok(())
}

fn check_endpoint_text(text: &str) -> TestCaseResult {
    if let Ok(e) = config::parse_endpoint(text) {
        prop_assert!(e.port != 0, "{text:?}");
        prop_assert!(!e.host.is_empty(), "{text:?}");
        prop_assert!(
            !e.host
                .contains(|c: char| c.is_whitespace() || c == '/' || c == '@'),
            "{text:?}"
        );
        // What validation accepts, the connection accepts too: the URI and
        // the TLS server name are built from it.
        let uri = format!("https://{e}/rollout.v1alpha1.RolloutPluginService/Initialize");
        prop_assert!(uri.parse::<http::Uri>().is_ok(), "{text:?} -> {uri:?}");
        prop_assert!(
            rustls_pki_types::ServerName::try_from(e.host.clone()).is_ok(),
            "{text:?}"
        );
    }
    Ok(())
}

fn check_small_parsers(text: &str) -> TestCaseResult {
    check_duration_text(text)?;
    check_endpoint_text(text)?;
    if let Some(code) = config::parse_code(text) {
        prop_assert!((0..=16).contains(&(code as i32)));
    }
    if config::check_dns_subdomain(text).is_ok() {
        prop_assert!(!text.is_empty() && text.len() <= 253);
        prop_assert!(
            text.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        );
    }
    // Any text, ASCII or not (`bug_parse_timeout_panics_on_non_ascii`).
    if grpc::parse_timeout(text).is_some() {
        prop_assert!((2..=9).contains(&text.len()));
    }
    let _ = grpc::percent_decode(text);
    Ok(())
}

/// What the mutate chain does with one member's answer
/// (`manifest::check_answer`): both sides must be JSON objects and the
/// answer must keep the identity fields. `Ok(changed)` or why not.
fn check_answer(input: &[u8], output: &[u8]) -> Result<bool, String> {
    manifest::check_answer(input, output).map_err(|refused| match refused {
        manifest::Refused::Input(why) | manifest::Refused::Answer(why) => why,
    })
}

/// `manifest::identity_change` between two values, as the gateway sees
/// them: serialized, then parsed.
fn identity_change(a: &Value, b: &Value) -> Option<(&'static str, String, String)> {
    let (a, b) = (
        serde_json::to_vec(a).unwrap(),
        serde_json::to_vec(b).unwrap(),
    );
    let (a, b) = (
        manifest::parse_object(&a).expect("an object"),
        manifest::parse_object(&b).expect("an object"),
    );
    manifest::identity_change(&a, &b)
}

fn check_json_bytes(input: &[u8], output: &[u8]) -> TestCaseResult {
    if let Ok(v) = manifest::parse_object(output) {
        prop_assert!(matches!(v, manifest::Json::Object(_)));
    }
    if let Ok(changed) = check_answer(input, output) {
        prop_assert!(
            changed || manifest::parse_object(input).ok() == manifest::parse_object(output).ok()
        );
    }
    Ok(())
}

/// Any JSON value.
fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("a JSON number", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A ManifestWork-like object: any fields, with the identity fields set
/// (apiVersion, kind and spec.executor only sometimes).
fn manifest_work() -> BoxedStrategy<Value> {
    (
        (
            prop::collection::btree_map("[a-zA-Z]{1,8}", json_value(), 0..4),
            prop::collection::btree_map("[a-zA-Z]{1,8}", json_value(), 0..3),
        ),
        option::of(".{0,12}"),
        option::of(".{0,12}"),
        ".{0,12}",
        ".{0,12}",
        option::of(json_value()),
    )
        .prop_map(
            |((top, meta), api_version, kind, name, namespace, executor)| {
                let mut v = Value::Object(top.into_iter().collect());
                let mut m: serde_json::Map<String, Value> = meta.into_iter().collect();
                m.insert("name".into(), json!(name));
                m.insert("namespace".into(), json!(namespace));
                v["metadata"] = Value::Object(m);
                v["spec"] = json!({});
                if let Some(e) = executor {
                    v["spec"]["executor"] = e;
                }
                if let Some(a) = api_version {
                    v["apiVersion"] = json!(a);
                }
                if let Some(k) = kind {
                    v["kind"] = json!(k);
                }
                v
            },
        )
        .boxed()
}

/// The value at an identity field, by its index in `IDENTITY_FIELDS`.
fn identity_slot(v: &mut Value, field: usize) -> (&mut serde_json::Map<String, Value>, &str) {
    let (obj, key) = match field {
        0 => (v, "apiVersion"),
        1 => (v, "kind"),
        2 => (&mut v["metadata"], "name"),
        3 => (&mut v["metadata"], "namespace"),
        _ => (&mut v["spec"], "executor"),
    };
    (obj.as_object_mut().expect("an object"), key)
}

fn check_identity(work: &Value, field: usize, new: Option<Value>, other: Value) -> TestCaseResult {
    prop_assert_eq!(identity_change(work, work), None);
    // Written out differently (pretty), the same value: not a change at all.
    let compact = serde_json::to_vec(work).unwrap();
    let pretty = serde_json::to_vec_pretty(work).unwrap();
    prop_assert_eq!(check_answer(&compact, &pretty), Ok(false));

    // Any change outside the identity fields is allowed.
    let mut relabelled = work.clone();
    relabelled["metadata"]["x-changed"] = other.clone();
    relabelled["spec"]["x-changed"] = other;
    prop_assert_eq!(identity_change(work, &relabelled), None);

    // Changing (or removing) one identity field is reported by its name.
    let mut changed = work.clone();
    let (obj, key) = identity_slot(&mut changed, field);
    let before = obj.get(key).cloned();
    match new {
        Some(v) => {
            obj.insert(key.to_string(), v);
        }
        None => {
            obj.remove(key);
        }
    }
    let after = obj.get(key).cloned();
    let found = identity_change(work, &changed);
    if before == after {
        prop_assert_eq!(found, None);
    } else {
        let (name, _, _) = found.expect("a change is found");
        prop_assert_eq!(name, manifest::IDENTITY_FIELDS[field].0);
        let out = serde_json::to_vec(&changed).unwrap();
        let why = check_answer(&compact, &out).expect_err("refused");
        prop_assert!(why.contains(name), "{why}");
    }
    Ok(())
}

fn rollout_status() -> BoxedStrategy<ClusterRolloutStatus> {
    (
        ".{0,8}",
        any::<i32>(),
        ".{0,8}",
        option::of((any::<i64>(), any::<i32>())),
        any::<i32>(),
        ".{0,8}",
    )
        .prop_map(|(c, st, rev, t, gi, gn)| ClusterRolloutStatus {
            cluster_name: c,
            rollout_status: st,
            manifest_revision_name: rev,
            last_transition_time: t
                .map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
            group_index: gi,
            group_name: gn,
        })
        .boxed()
}

fn rollout_request() -> BoxedStrategy<RolloutPluginRequest> {
    let statuses = || prop::collection::vec(rollout_status(), 0..3);
    let state =
        (statuses(), statuses(), statuses(), statuses()).prop_map(|(c, p, t, r)| RolloutState {
            completed: c,
            progressing: p,
            timed_out: t,
            removed: r,
        });
    (
        (".{0,12}", ".{0,12}", ".{0,12}", ".{0,12}"),
        (
            any::<i32>(),
            option::of(state),
            ".{0,12}",
            any::<bool>(),
            any::<i32>(),
        ),
    )
        .prop_map(
            |((mwrs, ns, placement, cluster), (total, status, rev, aborting, index))| {
                RolloutPluginRequest {
                    mwrs_name: mwrs,
                    mwrs_namespace: ns,
                    placement_name: placement,
                    cluster_name: cluster,
                    total_cluster_count: total,
                    rollout_status: status,
                    desired_revision: rev,
                    aborting,
                    cluster_index: index,
                    ..Default::default()
                }
            },
        )
        .boxed()
}

fn mutate_request() -> BoxedStrategy<MutateManifestWorkRequest> {
    (
        option::of(rollout_request()),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(rollout, work)| MutateManifestWorkRequest {
            rollout,
            manifest_work: Bytes::from(work),
        })
        .boxed()
}

fn check_frame(body: &[u8], limit: usize) -> TestCaseResult {
    let body = Bytes::copy_from_slice(body);
    if let Ok(len) = grpc::message_len(&body, limit) {
        prop_assert!(len <= limit);
    }
    if let Ok(m) = grpc::decode::<MutateManifestWorkRequest>(body.clone(), limit) {
        prop_assert_eq!(body.len() - 5, grpc::message_len(&body, limit).unwrap());
        // Decoded, it encodes and decodes again to the same message.
        let again = grpc::flatten(grpc::encode(&m));
        prop_assert_eq!(
            grpc::decode::<MutateManifestWorkRequest>(again, usize::MAX),
            Ok(m)
        );
    }
    let _ = grpc::decode::<MutateManifestWorkResponse>(body, limit);
    Ok(())
}

fn check_encoding(m: &MutateManifestWorkRequest) -> TestCaseResult {
    let whole = grpc::flatten(grpc::encode(m));
    let head = MutateManifestWorkRequest {
        rollout: m.rollout.clone(),
        manifest_work: Bytes::new(),
    };
    let split = grpc::flatten(grpc::encode_with_tail(&head, 2, m.manifest_work.clone()));
    prop_assert_eq!(&split, &whole);
    let response = MutateManifestWorkResponse {
        manifest_work: m.manifest_work.clone(),
    };
    prop_assert_eq!(
        grpc::flatten(grpc::encode_with_tail(
            &MutateManifestWorkResponse::default(),
            1,
            m.manifest_work.clone()
        )),
        grpc::flatten(grpc::encode(&response))
    );
    let len = whole.len() - 5;
    prop_assert_eq!(
        grpc::decode::<MutateManifestWorkRequest>(whole.clone(), len),
        Ok(m.clone())
    );
    if len > 0 {
        let over = grpc::decode::<MutateManifestWorkRequest>(whole, len - 1).unwrap_err();
        prop_assert!(
            matches!(over, grpc::FrameError::TooLarge { .. }),
            "{over:?}"
        );
    }
    Ok(())
}

fn check_percent(message: &str) -> TestCaseResult {
    let encoded = grpc::percent_encode(message);
    prop_assert!(
        encoded.bytes().all(|b| (0x20..=0x7e).contains(&b)),
        "{encoded:?}"
    );
    prop_assert!(http::HeaderValue::from_str(&encoded).is_ok());
    prop_assert_eq!(grpc::percent_decode(&encoded), message);
    Ok(())
}

// ---------------------------------------------------------------------------
// The quick properties, run by `cargo test`.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(quick())]

    #[test]
    fn config_parse_never_panics_on_any_text(text in ".{0,200}") {
        check_config_text(&text)?;
    }

    #[test]
    fn config_parse_never_panics_on_yaml_like_text(text in yamlish_text()) {
        check_config_text(&text)?;
    }

    #[test]
    fn registry_files_are_accepted_whole_or_refused_with_every_problem_placed(
        doc in registry_doc(),
    ) {
        check_registry_doc(&doc)?;
    }

    #[test]
    fn right_registry_files_mean_what_they_say(doc in good_doc()) {
        check_good_doc(&doc)?;
    }

    #[test]
    fn small_parsers_never_panic(text in ".{0,40}") {
        check_small_parsers(&text)?;
    }

    #[test]
    fn durations_never_panic_on_duration_like_text(text in duration_text()) {
        check_duration_text(&text)?;
    }

    #[test]
    fn whole_millisecond_durations_round_trip(
        // Short ones often, and any up to the largest the parser takes (1e9 s).
        millis in prop_oneof![0u64..=120_000, 0u64..=1_000_000_000_000],
    ) {
        let d = Duration::from_millis(millis);
        let text = config::format_duration(d);
        prop_assert_eq!(config::parse_duration(&text), Ok(d), "{}", text);
    }

    #[test]
    fn fractional_durations_are_exact(whole in 0u64..100_000, nanos in 0u32..1_000_000_000) {
        let text = format!("{whole}.{nanos:09}s");
        prop_assert_eq!(config::parse_duration(&text), Ok(Duration::new(whole, nanos)), "{}", text);
        let text = format!("{whole}.{:03}ms", nanos % 1000);
        let want = Duration::from_millis(whole) + Duration::from_micros(u64::from(nanos % 1000));
        prop_assert_eq!(config::parse_duration(&text), Ok(want), "{}", text);
    }

    #[test]
    fn compound_durations_add_up(h in 0u64..1000, m in 0u64..60, sec in 0u64..60, milli in 0u64..1000) {
        let text = format!("{h}h{m}m{sec}s{milli}ms");
        let want = Duration::from_millis(((h * 60 + m) * 60 + sec) * 1000 + milli);
        prop_assert_eq!(config::parse_duration(&text), Ok(want), "{}", text);
    }

    #[test]
    fn endpoints_never_panic_and_good_ones_parse(
        text in endpoint(),
        host in host_name(),
        port in 1u16..,
        v6 in any::<std::net::Ipv6Addr>(),
    ) {
        check_endpoint_text(&text)?;
        let e = config::parse_endpoint(&format!("{host}:{port}")).unwrap();
        prop_assert_eq!((e.host.as_str(), e.port), (host.as_str(), port));
        prop_assert_eq!(config::parse_endpoint(&e.to_string()), Ok(e.clone()));
        let e = config::parse_endpoint(&format!("[{v6}]:{port}")).unwrap();
        prop_assert_eq!(e.host.parse::<std::net::Ipv6Addr>(), Ok(v6));
        prop_assert_eq!(config::parse_endpoint(&e.to_string()), Ok(e.clone()));
    }

    #[test]
    fn manifest_parsing_never_panics_on_any_bytes(
        input in prop::collection::vec(any::<u8>(), 0..200),
        output in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        check_json_bytes(&input, &output)?;
    }

    #[test]
    fn only_json_objects_are_manifest_works(v in json_value()) {
        let bytes = serde_json::to_vec(&v).unwrap();
        prop_assert_eq!(manifest::parse_object(&bytes).is_ok(), v.is_object());
    }

    #[test]
    fn identity_changes_are_reported_by_field(
        work in manifest_work(),
        field in 0usize..manifest::IDENTITY_FIELDS.len(),
        new in option::weighted(0.8, json_value()),
        other in json_value(),
    ) {
        check_identity(&work, field, new, other)?;
    }

    #[test]
    fn grpc_decode_never_panics_on_any_frame(
        body in prop::collection::vec(any::<u8>(), 0..300),
        limit in prop_oneof![0usize..400, Just(usize::MAX)],
    ) {
        check_frame(&body, limit)?;
    }

    #[test]
    fn grpc_decode_never_panics_on_well_prefixed_frames(
        body in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        // A right prefix, so the message decoder itself sees the bytes.
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(&body);
        check_frame(&framed, usize::MAX)?;
    }

    #[test]
    fn a_tail_encodes_as_the_whole_message_would(m in mutate_request()) {
        check_encoding(&m)?;
    }

    #[test]
    fn status_messages_survive_percent_encoding(message in any::<String>()) {
        check_percent(&message)?;
    }

    #[test]
    fn grpc_timeouts_parse(n in 0u64..100_000_000, unit in prop::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n'])) {
        let want = match unit {
            'H' => Duration::from_secs(n * 3600),
            'M' => Duration::from_secs(n * 60),
            'S' => Duration::from_secs(n),
            'm' => Duration::from_millis(n),
            'u' => Duration::from_micros(n),
            _ => Duration::from_nanos(n),
        };
        prop_assert_eq!(grpc::parse_timeout(&format!("{n}{unit}")), Some(want));
        // What the gateway sends, it reads back (to the unit it chose).
        let sent = grpc::encode_timeout(want);
        let back = grpc::parse_timeout(sent.to_str().unwrap()).unwrap();
        if want <= Duration::from_secs(99_999_999) {
            prop_assert!(back <= want.max(Duration::from_micros(1)) && want.saturating_sub(back) < Duration::from_secs(1));
        }
    }
}

// ---------------------------------------------------------------------------
// Inputs no random generator is likely to hit.
// ---------------------------------------------------------------------------

#[test]
fn deeply_nested_input_is_refused_without_overflowing_the_stack() {
    for text in [
        "[".repeat(100_000),
        "{".repeat(100_000),
        "- ".repeat(50_000),
        format!("plugins:\n{}", "  - ".repeat(20_000)),
        "a: ".repeat(50_000),
    ] {
        let err = config::parse(&text).expect_err("refused");
        check_config_text(&text).unwrap();
        assert!(!err.problems.is_empty());
    }
    for bytes in [
        "[".repeat(100_000),
        "{\"a\":".repeat(100_000),
        format!("{}{}", "[".repeat(127), "]".repeat(127)),
    ] {
        check_json_bytes(bytes.as_bytes(), bytes.as_bytes()).unwrap();
    }
}

#[test]
fn yaml_alias_bombs_are_refused_quickly() {
    // "Billion laughs": each level holds ten aliases of the one below, and
    // the last is used where the registry reads it (a plugin's hubs).
    let mut bomb = String::from("  a0: &a0 [\"lol\"]\n");
    for i in 1..=9 {
        let row = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("  a{i}: &a{i} [{row}]\n"));
    }
    let text = format!(
        "x-bomb:\n{bomb}plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    hubs: *a9\n"
    );
    let started = Instant::now();
    let err = config::parse(&text).expect_err("refused");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("budget"), "{err}");
    check_config_text(&text).unwrap();
}

// ---------------------------------------------------------------------------
// Bounded fuzz runs: `ROLLOUT_FUZZ_SECONDS` (default 60) each, in parallel.
// ---------------------------------------------------------------------------

/// Runs `test` on values of `strategy` until the time is up; a failure is
/// shrunk to a small input and reported, as in any proptest.
/// `share` divides the test's time between the targets it runs.
fn fuzz_for<S: Strategy>(
    target: &str,
    share: u32,
    strategy: S,
    test: impl Fn(S::Value) -> TestCaseResult,
) {
    let seconds: u64 = std::env::var("ROLLOUT_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let time = Duration::from_secs(seconds) / share;
    let deadline = Instant::now() + time;
    let batch = 1_000;
    let mut cases = 0u64;
    while Instant::now() < deadline {
        // A fresh runner (and random seed) for each batch: a runner counts
        // its successes, and one that has had `cases` runs no more.
        let mut runner = TestRunner::new(ProptestConfig {
            cases: batch,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("{target}: {e}");
        }
        cases += u64::from(batch);
    }
    eprintln!("{target}: {cases} cases in {time:?}, no failure");
}

#[test]
#[ignore = "a bounded fuzz run of ROLLOUT_FUZZ_SECONDS (default 60)"]
fn fuzz_config_text() {
    fuzz_for(
        "config text",
        1,
        prop_oneof![
            ".{0,400}",
            yamlish_text(),
            prop::collection::vec(yamlish_text(), 1..8).prop_map(|t| t.concat()),
        ],
        |text| check_config_text(&text),
    );
}

#[test]
#[ignore = "a bounded fuzz run of ROLLOUT_FUZZ_SECONDS (default 60)"]
fn fuzz_config_documents() {
    fuzz_for("config documents", 1, registry_doc(), |doc| {
        check_registry_doc(&doc)
    });
}

#[test]
#[ignore = "a bounded fuzz run of ROLLOUT_FUZZ_SECONDS (default 60)"]
fn fuzz_config_good_documents() {
    fuzz_for("good config documents", 1, good_doc(), |doc| {
        check_good_doc(&doc)
    });
}

#[test]
#[ignore = "a bounded fuzz run of ROLLOUT_FUZZ_SECONDS (default 60)"]
fn fuzz_small_parsers() {
    fuzz_for(
        "durations, endpoints, codes, names, timeouts",
        1,
        prop_oneof![".{0,40}", duration_text(), endpoint(), code_text()],
        |text| check_small_parsers(&text),
    );
}

#[test]
#[ignore = "a bounded fuzz run of ROLLOUT_FUZZ_SECONDS (default 60)"]
fn fuzz_manifest_json() {
    let bytes = || {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..400),
            json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
            manifest_work().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        ]
    };
    fuzz_for("manifest bytes", 2, (bytes(), bytes()), |(i, o)| {
        check_json_bytes(&i, &o)
    });
    fuzz_for(
        "manifest identity",
        2,
        (
            manifest_work(),
            0usize..4,
            option::weighted(0.8, json_value()),
            json_value(),
        ),
        |(w, f, n, o)| check_identity(&w, f, n, o),
    );
}

#[test]
#[ignore = "a bounded fuzz run of ROLLOUT_FUZZ_SECONDS (default 60)"]
fn fuzz_grpc() {
    let framed = prop::collection::vec(any::<u8>(), 0..600).prop_map(|body| {
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(&body);
        framed
    });
    let encoded = mutate_request().prop_map(|m| grpc::flatten(grpc::encode(&m)).to_vec());
    fuzz_for(
        "grpc frames",
        3,
        (
            prop_oneof![prop::collection::vec(any::<u8>(), 0..600), framed, encoded],
            prop_oneof![0usize..700, Just(usize::MAX)],
        ),
        |(body, limit)| check_frame(&body, limit),
    );
    fuzz_for("grpc encoding", 3, mutate_request(), |m| check_encoding(&m));
    fuzz_for("grpc status messages", 3, any::<String>(), |m| {
        check_percent(&m)
    });
}

// ---------------------------------------------------------------------------
// Regression tests: bugs the properties and the fuzz targets found. One not
// fixed yet is `// run those with `cargo test -p rollout-gateway --test it -- --ignored properties::bug_`
// and drop the `#[ignore]` with the fix.
// ---------------------------------------------------------------------------

#[test]
fn bug_parse_timeout_panics_on_non_ascii() {
    // `value.split_at(value.len() - 1)` splits inside a multi-byte char.
    for text in ["¡", "1é", "10µ"] {
        assert_eq!(grpc::parse_timeout(text), None, "{text:?}");
    }
}

#[test]
fn bug_long_durations_drift_by_a_nanosecond() {
    // 5658710759ms (~65 days) reads back as 5658710.759000001s.
    let d = Duration::from_millis(5_658_710_759);
    assert_eq!(config::parse_duration(&config::format_duration(d)), Ok(d));
}

#[test]
fn bug_an_empty_unknown_key_names_no_place() {
    // Found by the cargo-fuzz `config` target: `"": ~` at the top level.
    let err = config::parse("\"\": \r ~").expect_err("refused");
    for p in &err.problems {
        assert!(!p.path.is_empty(), "a problem that names no place: {p:?}");
    }
}

#[test]
fn bug_huge_fractional_durations_overflow() {
    // (u128::MAX / 1000) us = 340282366920938463463374607431768211000 ns, 455
    // short of u128::MAX; ".999" adds 999 more. Debug: "attempt to add with
    // overflow" (config.rs, the fraction loop); release: Ok(543ns), so
    // `timeout: 340282366920938463463374607431768211.999us` passes as 543 ns.
    for text in [
        "340282366920938463463374607431768211.999us",
        "340282366920938463463374607431768.9999999ms",
    ] {
        assert_eq!(
            config::parse_duration(text),
            Err(rollout_proto::duration::DurationError::TooLarge),
            "{text}"
        );
    }
}

proptest! {
    #![proptest_config(quick())]

    /// Whole parts just under the overflow edge of each unit, any fraction.
    #[test]
        fn bug_durations_at_the_overflow_edge_are_refused(
        unit in prop::sample::select(vec![("ns", 1u128), ("us", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000), ("m", 60_000_000_000), ("h", 3_600_000_000_000)]),
        below in 0u128..3,
        fraction in "[0-9]{1,12}",
    ) {
        let whole = u128::MAX / unit.1 - below;
        let text = format!("{whole}.{fraction}{}", unit.0);
        prop_assert_eq!(config::parse_duration(&text), Err(rollout_proto::duration::DurationError::TooLarge), "{}", text);
    }
}

#[test]
fn a_duplicated_tagged_key_is_reported_by_its_name() {
    // serde-saphyr gives no line for it (a derived struct's duplicate_field
    // error at the top level), so the field's name is the only place.
    let err = config::parse("!x hub: a\nhub: b\n").expect_err("refused");
    assert!(err.to_string().contains("`hub`"), "{err}");
    check_config_text("!x defaults:\r\ndefaults:\r\n").unwrap();
}
