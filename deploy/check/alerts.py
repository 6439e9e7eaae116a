"""The alerting rules of a PrometheusRule, checked against what the binaries
really export (used by check.py).

- `promtool check rules` on the rule groups (syntax, PromQL, templates);
- every metric an alert's expression selects must have series in a real
  scrape (the gateway's /metrics after a rollout through it, the metrics of
  `rollout-controller simulate --metrics`), every label it matches on or
  groups by must be a label of those series: a typo in a metric or label
  name fails;
- `promtool test rules` with those scraped series as input: each selector
  finds them (`absent(...)` is empty) and each alert's whole expression
  evaluates without error;
- every alert has a `summary`, a `description` and a `runbook_url` naming a
  heading of the repository's own docs (`docs/observability.md#anchor`).

The PromQL is read by a small tokenizer (selectors, label matchers and the
label lists of by/without/on/ignoring/group_left/group_right), enough for
the expressions of deploy/overlays/monitoring; promtool judges the syntax.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# promtool, from Debian's prometheus package when not on PATH: the one
# fetch of it, shared with the tests that run a real Prometheus.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "test-support" / "prometheus"))
import debian as prometheus_debian  # noqa: E402

KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan", "start", "end", "atan2",
    # Aggregations, which may come before their `by (...)`.
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Selector:
    metric: str
    matchers: list[tuple[str, str, str]] = field(default_factory=list)

    def promql(self) -> str:
        inner = ",".join(f'{k}{op}{json.dumps(v)}' for k, op, v in self.matchers)
        return f"{self.metric}{{{inner}}}" if inner else self.metric


@dataclass
class Expression:
    selectors: list[Selector]
    labels: set[str]


def parse_expr(expr: str) -> Expression:
    """The selectors and grouping labels of a PromQL expression."""
    text = re.sub(r"#[^\n]*", "", expr)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    selectors: list[Selector] = []
    labels: set[str] = set()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "\"'`":
            end = text.index(ch, i + 1)
            while text[end - 1] == "\\":
                end = text.index(ch, end + 1)
            i = end + 1
            continue
        if ch.isdigit() or (ch == "." and text[i + 1:i + 2].isdigit()):
            number = re.match(r"[0-9.eE+xXa-fA-F_]+[smhdwy]*", text[i:])
            i += number.end() if number else 1
            continue
        ident = IDENT.match(text, i)
        if not ident:
            i += 1
            continue
        word = ident.group(0)
        j = ident.end()
        rest = text[j:].lstrip()
        j += len(text[j:]) - len(rest)
        if word in LABEL_LISTS and rest.startswith("("):
            close = text.index(")", j)
            labels.update(IDENT.findall(text[j + 1:close]))
            i = close + 1
        elif rest.startswith("(") or word.lower() in KEYWORDS:
            i = j
        else:
            selector = Selector(word)
            if rest.startswith("{"):
                close = j + 1
                while True:
                    m = MATCHER.match(text, close)
                    if not m:
                        break
                    selector.matchers.append((m.group(1), m.group(2), m.group(3)))
                    close = m.end()
                if text[close:close + 1] != "}":
                    raise ValueError(f"cannot read the label matchers of {word} at {text[j:j + 40]!r}")
                j = close + 1
            selectors.append(selector)
            i = j
    return Expression(selectors, labels)


@dataclass
class Scrape:
    """Samples and declared families of one /metrics text; for a live
    /metrics, also its Prometheus text (0.0.4), for `promtool check
    metrics`."""
    what: str
    samples: list[tuple[str, dict[str, str], float]]
    families: dict[str, str]
    prometheus_text: str = ""

    def series(self, metric: str) -> list[dict[str, str]]:
        return [labels for name, labels, _ in self.samples if name == metric]


def parse_scrape(what: str, text: str) -> Scrape:
    samples, families = [], {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                families[parts[2]] = parts[3]
            continue
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m:
            labels = {k: v for k, v in LABEL.findall(m.group(2) or "")}
            samples.append((m.group(1), labels, float(m.group(3))))
    return Scrape(what, samples, families)


# What Prometheus 2.x asks /metrics for: OpenMetrics first.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def scrape_live(report, what: str, url: str) -> Scrape:
    """A live /metrics, asked for as Prometheus asks (OpenMetrics, the
    samples of the returned Scrape) and as curl does (the Prometheus text):
    each answer must name its format."""
    import urllib.request

    def get(accept: str | None) -> tuple[str, str]:
        request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.headers.get("Content-Type", ""), resp.read().decode()

    om_type, om = get(PROMETHEUS_ACCEPT)
    text_type, text = get(None)
    report.check(om_type == OPENMETRICS_TYPE and om.endswith("# EOF\n"),
                 f"{what}: OpenMetrics when asked as Prometheus asks (got {om_type!r})")
    report.check(text_type == PROMETHEUS_TYPE and "# EOF" not in text,
                 f"{what}: the Prometheus text without Accept (got {text_type!r})")
    scrape = parse_scrape(what, om)
    scrape.prometheus_text = text
    return scrape


def promtool_lint(scrape: Scrape, promtool: str) -> tuple[bool, str]:
    """`promtool check metrics` on a live scrape's Prometheus text."""
    got = subprocess.run([promtool, "check", "metrics"], input=scrape.prometheus_text,
                         capture_output=True, text=True, timeout=120)
    return got.returncode == 0, (got.stdout + got.stderr).strip()


