package report

import (
	"encoding/csv"
	"io"
	"strconv"
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
func (c *Collector) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	rec := make([]string, len(csvHeader))
	for i := range c.rows {
		rec = c.csvLine(rec[:0], &c.rows[i])
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
	rec = append(rec, c.sources[row.src], c.phases[row.phase], row.id, strconv.FormatBool(ok), c.errKinds[row.errKind],
		f(ms(row.intended)), f(ms(row.sent)))
	for _, m := range []string{"ttft", "tpot", "e2e", "ttft_intended", "e2e_intended", "itl", "icl"} {
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
