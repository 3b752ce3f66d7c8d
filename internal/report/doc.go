// Package report turns per-request records (latency.Record, as bench writes
// them to requests.jsonl) into a latency report: percentiles with bootstrap
// confidence intervals, the decomposition of end-to-end latency into
// stages, SLO verdicts with goodput and attainment, a diagnosis of what is
// wrong and what to do, charts, and a comparison of two runs. bench calls the
// same code for its end-of-run summary, so both always agree.
//
// The work is split by job: ingest (Collector, Load: records to compact
// rows), analysis (Collector.Report: rows to the plain-data Report,
// including the data its charts are drawn from), diagnosis (the rules, over
// the rows and the Report) and rendering (text, markdown, JSON and HTML from
// the Report alone; CSV from the Collector's rows).
//
// The formulas are in docs/metrics.md; the formats and the JSON schema in
// docs/report.md.
//
// It never imports bench, serve, gateway or app: it reads records, whoever
// wrote them (bench, simulate), and runs nothing.
package report