def rules_of(rule_obj: dict) -> list[dict]:
    """Every rule of every group, alerting and recording."""
    return [r for g in ((rule_obj.get("spec") or {}).get("groups") or [])
            for r in g.get("rules") or [] if r.get("alert") or r.get("record")]


def alerts_of(rule_obj: dict) -> list[dict]:
    return [r for r in rules_of(rule_obj) if r.get("alert")]


def rule_name(rule: dict) -> str:
    return rule.get("alert") or rule.get("record")


def recorded_of(rule_obj: dict) -> dict[str, Expression]:
    """The series the recording rules write, each with its expression (a
    recorded series has no scrape: what it selects is checked instead)."""
    recorded = {}
    for rule in rules_of(rule_obj):
        if rule.get("record"):
            try:
                recorded[rule["record"]] = parse_expr(str(rule.get("expr", "")))
            except (ValueError, IndexError):
                continue  # check_names reports it
    return recorded


def check_names(report, rule_obj: dict, scrapes: list[Scrape]) -> list[tuple[str, Expression]]:
    """Every selector of every rule names series that a scrape has (or that a
    recording rule of the same object writes), with the labels it matches and
    groups by; returns the parsed expressions."""
    parsed = []
    recorded = recorded_of(rule_obj)
    for rule in rules_of(rule_obj):
        name = rule_name(rule)
        what = f"alert {name}" if rule.get("alert") else f"recording rule {name}"
        try:
            expr = parse_expr(str(rule.get("expr", "")))
        except (ValueError, IndexError) as err:
            report.fail(f"{what}: its expression can be read ({err})")
            continue
        parsed.append((name, expr))
        report.check(bool(expr.selectors), f"{what} selects at least one metric")
        known_labels: set[str] = set()
        for selector in expr.selectors:
            inputs = recorded[selector.metric].selectors if selector.metric in recorded else [selector]
            for source_selector in inputs:
                source = next((s for s in scrapes if s.series(source_selector.metric)), None)
                if source is None:
                    report.fail(f"{what}: {source_selector.metric} has series in a real scrape "
                                f"({', '.join(s.what for s in scrapes)}); no such metric")
                    continue
                names = set().union(*(set(labels) for labels in source.series(source_selector.metric)))
                known_labels |= names
                matchers = selector.matchers if source_selector is selector else []
                for label, _, _ in matchers:
                    report.check(label in names,
                                 f"{what}: {selector.metric} has a label {label!r} "
                                 f"(the {source.what} exports {sorted(names)})")
        if expr.selectors:
            for label in sorted(expr.labels):
                report.check(label in known_labels,
                             f"{what}: it groups or matches on {label!r}, a label of "
                             f"the metrics it selects (they have {sorted(known_labels)})")
    return parsed


def series_line(name: str, labels: dict[str, str]) -> str:
    # An empty label is no label to Prometheus.
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()) if v)
    return f"{name}{{{inner}}}"


def promtool_test(rule_obj: dict, parsed: list[tuple[str, Expression]], scrapes: list[Scrape],
                  promtool: str, workdir: Path) -> tuple[bool, str]:
    """`promtool test rules` over the scraped series: every selector finds
    series, every alert expression evaluates. (ok, promtool's output)."""
    import yaml
    steps = 30
    input_series = []
    for scrape in scrapes:
        for name, labels, value in scrape.samples:
            if name.endswith("_created"):
                continue
            family_type = next((t for f, t in scrape.families.items()
                                if name == f or name.startswith(f + "_")), "")
            counter = family_type in ("counter", "histogram", "summary")
            values = f"0+{value!r}x{steps}" if counter else f"{value!r}x{steps}"
            input_series.append({"series": series_line(name, labels), "values": values})
    tests = []
    # A recorded series exists only once its rule has something to record
    # (the events a rule timestamps): its inputs are checked instead.
    seen = set(recorded_of(rule_obj))
    by_name = {rule_name(r): r for r in rules_of(rule_obj)}
    for name, expr in parsed:
        for selector in expr.selectors:
            if selector.metric in seen:
                continue
            seen.add(selector.metric)
            tests.append({"expr": f"absent({selector.metric})", "eval_time": f"{steps - 5}m",
                          "exp_samples": []})
        rule = by_name[name]
        tests.append({"expr": f"clamp_max(count(({rule['expr']}) or on() vector(0)), 1)",
                      "eval_time": f"{steps - 5}m",
                      "exp_samples": [{"labels": "{}", "value": 1}]})
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": (rule_obj.get("spec") or {}).get("groups") or []}))
    test = workdir / "test.yaml"
    test.write_text(yaml.safe_dump({
        "rule_files": [rules.name], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": tests}],
    }, sort_keys=False))
    got = subprocess.run([promtool, "test", "rules", test.name], cwd=workdir,
                         capture_output=True, text=True, timeout=120)
    return got.returncode == 0, (got.stdout + got.stderr).strip()


