//! The registry file: `config::parse` (YAML, then validation) on any UTF-8
//! text. It must answer with a config or with problems that each say what is
//! wrong and where, and what it accepts must hold together.

#![no_main]

use std::collections::HashSet;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rollout_gateway::config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = config::is_blank(text);
    match config::parse(text) {
        Ok(cfg) => {
            let plugins: HashSet<&str> = cfg.plugins.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(plugins.len(), cfg.plugins.len(), "a plugin twice");
            for p in &cfg.plugins {
                assert!(config::check_dns_subdomain(&p.name).is_ok());
                assert_ne!(p.endpoint.port, 0);
                assert!(!p.policy.timeout.is_zero());
                assert!(p.policy.timeout <= Duration::from_secs(30));
                assert!(p.policy.retry.initial_backoff <= p.policy.retry.max_backoff);
                assert!(p.policy.circuit_breaker.open_for <= p.policy.circuit_breaker.max_open_for);
            }
            for pl in &cfg.pipelines {
                assert!(!pl.plugins.is_empty());
                assert!(!plugins.contains(pl.name.as_str()));
                if cfg.hub.is_none() {
                    assert!(pl.plugins.iter().all(|m| plugins.contains(m.as_str())));
                }
            }
        }
        Err(e) => {
            assert!(!e.problems.is_empty());
            for p in &e.problems {
                assert!(!p.message.trim().is_empty(), "{p:?}");
                // Only a file YAML cannot read at all is reported as a
                // whole, with the line in the message or, where the YAML
                // library has none, the field in backticks.
                assert!(
                    !p.path.is_empty()
                        || (p.message.starts_with("not a valid registry file")
                            && (p.message.contains("line ") || p.message.contains('`'))),
                    "a problem that names no place: {p:?}"
                );
            }
            let _ = e.to_string();
        }
    }
    // The small parsers the validator uses, on the same text.
    let _ = config::parse_duration(text);
    if let Ok(e) = config::parse_endpoint(text) {
        assert_ne!(e.port, 0);
    }
    let _ = config::parse_code(text);
    let _ = config::check_dns_subdomain(text);
});
