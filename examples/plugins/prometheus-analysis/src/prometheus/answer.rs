//! Prometheus's answer to a range query (`/api/v1/query_range`), decoded
//! from its HTTP status and body: the one series a check compares, none,
//! or why not ([`QueryError`]). Pure: bytes in, a value out.

use serde_json::Value;

use super::QueryError;

/// The one series of a range query: its labels and its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The series' labels as PromQL shows them (`{job="web"}`).
    pub labels: String,
    /// `(unix seconds, value)` in time order; values may be NaN or ±Inf.
    pub samples: Vec<(f64, f64)>,
}

/// How much of a body a message quotes, in bytes.
const QUOTED_BYTES: usize = 240;

/// Decodes an answer of HTTP `code` with `body`: `Ok(None)` for an empty
/// result (no series yet), `Ok(Some(series))` for exactly one.
pub fn decode(code: u16, body: &[u8]) -> Result<Option<Series>, QueryError> {
    let parsed = serde_json::from_slice::<Value>(body);
    let ok = (200..300).contains(&code);
    let envelope = match parsed {
        Ok(Value::Object(envelope)) => envelope,
        Ok(_) | Err(_) if !ok => {
            return Err(QueryError::Refused {
                code,
                error_type: None,
                message: quote(body),
            });
        }
        Ok(other) => {
            return Err(QueryError::Malformed(format!(
                "expected a JSON object, found {}",
                short(&other.to_string())
            )));
        }
        Err(e) => {
            return Err(QueryError::Malformed(format!(
                "not JSON ({e}): {}",
                quote(body)
            )));
        }
    };
    let status = envelope.get("status").and_then(Value::as_str);
    if !ok || status == Some("error") {
        return Err(QueryError::Refused {
            code,
            error_type: envelope.get("errorType").and_then(Value::as_str).map(short),
            message: envelope
                .get("error")
                .and_then(Value::as_str)
                .map_or_else(|| quote(body), short),
        });
    }
    if status != Some("success") {
        return Err(QueryError::Malformed(format!(
            "status is {}, not \"success\"",
            envelope
                .get("status")
                .map_or_else(|| "missing".to_owned(), |s| short(&s.to_string()))
        )));
    }
    let data = envelope.get("data").unwrap_or(&Value::Null);
    match data.get("resultType").and_then(Value::as_str) {
        Some("matrix") => {}
        other => {
            return Err(QueryError::Malformed(format!(
                "resultType is {}, not \"matrix\"",
                other.map_or_else(|| "missing".to_owned(), |t| format!("{:?}", short(t)))
            )));
        }
    }
    let Some(result) = data.get("result").and_then(Value::as_array) else {
        return Err(QueryError::Malformed("data.result is not a list".into()));
    };
    match result.as_slice() {
        [] => Ok(None),
        [one] => series(one).map(Some),
        [first, second, ..] => Err(QueryError::ManySeries {
            count: result.len(),
            first: labels(first),
            second: labels(second),
        }),
    }
}

fn series(value: &Value) -> Result<Series, QueryError> {
    let Some(values) = value.get("values").and_then(Value::as_array) else {
        return Err(QueryError::Malformed(
            "the series has no \"values\" list".into(),
        ));
    };
    let samples = values
        .iter()
        .map(sample)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| QueryError::Malformed("a sample is not [unix seconds, \"value\"]".into()))?;
    Ok(Series {
        labels: labels(value),
        samples,
    })
}

/// `[1700000000.5, "0.99"]`; the value's text as Prometheus writes it
/// (`NaN`, `+Inf`, `-Inf` included).
fn sample(value: &Value) -> Option<(f64, f64)> {
    let [at, text] = value.as_array()?.as_slice() else {
        return None;
    };
    let at = at.as_f64()?;
    let value = text.as_str()?.parse::<f64>().ok()?;
    Some((at, value))
}

/// A series' labels as PromQL writes them, for messages.
fn labels(value: &Value) -> String {
    let Some(metric) = value.get("metric").and_then(Value::as_object) else {
        return "{}".to_owned();
    };
    let pairs: Vec<String> = metric
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str()
                    .map_or_else(|| v.to_string(), |s| format!("{s:?}"))
            )
        })
        .collect();
    short(&format!("{{{}}}", pairs.join(", ")))
}