def promtool_check(rule_obj: dict, promtool: str, workdir: Path) -> tuple[bool, str]:
    import yaml
    rules = workdir / "check-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": (rule_obj.get("spec") or {}).get("groups") or []}))
    got = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=120)
    return got.returncode == 0, (got.stdout + got.stderr).strip()


def find_promtool() -> tuple[str | None, str]:
    """promtool on PATH, else from Debian's `prometheus` package unpacked
    into the tests' shared Prometheus cache (test-support/prometheus/
    debian.py: apt-get download and dpkg-deb -x, no daemon installed or
    started). (path or None, what happened)."""
    return prometheus_debian.find("promtool")


def rule_tests(report, rule_obj: dict, tests: list[Path], promtool: str, workdir: Path) -> int:
    """`promtool test rules` on each hand-written test of deploy/check/
    rule-tests (series that no real scrape shows: no controller at all, a
    rejected registry kept for hours). Each names `rules.yaml`, which is
    written here from the PrometheusRule. Returns how many ran."""
    import yaml
    name = (rule_obj.get("metadata") or {}).get("name")
    (workdir / "rules.yaml").write_text(
        yaml.safe_dump({"groups": (rule_obj.get("spec") or {}).get("groups") or []}))
    for test in tests:
        # Copied as text: a YAML round trip would read `0x30` as a number.
        shutil.copyfile(test, workdir / test.name)
        got = subprocess.run([promtool, "test", "rules", test.name], cwd=workdir,
                             capture_output=True, text=True, timeout=120)
        out = (got.stdout + got.stderr).strip()
        report.check(got.returncode == 0,
                     f"PrometheusRule {name}: promtool test rules {test.name}\n      {out[-3000:]}")
    return len(tests)


def heading_anchors(markdown: str) -> set[str]:
    """The anchors a Markdown file's headings get, as GitHub spells them:
    lower case, punctuation dropped, spaces as hyphens (no numbering of
    repeated headings: the runbook's are unique)."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match.group(1).lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def check_annotations(report, rule_obj: dict, root: Path) -> None:
    """Every alert says what it means and what to do (`summary`,
    `description`) and where its runbook is (`runbook_url`: a file of the
    repository, relative to `root`, and one of its headings)."""
    for rule in alerts_of(rule_obj):
        what = f"alert {rule['alert']}"
        annotations = rule.get("annotations") or {}
        for key in ("summary", "description", "runbook_url"):
            report.check(bool(str(annotations.get(key) or "").strip()), f"{what} has a {key} annotation")
        url = str(annotations.get("runbook_url") or "")
        if not url:
            continue
        path, _, anchor = url.partition("#")
        target = (root / path).resolve()
        inside = bool(path) and "://" not in url and target.is_relative_to(root.resolve())
        if not report.check(inside and target.is_file(),
                            f"{what}: runbook_url {url!r} names a file of the repository"):
            continue
        report.check(bool(anchor) and anchor in heading_anchors(target.read_text()),
                     f"{what}: runbook_url {url!r} names a heading of {path}")


def check_rules(report, rule_obj: dict, scrapes: list[Scrape], promtool: str, workdir: Path) -> str:
    """All of the above but the annotations (check_annotations) for one
    PrometheusRule; a summary."""
    name = (rule_obj.get("metadata") or {}).get("name")
    ok, out = promtool_check(rule_obj, promtool, workdir)
    report.check(ok, f"PrometheusRule {name}: promtool check rules\n      {out}")
    parsed = check_names(report, rule_obj, scrapes)
    ok, out = promtool_test(rule_obj, parsed, scrapes, promtool, workdir)
    report.check(ok, f"PrometheusRule {name}: promtool test rules over the scraped series\n      {out[-3000:]}")
    samples = sum(len(s.samples) for s in scrapes)
    return (f"{len(alerts_of(rule_obj))} alerts and {len(recorded_of(rule_obj))} recording rules "
            f"checked by promtool against {samples} scraped samples")
