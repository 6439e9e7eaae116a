//! `docs/config.schema.json` is the schema generated from the registry's
//! types: a field added to config.yaml without regenerating it fails here.
//! Regenerate with
//! `ROLLOUT_WRITE_SCHEMA=1 cargo test -p rollout-gateway --test it -- schema::`.

use std::path::PathBuf;

fn committed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/config.schema.json")
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let generated = rollout_gateway::config::json_schema();
    let path = committed();
    if std::env::var_os("ROLLOUT_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} is out of date: regenerate it with \
         ROLLOUT_WRITE_SCHEMA=1 cargo test -p rollout-gateway --test it -- schema::",
        path.display()
    );
}

#[test]
fn the_schema_names_every_field_and_refuses_others() {
    let schema: serde_json::Value =
        serde_json::from_str(&rollout_gateway::config::json_schema()).unwrap();
    let top = schema["properties"].as_object().unwrap();
    for key in [
        "hub",
        "clientCertificate",
        "defaults",
        "plugins",
        "pipelines",
    ] {
        assert!(top.contains_key(key), "no {key} in {schema:#}");
    }
    assert_eq!(schema["additionalProperties"], false, "{schema:#}");
    let plugin = &schema["$defs"]["RawPlugin"];
    let fields = plugin["properties"].as_object().unwrap();
    // The policy fields sit on the plugin itself.
    for key in [
        "name",
        "endpoint",
        "caCertificate",
        "insecure",
        "timeout",
        "retry",
    ] {
        assert!(fields.contains_key(key), "no {key} in {plugin:#}");
    }
}