/// The start of a body, control characters escaped, for a message.
fn quote(body: &[u8]) -> String {
    short(&String::from_utf8_lossy(body))
}

/// A peer's text cut to [`QUOTED_BYTES`] and escaped (the workspace's one
/// cut and escaping of a peer's text).
fn short(text: &str) -> String {
    rollout_wire::escaped(&rollout_wire::cut_to(text, QUOTED_BYTES)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(result: &str) -> String {
        format!(r#"{{"status":"success","data":{{"resultType":"matrix","result":{result}}}}}"#)
    }

    #[test]
    fn one_series_decodes_with_nan_and_inf() {
        let body = matrix(
            r#"[{"metric":{"job":"web"},"values":[[1700000000,"0.5"],[1700000001.5,"NaN"],[1700000003,"+Inf"],[1700000004,"-Inf"]]}]"#,
        );
        let s = decode(200, body.as_bytes()).unwrap().unwrap();
        assert_eq!(s.labels, r#"{job="web"}"#);
        assert_eq!(s.samples[0], (1_700_000_000.0, 0.5));
        assert!(s.samples[1].1.is_nan());
        assert_eq!(s.samples[2].1, f64::INFINITY);
        assert_eq!(s.samples[3].1, f64::NEG_INFINITY);
        assert_eq!(decode(200, matrix("[]").as_bytes()).unwrap(), None);
    }

    #[test]
    fn several_series_are_refused_naming_two() {
        let body = matrix(
            r#"[{"metric":{"c":"a"},"values":[]},{"metric":{"c":"b"},"values":[]},{"metric":{},"values":[]}]"#,
        );
        match decode(200, body.as_bytes()).unwrap_err() {
            QueryError::ManySeries {
                count,
                first,
                second,
            } => assert_eq!(
                (count, first.as_str(), second.as_str()),
                (3, r#"{c="a"}"#, r#"{c="b"}"#)
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_keep_prometheus_s_kind_and_text() {
        let body =
            br#"{"status":"error","errorType":"bad_data","error":"parse error: unexpected }"}"#;
        let e = decode(400, body).unwrap_err();
        assert!(!e.transient());
        assert_eq!(
            e.to_string(),
            "Prometheus answered HTTP 400 (bad_data): parse error: unexpected }"
        );
        // status:error even under 200.
        let body = br#"{"status":"error","errorType":"timeout","error":"query timed out"}"#;
        assert!(decode(200, body).unwrap_err().transient());
        // An HTTP error with a body that is not Prometheus's.
        let e = decode(502, b"<html>Bad Gateway\n</html>").unwrap_err();
        assert!(e.transient());
        assert_eq!(
            e.to_string(),
            "Prometheus answered HTTP 502: <html>Bad Gateway\\n</html>"
        );
    }

    #[test]
    fn a_body_that_is_not_a_range_result_is_malformed() {
        let table = [
            ("garbage", "not JSON"),
            ("[1,2]", "expected a JSON object"),
            (r#"{"data":{}}"#, "status is missing"),
            (r#"{"status":"ok"}"#, "status is \"ok\""),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                "resultType is \"vector\"",
            ),
            (
                r#"{"status":"success","data":{"resultType":"matrix"}}"#,
                "data.result is not a list",
            ),
            (
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}}]}}"#,
                "no \"values\" list",
            ),
            (
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"values":[[1,"x"]]}]}}"#,
                "a sample is not",
            ),
            (
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"values":[[1,2]]}]}}"#,
                "a sample is not",
            ),
        ];
        for (body, says) in table {
            let e = decode(200, body.as_bytes()).unwrap_err();
            assert!(matches!(e, QueryError::Malformed(_)), "{body}: {e:?}");
            assert!(!e.transient());
            assert!(e.to_string().contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn a_long_body_is_quoted_short() {
        let body = "x".repeat(1000);
        let e = decode(500, body.as_bytes()).unwrap_err().to_string();
        assert!(
            e.len() <= "Prometheus answered HTTP 500: ".len() + QUOTED_BYTES,
            "{e}"
        );
        assert!(e.ends_with("bytes cut]"), "{e}");
    }
}
