package report

import (
	"encoding/csv"
	"io"
	"slices"
	"strconv"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// csvHeader lists the per-request CSV columns (docs/report.md).
var csvHeader = []string{
	"source", "phase", "id", "ok", "error_kind", "intended_ms", "sent_ms",
	"ttft_ms", "tpot_ms", "e2e_ms", "ttft_intended_ms", "e2e_intended_ms", "max_itl_ms", "max_stall_ms",
	"input_tokens", "output_tokens", "cached_tokens", "server_split",
	"client_queue_ms", "connect_ms", "send_ms", "gateway_ms", "network_ms", "server_queue_ms",
	"prefill_ms", "decode_ms", "stream_tail_ms", "unattributed_ms", "meets_all_slos",
}

// WriteCSV writes one line per request added so far (warm-up excluded
// unless the options include it): its metrics and stages in milliseconds.
// A value a request does not have is left empty. The CSV is the records'
// numbers, not the report's, so it is written from the collector.
//
// After the fixed columns come the parts of the path the run has (the
// decomposition's, latency.Record.Path), one column each, named
// "path.HOP.STAGE_ms" ("path.app.retrieval_ms", "path.client→server.network_ms",
// "path.unattributed_ms"), in path order: a successful request's value
// (0 when it lacks the part), empty for a failed one.
func (c *Collector) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	keys := c.paths.shown()
	header := slices.Clone(csvHeader)
	col := make([]int, len(c.paths.keys)) // key → column after the fixed ones, +1
	for j, k := range keys {
		header = append(header, "path."+c.paths.keys[k].label()+"_ms")
		col[k] = j + 1
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	rec := make([]string, len(header))
	vals := make([]int64, len(keys))
	for i := range c.rows {
		row := &c.rows[i]
		rec = c.csvLine(rec[:0], row)
		clear(vals)
		c.paths.parts(row, func(k uint16, e2e, _ int64) {
			if col[k] > 0 {
				vals[col[k]-1] += e2e
			}
		})
		for _, v := range vals {
			if row.ok() {
				rec = append(rec, strconv.FormatFloat(ms(v), 'f', 3, 64))
			} else {
				rec = append(rec, "")
			}
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvLine appends one request's CSV fields to rec.
func (c *Collector) csvLine(rec []string, row *row) []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	opt := func(v int64, ok bool) string {
		if !ok {
			return ""
		}
		return f(ms(v))
	}
	ok := row.ok()
	rec = append(rec, c.sources[row.src], c.phases[row.phase], c.id(row), strconv.FormatBool(ok), c.errKinds[row.errKind],
		f(ms(row.intended)), f(ms(row.sent)))
	for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E, latency.TTFTIntended, latency.E2EIntended, latency.ITL, latency.ICL} {
		v, has := metricValue(row, m)
		rec = append(rec, opt(v, ok && has))
	}
	rec = append(rec, strconv.Itoa(int(row.input)), strconv.Itoa(int(row.output)),
		strconv.Itoa(int(row.cached)), strconv.FormatBool(row.hasServer()))
	st := row.stages()
	for k := range nStages {
		// The client queue is known for every request; the rest only for successes.
		rec = append(rec, opt(st[k], k == stCQ || (ok && stageApplies(row, k))))
	}
	return append(rec, strconv.FormatBool(meetsAll(row, c.opts.SLOs)))
}
