package simulate

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
	"github.com/tokentrace/tokentrace/internal/workload/workloadtest"
)

// h100 is Llama-3.1-8B on one H100 priced by the performance model.
func h100(t testing.TB) engine.Config {
	t.Helper()
	ec, _, err := engine.PerfConfig(engine.Config{MaxModelLen: 16384}, "Llama-3.1-8B", "H100-SXM", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ec
}

func synthetic(in, out int) *workload.Synthetic {
	return &workload.Synthetic{Chat: true, Input: workload.Fixed(in), Output: workload.Fixed(out), Turns: 1, PrefixGroups: 1, Seed: 1}
}

// collect runs cfg and returns its records in emission order.
func collect(t testing.TB, cfg Config) ([]*latency.Record, *Result) {
	t.Helper()
	var recs []*latency.Record
	res, err := Run(cfg, func(r *latency.Record) { recs = append(recs, r) })
	if err != nil {
		t.Fatal(err)
	}
	return recs, res
}

func TestDeterministicForASeed(t *testing.T) {
	cfg := Config{Engine: h100(t), Replicas: 3, Balancer: route.NameQueueAware, Workload: synthetic(500, 80),
		Load: workload.Load{Rate: 40, Arrival: workload.Poisson, Requests: 300, Seed: 7}, Steps: true}
	cfg.Engine.Seed = 7
	a, ra := collect(t, cfg)
	b, rb := collect(t, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of one configuration differ (-first +second):\n%s", cmp.Diff(a, b))
	}
	if !reflect.DeepEqual(ra, rb) {
		t.Fatalf("results differ:\n%s", cmp.Diff(ra, rb))
	}
	// Recycled records, copied as they are emitted, are the same records.
	cfg.RecycleRecords = true
	var copies []*latency.Record
	if _, err := Run(cfg, func(r *latency.Record) {
		c := *r
		c.ChunkNS = slices.Clone(r.ChunkNS)
		if r.Server != nil {
			sp := *r.Server
			c.Server = &sp
		}
		copies = append(copies, &c)
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, copies) {
		t.Fatalf("recycled records differ:\n%s", cmp.Diff(a, copies))
	}
	cfg.RecycleRecords = false
	cfg.Load.Seed = 8
	c, _ := collect(t, cfg)
	if reflect.DeepEqual(a, c) {
		t.Fatal("another seed gave the same records")
	}
}

func TestRecordsCarryTheServerSplit(t *testing.T) {
	const net = 3 * time.Millisecond
	recs, res := collect(t, Config{Engine: h100(t), Workload: synthetic(1000, 20), IgnoreEOS: true, Model: "m", Network: net,
		Load: workload.Load{Rate: 5, Arrival: workload.Constant, Requests: 10}})
	if len(recs) != 10 || res.Succeeded != 10 || res.Sent != 10 || recs[0].Schema != latency.RecordSchema {
		t.Fatalf("%d records, result %+v", len(recs), res)
	}
	for _, r := range recs {
		sp := r.Server
		if !r.OK() || sp == nil || sp.Source != SplitSource || r.Model != "m" || r.Status != 200 {
			t.Fatalf("record %+v", r)
		}
		// The client's first token is the server's Network later; the
		// request reached the server Network after it was sent.
		if got := r.FirstTokenNS - r.SentNS; got != int64(2*net)+sp.QueueNS+sp.PrefillNS {
			t.Errorf("%s: TTFT %d ≠ 2 × network + queue %d + prefill %d", r.ID, got, sp.QueueNS, sp.PrefillNS)
		}
		if r.EndNS-r.FirstTokenNS != sp.DecodeNS {
			t.Errorf("%s: client decode %d ≠ server decode %d", r.ID, r.EndNS-r.FirstTokenNS, sp.DecodeNS)
		}
		if r.OutputTokens != 20 || len(r.ChunkNS) != 20 || r.ChunkNS[0] != r.FirstTokenNS || r.ChunkNS[19] != r.EndNS {
			t.Errorf("%s: %d tokens in %d chunks", r.ID, r.OutputTokens, len(r.ChunkNS))
		}
		if r.InputTokens != 1000 || r.InputSource != latency.SourceUsage || r.FinishReason != "length" {
			t.Errorf("%s: input %d (%s), finish %q", r.ID, r.InputTokens, r.InputSource, r.FinishReason)
		}
	}
	// Constant arrivals every 200 ms.
	if recs[3].IntendedNS != int64(600*time.Millisecond) || recs[3].SentNS != recs[3].IntendedNS {
		t.Errorf("fourth request meant for %d, sent %d", recs[3].IntendedNS, recs[3].SentNS)
	}
}

// With NetworkSample each request draws its own one-way latency and takes
// it both ways: its TTFT at the client is twice its draw plus the server's
// queue and prefill, and its last token reaches the client its draw after
// the step that made it. The draws cover the sample and follow NetworkSeed.
func TestNetworkSampleDrawsPerRequest(t *testing.T) {
	sample := []time.Duration{time.Millisecond, 4 * time.Millisecond, 9 * time.Millisecond}
	run := func(seed uint64) []time.Duration {
		recs, _ := collect(t, Config{Engine: h100(t), Workload: synthetic(1000, 20), IgnoreEOS: true, Model: "m",
			Network: 100 * time.Millisecond, NetworkSample: sample, NetworkSeed: seed,
			Load: workload.Load{Rate: 5, Arrival: workload.Constant, Requests: 30}})
		slices.SortFunc(recs, func(a, b *latency.Record) int { return int((a.IntendedNS - b.IntendedNS) / int64(time.Millisecond)) })
		var drawn []time.Duration
		for _, r := range recs {
			sp := r.Server
			twice := time.Duration(r.FirstTokenNS - r.SentNS - sp.QueueNS - sp.PrefillNS)
			if twice%2 != 0 || !slices.Contains(sample, twice/2) {
				t.Fatalf("%s: TTFT less queue and prefill %v: not twice a latency of the sample %v", r.ID, twice, sample)
			}
			if r.EndNS-r.FirstTokenNS != sp.DecodeNS {
				t.Errorf("%s: client decode %d ≠ server decode %d", r.ID, r.EndNS-r.FirstTokenNS, sp.DecodeNS)
			}
			drawn = append(drawn, twice/2)
		}
		return drawn
	}
	a, b := run(1), run(2)
	for _, d := range sample {
		if !slices.Contains(a, d) {
			t.Errorf("30 requests never drew %v: %v", d, a)
		}
	}
	if diff := cmp.Diff(a, run(1)); diff != "" {
		t.Errorf("seed 1 drew differently on a second run (-first +second):\n%s", diff)
	}
	if slices.Equal(a, b) {
		t.Errorf("seeds 1 and 2 drew the same latencies %v", a)
	}
}

func TestClosedLoopKeepsNInFlight(t *testing.T) {
	const n, total = 8, 200
	recs, _ := collect(t, Config{Engine: h100(t), Workload: &workload.Synthetic{Chat: true,
		Input: workload.Uniform{Lo: 100, Hi: 3000}, Output: workload.Uniform{Lo: 10, Hi: 300}, Turns: 1, PrefixGroups: 1, Seed: 3},
		IgnoreEOS: true, Load: workload.Load{Concurrency: n, Requests: total}})
	if len(recs) != total {
		t.Fatalf("%d records, want %d", len(recs), total)
	}
	// Never more than n in flight: sweep the [sent, end) intervals.
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	var sends, ends []int64
	for _, r := range recs {
		edges = append(edges, edge{r.SentNS, +1}, edge{r.EndNS, -1})
		sends = append(sends, r.SentNS)
		ends = append(ends, r.EndNS)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // ends before sends at one instant
	})
	inFlight, most := 0, 0
	for _, e := range edges {
		inFlight += e.delta
		most = max(most, inFlight)
	}
	if most != n {
		t.Errorf("at most %d in flight, want exactly %d", most, n)
	}
	// Each completion releases exactly one request: after the first n
	// sends at 0, the send instants are the first total − n end instants.
	slices.Sort(sends)
	slices.Sort(ends)
	if sends[n-1] != 0 || sends[n] == 0 {
		t.Fatalf("sends at the start: %v", sends[:n+1])
	}
	if diff := cmp.Diff(ends[:total-n], sends[n:]); diff != "" {
		t.Errorf("sends after the start are not the completions (-ends +sends):\n%s", diff)
	}
}

func TestClosedLoopDurationStopsNewSessions(t *testing.T) {
	recs, res := collect(t, Config{Engine: h100(t), Workload: synthetic(200, 50), IgnoreEOS: true,
		Load: workload.Load{Concurrency: 4, Duration: 10 * time.Second}})
	last := int64(0)
	for _, r := range recs {
		if r.SentNS >= int64(10*time.Second) {
			t.Fatalf("%s sent at %v, after the 10 s duration", r.ID, time.Duration(r.SentNS))
		}
		last = max(last, r.EndNS)
	}
	if len(recs) < 50 || res.End != time.Duration(last) || last < int64(10*time.Second) {
		t.Errorf("%d records, end %v (last %v)", len(recs), res.End, time.Duration(last))
	}
}

func TestSessionsWaitThinkTimeAfterEachTurn(t *testing.T) {
	const think = 2 * time.Second
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(300), Output: workload.Fixed(40), Turns: 3, Think: think, PrefixGroups: 1, Seed: 5}
	recs, _ := collect(t, Config{Engine: h100(t), Workload: src, IgnoreEOS: true, Network: time.Millisecond,
		Load: workload.Load{Rate: 4, Arrival: workload.Poisson, Requests: 60, Seed: 5}})
	bySession := map[int64][]*latency.Record{}
	for _, r := range recs {
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	checked := 0
	for s, turns := range bySession {
		slices.SortFunc(turns, func(a, b *latency.Record) int { return a.Turn - b.Turn })
		for k := 1; k < len(turns); k++ {
			prev, cur := turns[k-1], turns[k]
			if cur.Turn != prev.Turn+1 {
				t.Fatalf("session %d: turn %d after %d", s, cur.Turn, prev.Turn)
			}
			if cur.IntendedNS != prev.EndNS+int64(think) {
				t.Errorf("session %d turn %d meant for %v; previous ended %v, + think %v", s, cur.Turn,
					time.Duration(cur.IntendedNS), time.Duration(prev.EndNS), think)
			}
			// Each turn resends the history: more input than the last.
			if cur.InputTokens <= prev.InputTokens+prev.OutputTokens {
				t.Errorf("session %d turn %d: input %d after %d + %d", s, cur.Turn, cur.InputTokens, prev.InputTokens, prev.OutputTokens)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Fatalf("only %d follow-up turns checked", checked)
	}
}

func TestOpenLoopCapHoldsRequests(t *testing.T) {
	recs, _ := collect(t, Config{Engine: h100(t), Workload: synthetic(2000, 200), IgnoreEOS: true,
		Load: workload.Load{Rate: 100, Arrival: workload.Constant, Concurrency: 3, Requests: 30}})
	held := 0
	for _, r := range recs {
		if r.SentNS > r.IntendedNS {
			held++
		}
	}
	if held == 0 {
		t.Fatal("no request was held by a cap of 3 at 100 req/s of 2 s answers")
	}
	// The cap's client queue counts in TTFT from the intended send only.
	for _, r := range recs {
		a, _ := r.TTFT()
		b, _ := r.TTFTIntended()
		if b-a != r.ClientQueue() {
			t.Fatalf("%s: TTFT %v, intended %v, client queue %v", r.ID, a, b, r.ClientQueue())
		}
	}
}

func TestWarmupMarksTheFirstRequests(t *testing.T) {
	recs, _ := collect(t, Config{Engine: h100(t), Workload: synthetic(100, 10),
		Load: workload.Load{Rate: 10, Arrival: workload.Constant, Requests: 10, WarmupRequests: 4}})
	warm := 0
	for _, r := range recs {
		if r.Warmup {
			warm++
			if r.IntendedNS >= int64(400*time.Millisecond) {
				t.Errorf("%s at %v marked warm-up", r.ID, time.Duration(r.IntendedNS))
			}
		}
	}
	if len(recs) != 14 || warm != 4 {
		t.Errorf("%d records, %d warm-up; want 14 and 4", len(recs), warm)
	}
}

// prefixHitRate is the replicas' prefix-cache hits over queries.
func prefixHitRate(res *Result) float64 {
	var q, h int64
	for _, r := range res.Replicas {
		q += r.Stats.PrefixQueries
		h += r.Stats.PrefixHits
	}
	return float64(h) / float64(q)
}

func TestPrefixAffinityRaisesPrefixHits(t *testing.T) {
	// 15 system prompts of 2,000 tokens; each replica's KV cache (24,000
	// tokens) holds the requests in flight and about 9 prefixes: enough for
	// the groups prefix affinity sends it, not for all 15.
	ec := h100(t)
	ec.EnablePrefixCaching = true
	ec.NumBlocks = 1500
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(2500), Output: workload.Fixed(30), PrefixTokens: 2000,
		PrefixGroups: 15, Turns: 1, Seed: 2}
	run := func(router string) (*Result, []*latency.Record) {
		recs, res := collect(t, Config{Engine: ec, Replicas: 4, Balancer: router, Workload: src, IgnoreEOS: true,
			Load: workload.Load{Rate: 30, Arrival: workload.Poisson, Requests: 600, Seed: 2}})
		return res, recs
	}
	rr, rrRecs := run(route.NameRoundRobin)
	pa, paRecs := run(route.NamePrefixAffinity)
	hr, ha := prefixHitRate(rr), prefixHitRate(pa)
	t.Logf("prefix-cache hit rate: round robin %.3f, prefix affinity %.3f", hr, ha)
	if ha < hr+0.3 {
		t.Errorf("prefix affinity hit rate %.3f, not clearly above round robin's %.3f", ha, hr)
	}
	// Prefix affinity keeps each group on few replicas; round robin spreads them.
	cached := func(recs []*latency.Record) (n int) {
		for _, r := range recs {
			n += r.CachedTokens
		}
		return n
	}
	if cached(paRecs) <= cached(rrRecs) {
		t.Errorf("cached tokens: prefix affinity %d, round robin %d", cached(paRecs), cached(rrRecs))
	}
}

func TestLengthPoolsSeparateLongPrompts(t *testing.T) {
	src := &workload.Synthetic{Chat: true, Input: workload.Uniform{Lo: 100, Hi: 8000}, Output: workload.Fixed(20), Turns: 1, PrefixGroups: 1, Seed: 4}
	recs, res := collect(t, Config{Engine: h100(t), Pools: []Pool{{MaxInputTokens: 2048, Replicas: 2}, {Replicas: 1}},
		Workload: src, IgnoreEOS: true, Steps: true, Load: workload.Load{Rate: 20, Arrival: workload.Poisson, Requests: 300, Seed: 4}})
	if len(res.Replicas) != 3 || res.Replicas[2].Pool != 1 {
		t.Fatalf("replicas %+v", res.Replicas)
	}
	short := 0
	for _, r := range recs {
		if r.InputTokens <= 2048 {
			short++
		}
	}
	if got := res.Replicas[0].Requests + res.Replicas[1].Requests; got != short {
		t.Errorf("the short pool took %d requests; %d have at most 2048 input tokens", got, short)
	}
	for _, st := range res.Replicas[0].Steps {
		if st.PrefillTokens > 0 && st.PrefillTokens > 2048*st.Seqs {
			t.Fatalf("a short-pool step computed %d prompt tokens", st.PrefillTokens)
		}
	}
}

func TestQueueAwareReadsScrapedFigures(t *testing.T) {
	// One replica half the others' speed would be avoided by queue_aware
	// only through its reported queue; here all are equal, so the check is
	// that scraping happens on the virtual clock and routing stays even.
	_, res := collect(t, Config{Engine: h100(t), Replicas: 4, Balancer: route.NameQueueAware, ScrapeInterval: 500 * time.Millisecond,
		Workload: synthetic(1000, 100), IgnoreEOS: true, Load: workload.Load{Rate: 60, Arrival: workload.Poisson, Requests: 800, Seed: 1}})
	for _, r := range res.Replicas {
		if r.Requests < 150 || r.Requests > 250 {
			t.Errorf("%s took %d of 800 requests", r.Name, r.Requests)
		}
	}
}

func TestAdmissionBoundsWhatReachesTheEngine(t *testing.T) {
	cfg := Config{Engine: h100(t), Workload: synthetic(1000, 100), IgnoreEOS: true, Steps: true,
		Admission: &Admission{Limits: route.Limits{Concurrency: 4, MaxSize: 20}.WithDefaults()},
		Load:      workload.Load{Rate: 200, Arrival: workload.Constant, Requests: 200}}
	recs, res := collect(t, cfg)
	for _, st := range res.Replicas[0].Steps {
		if st.Running+st.Waiting > 4 {
			t.Fatalf("step at %v: %d running + %d waiting past the admission limit of 4", st.Start, st.Running, st.Waiting)
		}
	}
	refused, queued := 0, 0
	for _, r := range recs {
		switch {
		case r.ErrorKind == latency.FailRateLimited:
			refused++
			if r.Status != 429 || !strings.Contains(r.Error, "queue is full") {
				t.Fatalf("refusal %+v", r)
			}
		case r.GatewayNS > 0:
			queued++
		}
	}
	if refused == 0 || queued == 0 || res.Rejected != refused {
		t.Errorf("%d refused (result %d), %d queued at the router", refused, res.Rejected, queued)
	}
}

func TestEarlyRejectRefusesHopelessDeadlines(t *testing.T) {
	cfg := Config{Engine: h100(t), Workload: synthetic(1000, 200), IgnoreEOS: true,
		Admission: &Admission{Limits: route.Limits{Concurrency: 2}.WithDefaults(), DeadlineTTFT: 500 * time.Millisecond, EarlyReject: true},
		Load:      workload.Load{Rate: 40, Arrival: workload.Constant, Requests: 100}}
	recs, _ := collect(t, cfg)
	var early, expired, ok int
	for _, r := range recs {
		switch {
		case strings.Contains(r.Error, route.ErrDeadline.Error()):
			early++
		case strings.Contains(r.Error, route.ErrDeadlineExpired.Error()):
			expired++
		case r.OK():
			ok++
			if ttft, _ := r.TTFT(); ttft > time.Second {
				t.Errorf("%s served with TTFT %v", r.ID, ttft)
			}
		}
	}
	if early == 0 || ok == 0 {
		t.Errorf("%d refused early, %d expired in the queue, %d served", early, expired, ok)
	}
}

func TestEngineQueueBoundAndLengthErrors(t *testing.T) {
	ec := h100(t)
	ec.MaxWaiting = 2
	ec.MaxModelLen = 4096
	src := &workload.Synthetic{Chat: true, Input: workload.Uniform{Lo: 100, Hi: 5000}, Output: workload.Fixed(50), Turns: 1, PrefixGroups: 1, Seed: 9}
	recs, _ := collect(t, Config{Engine: ec, Workload: src, IgnoreEOS: true, QueueFullStatus: 503,
		Load: workload.Load{Rate: 400, Arrival: workload.Constant, Requests: 300}})
	kinds := map[latency.ErrorKind]int{}
	for _, r := range recs {
		kinds[r.ErrorKind]++
		if r.ErrorKind == latency.FailHTTP4xx && (r.Status != 400 || !strings.Contains(r.Error, "maximum context length")) {
			t.Fatalf("length error %+v", r)
		}
		if r.ErrorKind == latency.FailHTTP5xx && r.Status != 503 {
			t.Fatalf("queue-full error %+v", r)
		}
	}
	if kinds[""] == 0 || kinds[latency.FailHTTP4xx] == 0 || kinds[latency.FailHTTP5xx] == 0 {
		t.Errorf("outcomes %v: want successes, 400s (too long) and 503s (queue full)", kinds)
	}
}

func TestTraceReplayUsesLengthsOnly(t *testing.T) {
	rows := []workload.TraceRow{{At: 0, Input: 100, Output: 10}, {At: time.Second, Input: 3000, Output: 5}, {At: 1500 * time.Millisecond, Input: 7, Output: 0}}
	rp, err := workload.NewReplay(rows, workload.ReplayConfig{Chat: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := collect(t, Config{Engine: h100(t), Workload: rp, IgnoreEOS: true,
		Load: workload.Load{Arrivals: rp.Arrivals, Requests: rp.Len()}})
	type got struct {
		At      int64
		In, Out int
		Session int64
	}
	var g []got
	for _, r := range recs {
		g = append(g, got{r.IntendedNS, r.InputTokens, r.OutputTokens, r.Session})
	}
	slices.SortFunc(g, func(a, b got) int { return int(a.At - b.At) })
	want := []got{{0, 100, 10, 0}, {int64(time.Second), 3000, 5, 1}, {int64(1500 * time.Millisecond), 7, 1, 2}}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestAllRefusedClosedLoopStops(t *testing.T) {
	ec := h100(t)
	ec.MaxModelLen = 1000
	recs, res := collect(t, Config{Engine: ec, Workload: synthetic(10, 2000), IgnoreEOS: true,
		Load: workload.Load{Concurrency: 2, Duration: time.Minute}})
	if len(res.Warnings) != 1 || len(recs) < maxSameInstant || recs[0].ErrorKind != latency.FailHTTP4xx {
		t.Errorf("%d records, warnings %q", len(recs), res.Warnings)
	}
}

func TestBadConfigurationsNameTheSetting(t *testing.T) {
	ok := func() Config {
		return Config{Engine: h100(t), Workload: synthetic(10, 10), Load: workload.Load{Rate: 1, Requests: 1}}
	}
	for _, tc := range []struct {
		field string
		mod   func(*Config)
	}{
		{"replicas", func(c *Config) { c.Replicas = -1 }},
		{"balancer", func(c *Config) { c.Balancer = "fastest" }},
		{"network_latency", func(c *Config) { c.Network = -time.Second }},
		{"network_sample", func(c *Config) { c.NetworkSample = []time.Duration{time.Millisecond, -time.Millisecond} }},
		{"length_pools", func(c *Config) { c.Pools = []Pool{{Replicas: 1}, {MaxInputTokens: 10, Replicas: 1}} }},
		{"replicas", func(c *Config) { c.Replicas = 3; c.Pools = []Pool{{MaxInputTokens: 10, Replicas: 1}, {Replicas: 1}} }},
		{"early_reject", func(c *Config) {
			c.Admission = &Admission{Limits: route.Limits{Concurrency: 1}.WithDefaults(), EarlyReject: true}
		}},
		{"workload", func(c *Config) { c.Workload = nil }},
		{"requests", func(c *Config) { c.Load.Requests = -1 }},
		{"queue_full_status", func(c *Config) { c.QueueFullStatus = 500 }},
	} {
		c := ok()
		tc.mod(&c)
		_, err := Run(c, nil)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err = %v", tc.field, err)
		}
	}
}

func TestParsePools(t *testing.T) {
	p, err := ParsePools(" 2048:6, *:2")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Pool{{2048, 6}, {0, 2}}, p); diff != "" {
		t.Error(diff)
	}
	for _, bad := range []string{"2048", "x:1", "10:0", "-1:2", "5:y"} {
		if _, err := ParsePools(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestTokenInstantsAreTheEngines: one replica under an open loop sees what
// engine.Simulate sees for the same arrivals: every request's chunk
// instants and token counts are the engine's emissions, through
// speculative decoding (several tokens per event) and preemption (gaps).
func TestTokenInstantsAreTheEngines(t *testing.T) {
	for _, spec := range []bool{false, true} {
		t.Run(fmt.Sprintf("speculative=%v", spec), func(t *testing.T) {
			ec := h100(t)
			ec.NumBlocks = 1100 // 17,600 tokens: preemptions under this load
			if spec {
				ec.Speculative = engine.Speculative{K: 3, Alpha: 0.6}
			}
			ec.Seed = 11
			src := &workload.Synthetic{Chat: true, Input: workload.Uniform{Lo: 200, Hi: 3000}, Output: workload.Uniform{Lo: 50, Hi: 400},
				Turns: 1, PrefixGroups: 1, Seed: 11}
			recs, res := collect(t, Config{Engine: ec, Workload: src, IgnoreEOS: true,
				Load: workload.Load{Rate: 30, Arrival: workload.Poisson, Requests: 1500, Seed: 11}})
			if st := res.Replicas[0].Stats; st.Preemptions == 0 || st.Steps < 3*minStepLog {
				t.Fatalf("%d preemptions, %d steps: the test covers neither gaps nor the step log's trimming", st.Preemptions, st.Steps)
			}
			slices.SortFunc(recs, func(a, b *latency.Record) int { return int(a.SentNS - b.SentNS) })
			arr := make([]engine.Arrival, len(recs))
			for i, r := range recs {
				arr[i] = engine.Arrival{At: time.Duration(r.SentNS), Request: engine.Request{PromptLen: r.InputTokens, MaxTokens: r.OutputTokens, IgnoreEOS: true}}
			}
			want, err := engine.Simulate(ec, arr, engine.SimOptions{Emissions: true})
			if err != nil {
				t.Fatal(err)
			}
			multi, gaps := 0, 0
			for i, r := range recs {
				var at []int64
				var tok []int32
				all1 := true
				for _, e := range want.Emissions[i] {
					at = append(at, int64(e.At))
					tok = append(tok, int32(e.Tokens))
					all1 = all1 && e.Tokens == 1
				}
				if all1 {
					tok = nil
				} else {
					multi++
				}
				if tl := want.Timelines[i]; tl.Preemptions > 0 {
					gaps++
				}
				if !slices.Equal(at, r.ChunkNS) || !slices.Equal(tok, r.ChunkTokens) {
					t.Fatalf("%s: chunks %v %v, the engine emitted %v %v", r.ID, r.ChunkNS, r.ChunkTokens, at, tok)
				}
			}
			if spec != (multi > 0) || gaps == 0 {
				t.Fatalf("%d requests with multi-token events, %d preempted", multi, gaps)
			}
		})
	}
}

func TestAdaptiveLimitMovesOnTheVirtualClock(t *testing.T) {
	// Long prompts at a rate the replica cannot keep: the upstream TTFT
	// grows past the 100 ms cap and the gradient controller cuts the limit
	// from 16, so fewer requests reach the engine than a fixed limit lets in.
	cfg := Config{Engine: h100(t), Workload: synthetic(6000, 50), IgnoreEOS: true, Steps: true,
		Admission: &Admission{Limits: route.Limits{Concurrency: 16, Adaptive: true, TargetTTFT: 100 * time.Millisecond}.WithDefaults()},
		Load:      workload.Load{Rate: 20, Arrival: workload.Constant, Requests: 300}}
	_, res := collect(t, cfg)
	most, late := 0, 0
	steps := res.Replicas[0].Steps
	for i, st := range steps {
		n := st.Running + st.Waiting
		most = max(most, n)
		if i > len(steps)/2 {
			late = max(late, n)
		}
	}
	if most > 16 || late >= 16 || late == 0 {
		t.Errorf("requests at the engine: at most %d overall, %d in the second half; want ≤ 16, then fewer", most, late)
	}
}

// TestStopEndsTheRunEarly: a Stop that turns true after 20 records ends
// the simulation at that instant: fewer records than requests, and the
// records before it are the unstopped run's.
func TestStopEndsTheRunEarly(t *testing.T) {
	cfg := Config{Engine: h100(t), Workload: synthetic(500, 80), IgnoreEOS: true,
		Load: workload.Load{Rate: 50, Arrival: workload.Poisson, Requests: 200, Seed: 3}}
	all, res := collect(t, cfg)
	if res.Stopped || len(all) != 200 {
		t.Fatalf("unstopped run: %d records, stopped %v", len(all), res.Stopped)
	}
	var n int
	cfg.Stop = func() bool { return n >= 20 }
	var recs []*latency.Record
	res, err := Run(cfg, func(r *latency.Record) { n++; recs = append(recs, r) })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Stopped || len(recs) < 20 || len(recs) >= 200 {
		t.Fatalf("stopped run: %d records, stopped %v", len(recs), res.Stopped)
	}
	if diff := cmp.Diff(all[:len(recs)], recs); diff != "" {
		t.Errorf("the records before the stop differ:\n%s", diff)
	}
}

// A Mooncake trace whose even rows share 80 % of their blocks: with prefix
// caching on, the engine serves from its cache the share of input tokens
// the hash_ids imply, and the records carry what each request shares.
func TestMooncakeHashIDsReachThePrefixCache(t *testing.T) {
	m := workloadtest.Mooncake{Requests: 200, Blocks: 10, Shared: 8, BlockSize: 64, Output: 4, GapMS: 50}
	path := m.Write(t, t.TempDir())
	o := workload.DefaultOptions()
	o.Trace, o.TraceBlockSize = path, m.BlockSize
	src, load, err := o.Build(true, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	for _, caching := range []bool{true, false} {
		ec := h100(t)
		ec.EnablePrefixCaching = caching
		recs, _ := collect(t, Config{Engine: ec, Workload: src, Load: load, IgnoreEOS: true})
		var in, cached, shared int
		for _, r := range recs {
			in, cached, shared = in+r.InputTokens, cached+r.CachedTokens, shared+r.SharedPrefixTokens
		}
		want := m.ImpliedShare(true)
		if got := float64(shared) / float64(in); math.Abs(got-want) > 1e-9 {
			t.Errorf("caching %v: records say %.4f of input tokens are shared, the hash_ids %.4f", caching, got, want)
		}
		got := float64(cached) / float64(in)
		t.Logf("caching %v: cached share %.4f, implied %.4f", caching, got, want)
		if caching && math.Abs(got-want) > 0.05*want {
			t.Errorf("cached share %.4f, want the hash_ids' %.4f within 5%%", got, want)
		}
		if !caching && cached != 0 {
			t.Errorf("prefix caching off, yet %d cached tokens", cached)
		}
	}
}

// TestStepBoundaries: a replica plans its next step at the instant its
// step ends, before what that step's tokens cause reaches it — a closed
// loop's next request waits for the step after, as on a serving engine —
// and an idle replica starts a step on its first request, so requests sent
// together at the start do not all share it. Before, a closed loop's next
// request joined the step starting at its predecessor's end and a closed
// loop of 16 workers with fixed lengths ran in lock-step waves with half
// the served TTFT (issue: serve + bench 1.32 s, simulate 0.66 s).
func TestStepBoundaries(t *testing.T) {
	recs, res := collect(t, Config{Engine: h100(t), Workload: synthetic(512, 8), IgnoreEOS: true, Model: "m",
		Load: workload.Load{Concurrency: 4, Requests: 24}, Steps: true})
	steps := res.Replicas[0].Steps
	if got := steps[0].PrefillTokens; got != 512 {
		t.Errorf("first step computes %d prompt tokens, want 512: the first request alone", got)
	}
	starts := map[int64]bool{}
	for _, st := range steps {
		starts[int64(st.Start)] = true
	}
	for i, r := range recs {
		if r.Server == nil {
			t.Fatalf("record %d has no server split", i)
		}
		arrival := r.SentNS
		scheduled := arrival + r.Server.QueueNS
		if !starts[scheduled] {
			t.Errorf("record %d scheduled at %d, not a step's start", i, scheduled)
		}
		if r.Server.QueueNS == 0 && i > 0 && r.SentNS > 0 {
			t.Errorf("record %d (sent at %v after a response) was scheduled at once: it overtook the step boundary", i, time.Duration(r.SentNS))
		}
	}
}

// A reasoning model on the virtual clock: the first 20 of 30 tokens are
// reasoning, so the first answer token is exactly 20 decode steps after
// the first reasoning token, and the answer counts 10 tokens.
func TestReasoningSplitsTheAnswer(t *testing.T) {
	ec := h100(t)
	ec.Reasoning = workload.Fixed(20)
	for _, noTimes := range []bool{false, true} {
		recs, _ := collect(t, Config{Engine: ec, Workload: synthetic(64, 30), IgnoreEOS: true, NoTokenTimes: noTimes,
			Load: workload.Load{Concurrency: 1, Requests: 3}})
		for _, r := range recs {
			if r.ReasoningTokens != 20 || r.OutputTokens != 10 || r.FirstReasonNS == 0 || r.FirstTokenNS <= r.FirstReasonNS {
				t.Fatalf("no times %v: reasoning %d answer %d, first reasoning %d, first answer %d", noTimes,
					r.ReasoningTokens, r.OutputTokens, r.FirstReasonNS, r.FirstTokenNS)
			}
			step := float64(r.EndNS-r.FirstReasonNS) / 29
			if gap := float64(r.FirstTokenNS-r.FirstReasonNS) / step; math.Abs(gap-20) > 0.5 {
				t.Errorf("no times %v: first answer %.2f steps after the first reasoning token, want 20", noTimes, gap)
			}
			if !noTimes && (len(r.OtherNS) != 20 || len(r.ChunkNS) != 10 || r.OtherNS[0] != r.FirstReasonNS || r.ChunkNS[0] != r.FirstTokenNS) {
				t.Errorf("%d reasoning events, %d answer chunks", len(r.OtherNS), len(r.ChunkNS))
			}
		}
	}
}

// A first-token ramp-up starts closed-loop worker k+1 when worker k's
// first answer brings its first token to the client, as bench does: the
// k-th session's request is meant for the (k−1)-th's first-token instant,
// and (2 ms of network each way) reaches the engine after the step that
// produced that token, so each of the four first prefills runs alone. A
// ramp-up over a span starts worker k of N k/N of it after the start.
func TestRampUpStartsWorkersInOrder(t *testing.T) {
	recs, res := collect(t, Config{Engine: h100(t), Workload: synthetic(512, 8), IgnoreEOS: true, Model: "m",
		Network: 2 * time.Millisecond, Steps: true, Load: workload.Load{Concurrency: 4, Requests: 4, RampFirstToken: true}})
	slices.SortFunc(recs, func(a, b *latency.Record) int { return int(a.Session - b.Session) })
	for k := 1; k < len(recs); k++ {
		if got, want := recs[k].IntendedNS, recs[k-1].FirstTokenNS; got != want || recs[k].SentNS != want {
			t.Errorf("session %d meant for %v and sent at %v, want session %d's first token %v", k, time.Duration(got), time.Duration(recs[k].SentNS), k-1, time.Duration(want))
		}
	}
	var lone int
	for _, st := range res.Replicas[0].Steps {
		if st.PrefillTokens == 512 {
			lone++
		}
	}
	if lone != 4 {
		t.Errorf("%d steps prefilled one whole prompt, want 4: each worker's first request reached the engine after the step before", lone)
	}
	recs, _ = collect(t, Config{Engine: h100(t), Workload: synthetic(512, 8), IgnoreEOS: true, Model: "m",
		Load: workload.Load{Concurrency: 4, Requests: 4, RampUp: 100 * time.Millisecond}})
	var intended []int64
	for _, r := range recs {
		intended = append(intended, r.IntendedNS/1e6)
	}
	slices.Sort(intended)
	if diff := cmp.Diff([]int64{0, 25, 50, 75}, intended); diff != "" {
		t.Errorf("intended sends, ms (-want +got):\n%s", diff)
	}
}

func TestReplicaNamesAreWhatPrefixAffinityHashes(t *testing.T) {
	// One shared prefix at a low rate: prefix affinity sends every request
	// to the replica that prefix hashes first with, by name, whatever
	// the replicas' order (the gateway's names are its replicas' URLs).
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(800), Output: workload.Fixed(4), PrefixTokens: 600,
		PrefixGroups: 1, Turns: 1, Seed: 3}
	took := func(names []string) map[string]int {
		_, res := collect(t, Config{Engine: h100(t), Replicas: 2, Balancer: route.NamePrefixAffinity, ReplicaNames: names,
			Workload: src, IgnoreEOS: true, Load: workload.Load{Rate: 2, Arrival: workload.Constant, Requests: 20}})
		m := map[string]int{}
		for _, r := range res.Replicas {
			m[r.Name] = r.Requests
		}
		return m
	}
	a, b := "http://127.0.0.1:40001", "http://127.0.0.1:40002"
	first := took([]string{a, b})
	if first[a]+first[b] != 20 || first[a] != 0 && first[b] != 0 {
		t.Fatalf("replicas named %s and %s took %v of 20 requests: want all on one of them", a, b, first)
	}
	if diff := cmp.Diff(first, took([]string{b, a})); diff != "" {
		t.Errorf("the replicas' order moved the prefix (-%s first, +%s first):\n%s", a, b, diff)
	}
}

func TestScrapePhaseSetsTheScrapeInstants(t *testing.T) {
	for _, phase := range []time.Duration{0, 300 * time.Millisecond} {
		s, err := newSim(Config{Engine: h100(t), Replicas: 2, Balancer: route.NameQueueAware, ScrapePhase: phase,
			Workload: synthetic(1000, 100), IgnoreEOS: true, Load: workload.Load{Rate: 20, Arrival: workload.Constant, Requests: 100}})
		if err != nil {
			t.Fatal(err)
		}
		s.run(func(*latency.Record) {})
		at := s.replicas[0].scrapedAt.Sub(engine.SimEpoch)
		if at <= DefaultScrapeInterval || at%DefaultScrapeInterval != phase {
			t.Errorf("scrape phase %v: the last scrape at %v of the run, want a later one at %v past a whole second", phase, at, phase)
		}
	}
}

func TestReplicaNamesAndScrapePhaseChecked(t *testing.T) {
	base := Config{Engine: h100(t), Replicas: 2, Workload: synthetic(100, 10), Load: workload.Load{Concurrency: 1, Requests: 1}}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // the setting named; "" valid
	}{
		{"names, one each", func(c *Config) { c.ReplicaNames = []string{"a", "b"} }, ""},
		{"names, too few", func(c *Config) { c.ReplicaNames = []string{"a"} }, "replica_names"},
		{"names, one twice", func(c *Config) { c.ReplicaNames = []string{"a", "a"} }, "replica_names"},
		{"phase within the interval", func(c *Config) { c.Balancer, c.ScrapePhase = route.NameQueueAware, 999*time.Millisecond }, ""},
		{"phase of a whole interval", func(c *Config) { c.Balancer, c.ScrapePhase = route.NameQueueAware, time.Second }, "scrape_phase"},
		{"phase without scraping", func(c *Config) { c.ScrapePhase = time.Millisecond }, "scrape_phase"},
		{"negative phase", func(c *Config) { c.Balancer, c.ScrapePhase = route.NameQueueAware, -time.Millisecond }, "scrape_phase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			var got string
			if _, err := newSim(c); err != nil {
				var fe *field.Error
				if !errors.As(err, &fe) {
					t.Fatalf("%v: not a field error", err)
				}
				got = fe.Field
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("setting refused (-want +got):\n%s", diff)
			}
		})
	}
}
