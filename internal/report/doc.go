// Package report turns per-request records (latency.Record, as bench writes
// them to requests.jsonl) into a latency report: percentiles with bootstrap
// confidence intervals, the decomposition of end-to-end latency into
// stages, SLO verdicts with goodput and attainment, a diagnosis of what is
// wrong and what to do, charts, and a comparison of two runs. bench calls the
// same code for its end-of-run summary, so both always agree.
//
// The work is split by job, in the order a report walks it: LoadConfig
// (config.go); ingest (load.go, shards.go, pipeline.go into the Collector,
// collector.go); analysis (Collector.Report, analysis.go); diagnosis (one
// Rule value per rule, diagnose.go; checks in rules_*.go); rendering per
// format from the Report (text.go, markdown.go, json.go, html.go with
// charts.go, series_out.go; csv.go from the Collector's rows).
//
// The formulas are in docs/metrics.md; the formats and the JSON schema in
// docs/report.md.
//
// It never imports bench, serve, gateway or app: it reads records, whoever
// wrote them (bench, simulate), and runs nothing.
package report
