package calibrate

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// PublicRow is one published closed-loop measurement of a real server
// (internal/perfmodel/testdata/loaded.csv; its README gives the columns).
type PublicRow struct {
	ID, Engine, EngineVersion  string
	Model, GPU                 string
	TP                         int
	DType, KVDType             string
	Input, Output, Concurrency int
	// InputMin and OutputMin are the least lengths when the client drew
	// them uniformly about Input and Output (their means): the optional
	// columns input_min and output_min; 0: fixed lengths.
	InputMin, OutputMin int
	// RecvInterval is the server's --scheduler-recv-interval where its
	// recipe sets one (SGLang; the optional column recv_interval;
	// engine.Config.RecvInterval); 0: none.
	RecvInterval int
	// ChunkedPrefill is the server's step token budget where its recipe
	// sets one (SGLang's --chunked-prefill-size; the optional column
	// chunked_prefill), in place of its engine family's default; 0: the
	// default.
	ChunkedPrefill int
	// BatchWaitIters and BatchWaitTokens are TensorRT-LLM's batch waiting
	// where the recipe sets it (batch_wait_timeout_iters, and
	// batch_wait_max_tokens_ratio × max_num_tokens rounded up; the optional
	// columns batch_wait_iters and batch_wait_tokens;
	// engine.Config.BatchWaitIters); 0: none.
	BatchWaitIters, BatchWaitTokens int
	Client                          string
	// Requests is how many requests the client measured, from a start
	// with every client sending at once; 0 when the source does not say
	// (then the closed loop's steady state, see Predict).
	Requests int
	// TTFT, TPOT and E2E are in milliseconds (0 when not published), of the
	// statistic Stat ("mean"); TTFTMedian and TTFTP95 when the source gives
	// them.
	TTFT, TPOT, E2E, TTFTMedian, TTFTP95 float64
	Stat                                 string
	Source                               string
}

// LoadPublic reads the public measurements CSV.
func LoadPublic(path string) ([]PublicRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	return ParsePublic(f)
}

// ParsePublic parses the public measurements CSV; a missing column or a
// malformed number is an error naming the row and column.
func ParsePublic(r io.Reader) ([]PublicRow, error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("public measurements: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, need := range []string{"id", "engine", "engine_version", "model", "gpu", "tp", "dtype", "kv_dtype", "input", "output", "concurrency", "client", "requests", "ttft_ms", "ttft_p95_ms", "ttft_median_ms", "tpot_ms", "e2e_ms", "stat", "source"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("public measurements: no column %q", need)
		}
	}
	var rows []PublicRow
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("public measurements: %w", err)
		}
		var perr error
		get := func(k string) string { return strings.TrimSpace(rec[col[k]]) }
		num := func(k string, opt bool) float64 {
			s := get(k)
			if s == "" && opt {
				return 0
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("public measurements: line %d: column %s: %q is not a number", line, k, s)
			}
			return v
		}
		p := PublicRow{ID: get("id"), Engine: get("engine"), EngineVersion: get("engine_version"), Model: get("model"), GPU: get("gpu"),
			TP: int(num("tp", false)), DType: get("dtype"), KVDType: get("kv_dtype"), Input: int(num("input", false)), Output: int(num("output", false)),
			Concurrency: int(num("concurrency", false)), Client: get("client"), Requests: int(num("requests", true)), TTFT: num("ttft_ms", true), TTFTMedian: num("ttft_median_ms", true), TTFTP95: num("ttft_p95_ms", true),
			TPOT: num("tpot_ms", true), E2E: num("e2e_ms", true), Stat: get("stat"), Source: get("source")}
		if _, ok := col["input_min"]; ok {
			p.InputMin = int(num("input_min", true))
		}
		if _, ok := col["output_min"]; ok {
			p.OutputMin = int(num("output_min", true))
		}
		if _, ok := col["recv_interval"]; ok {
			p.RecvInterval = int(num("recv_interval", true))
		}
		if _, ok := col["chunked_prefill"]; ok {
			p.ChunkedPrefill = int(num("chunked_prefill", true))
		}
		if _, ok := col["batch_wait_iters"]; ok {
			p.BatchWaitIters, p.BatchWaitTokens = int(num("batch_wait_iters", true)), int(num("batch_wait_tokens", true))
		}
		if perr != nil {
			return nil, perr
		}
		if p.InputMin < 0 || p.InputMin > p.Input || p.OutputMin < 0 || p.OutputMin > p.Output {
			return nil, fmt.Errorf("public measurements: line %d (%s): input_min and output_min must be in [0, input] and [0, output]", line, p.ID)
		}
		if p.RecvInterval < 0 || p.ChunkedPrefill < 0 || p.BatchWaitIters < 0 || p.BatchWaitTokens < 0 {
			return nil, fmt.Errorf("public measurements: line %d (%s): recv_interval, chunked_prefill and batch_wait_* must not be negative", line, p.ID)
		}
		if !strings.HasPrefix(p.Source, "https://") {
			return nil, fmt.Errorf("public measurements: line %d (%s): no source URL", line, p.ID)
		}
		rows = append(rows, p)
	}
}

// Prediction is the twin's mean TTFT, TPOT and E2E for a row, in
// milliseconds, over the requests the row's client measured.
type Prediction struct {
	TTFT, TPOT, E2E float64
	// Requests is how many requests the means are over.
	Requests int
}

// EngineFor builds the engine configuration a public row ran: its model,
// GPU, TP and precisions timed with eff, and its engine family's scheduler
// defaults (engine.FamilyOf the row's engine: TensorRT-LLM's max_batch_size
// 256 and whole prompts, vLLM's defaults for the GPU; an engine of no
// family takes vLLM's), with, for TensorRT-LLM's rows, their engines'
// max_num_tokens (nimMaxNumTokens) and TensorRT-LLM's admission of a whole
// request's KV as a bound on running requests (noEvictBound).
func EngineFor(p PublicRow, eff perfmodel.Efficiency) (engine.Config, error) {
	m, err := perfmodel.ResolveModel(p.Model)
	if err != nil {
		return engine.Config{}, err
	}
	g, err := perfmodel.LookupGPU(p.GPU)
	if err != nil {
		return engine.Config{}, err
	}
	wd, err := perfmodel.ParseDType(p.DType)
	if err != nil {
		return engine.Config{}, err
	}
	kd, err := perfmodel.ParseDType(p.KVDType)
	if err != nil {
		return engine.Config{}, err
	}
	in, out := p.closedLoop(max(p.Requests, p.Concurrency), 0).MaxLengths()
	cfg := engine.Config{MaxModelLen: in + out, RecvInterval: p.RecvInterval, BatchWaitIters: p.BatchWaitIters, BatchWaitTokens: p.BatchWaitTokens}
	pc := perfmodel.Config{Model: m, GPU: g, TP: p.TP, WeightDType: wd, KVDType: kd, Eff: eff}
	fam, ok := engine.FamilyOf(p.Engine)
	if ok && !nimRow(p) {
		fam = familyRelease(fam, p.EngineVersion)
		cfg.PromptFitsStep, cfg.GuaranteedNoEvict = fam.Scheduler.PromptFitsStep, fam.Scheduler.GuaranteedNoEvict
		cfg.SeparatePrefill, pc.EagerLayer = fam.Scheduler.SeparatePrefill, fam.Scheduler.EagerPrefill.Layer(m)
		pc.EagerAbove = fam.Scheduler.EagerPrefill.Above(m)
	}
	est, err := perfmodel.New(pc)
	if err != nil {
		return engine.Config{}, err
	}
	if ok {
		cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = fam.BatchLimits(g.MemoryBytes)
		cfg.DisableChunkedPrefill, cfg.EnablePrefixCaching = !fam.Scheduler.EnableChunkedPrefill, fam.Scheduler.EnablePrefixCaching
	}
	if p.ChunkedPrefill > 0 {
		cfg.MaxNumBatchedTokens = p.ChunkedPrefill
	}
	trtllm := ok && fam.Name == "trtllm" && nimRow(p)
	if trtllm {
		cfg.MaxNumBatchedTokens = max(nimMaxNumTokens, cfg.MaxModelLen)
	}
	cfg = engine.FromEstimator(cfg, est)
	if trtllm {
		cfg.MaxNumSeqs = noEvictBound(cfg, p.Input+p.Output)
	}
	return cfg, nil
}

// nimMaxNumTokens is the tokens per step (TensorRT-LLM's max_num_tokens)
// of the public TensorRT-LLM rows' engines, NIM for Llama 3 of 2024 (NIM
// does not publish its engines' value; the trtllm family keeps
// TensorRT-LLM's later default, 8,192). Read off the fit half
// (calibrate.Split) as Predict averages it, the closed loop's steady
// state: groups of sixteen 2,000-token prompts, each waiting for the
// previous group's prefill step and taking its own, give the 2,000-token
// rows at 25 and 100 clients and the 7,000-token rows at 25 (median
// |error| of TTFT 7–9 % with the fits of the time, where 16,384 tokens
// gave 25–52 %); of 16,384,
// 24,576, 32,768, 40,960 and 49,152 tokens, 32,768 gave the fit half's
// smallest median TTFT error at ≥ 8 clients (docs/perfmodel.md, "Under
// load").
const nimMaxNumTokens = 32768

// trtllmBlockTokens is TensorRT-LLM's KV cache block of 2024
// (trtllm-build's tokens_per_block default, 64 tokens).
const trtllmBlockTokens = 64

// noEvictBound is how many of a public row's identical requests
// TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT) runs at
// once: it admits a request only when the KV cache holds its prompt and
// all of its max_tokens, in whole blocks of trtllmBlockTokens, so a closed
// loop past the cache's capacity queues instead of preempting. For
// requests of one length that is a bound on the running requests, which is
// how Predict gives it to the engine (whose own scheduler admits by the
// prompt and preempts when the cache fills, as vLLM does). The bound
// never passes cfg.MaxNumSeqs (max_batch_size) and is at least 1.
func noEvictBound(cfg engine.Config, tokens int) int {
	per := (tokens + trtllmBlockTokens - 1) / trtllmBlockTokens * trtllmBlockTokens
	n := max(1, cfg.NumBlocks*cfg.BlockSize/per)
	if cfg.MaxNumSeqs > 0 {
		n = min(n, cfg.MaxNumSeqs)
	}
	return n
}

// FamilyEff is the constants an engine family ships for a row's GPU and
// weights (engine.Family.ConstantsFor), the GPU family's defaults where it
// ships none or the row's engine is of no family.
func FamilyEff(p PublicRow) (perfmodel.Efficiency, error) {
	g, err := perfmodel.LookupGPU(p.GPU)
	if err != nil {
		return perfmodel.Efficiency{}, err
	}
	if fam, ok := engine.FamilyOf(p.Engine); ok {
		wd, err := perfmodel.ParseDType(p.DType)
		if err != nil {
			return perfmodel.Efficiency{}, err
		}
		if eff, ok := fam.ConstantsFor(g.Name, wd); ok {
			return eff, nil
		}
	}
	return perfmodel.DefaultEfficiency(g), nil
}

// Predict runs the twin on p's closed loop as its client ran it: every
// client sends its first request at once and the next one when an answer
// ends, each request passing the row's server's intake (intakeOf) before
// the engine sees it. The means are over the first p.Requests requests
// sent when the source says how many its client measured; when it does
// not, over the closed loop's steady state, the requests sent in rounds
// steadyFrom+1 to steadyRounds (one round is one request per client):
// the rows' TTFT spread and their throughput say their clients measured
// a steady state, not the first round (docs/perfmodel.md, "Under load").
func Predict(p PublicRow, eff perfmodel.Efficiency) (Prediction, error) {
	return predictWith(p, eff, intakeOf(p))
}

// predictWith is Predict with the server's intake given.
func predictWith(p PublicRow, eff perfmodel.Efficiency, intake time.Duration) (Prediction, error) {
	cfg, err := EngineFor(p, eff)
	if err != nil {
		return Prediction{}, err
	}
	n, from := p.Requests, 0
	if n <= 0 {
		n, from = steadyRounds*p.Concurrency, steadyFrom*p.Concurrency
	}
	tls, err := RunClosedLoop(cfg, p.closedLoop(n, intake))
	if err != nil {
		return Prediction{}, err
	}
	var pr Prediction
	for _, tl := range tls[from:] {
		ttft := tl.FirstToken.Sub(tl.Arrival)
		e2e := tl.Finished.Sub(tl.Arrival)
		pr.TTFT += ms(ttft)
		pr.E2E += ms(e2e)
		if tl.OutputTokens > 1 {
			pr.TPOT += ms(e2e-ttft) / float64(tl.OutputTokens-1)
		}
		pr.Requests++
	}
	k := float64(pr.Requests)
	pr.TTFT, pr.TPOT, pr.E2E = pr.TTFT/k, pr.TPOT/k, pr.E2E/k
	return pr, nil
}

// closedLoop is p's closed loop of n requests with the server's intake:
// its clients, its lengths (drawn about their means when the source's
// client drew them: InputMin, OutputMin), every client sending at once.
// NIM's intake is passed one request at a time (ClosedLoop.Intake); an
// engine release's is its front end, a delay (ClosedLoop.FrontEnd), as
// simulate adds it.
func (p PublicRow) closedLoop(n int, intake time.Duration) ClosedLoop {
	w := ClosedLoop{Clients: min(p.Concurrency, n), Requests: n, Input: p.Input, Output: p.Output,
		InputMin: p.InputMin, OutputMin: p.OutputMin, Seed: 1}
	if nimRow(p) {
		w.Intake = intake
	} else {
		w.FrontEnd = intake
	}
	return w
}

// steadyFrom and steadyRounds are the closed loop's steady state as
// Predict averages it for a source that does not say how many requests
// its client measured: the requests sent in rounds 3 to 6. The first two
// rounds are left out (the first is one cohort queued behind its own
// prefills, the second still carries its shape); fewer rounds fitted the
// fit half's TPOT worse (rounds 2–3 or 3–4: 5.2 % against 4.1 % at ≥ 8
// clients), because the long answers' later rounds are what spreads them.
const (
	steadyFrom   = 2
	steadyRounds = 6
)

// nimIntake is the intake of the public TensorRT-LLM rows' server, NIM's
// front end (request parsed, prompt tokenized, handed to the engine), paid
// by every request one at a time before the engine sees it and counted in
// the client's TTFT and E2E. 2 ms gave the fit half's smallest median TTFT
// error at ≥ 8 clients of 1–4 ms; docs/perfmodel.md ("Under load", "The
// short prompts come back as cohorts") says why it matters.
const nimIntake = 2 * time.Millisecond

// intakeOf is the server intake Predict gives a row's closed loop:
// nimIntake for NIM's rows (its front end); for a row naming its engine's
// release, that release's front end (engine.FamilyScheduler.IntakeUS,
// fitted on the older public sources: FitIntake); none for others.
func intakeOf(p PublicRow) time.Duration {
	if nimRow(p) {
		return nimIntake
	}
	if fam, ok := engine.FamilyOf(p.Engine); ok && p.EngineVersion != "" {
		return familyRelease(fam, p.EngineVersion).Scheduler.Intake()
	}
	return 0
}

// nimRow reports a row of NVIDIA NIM, whose 2024 TensorRT-LLM engines
// Predict runs with their own step budget, admission bound and intake
// (EngineFor); other rows run their family's release as --engine does.
func nimRow(p PublicRow) bool {
	if fam, ok := engine.FamilyOf(p.Engine); !ok || fam.Name != "trtllm" {
		return false
	}
	return strings.Contains(strings.ToUpper(p.Engine+" "+p.EngineVersion), "NIM")
}

// familyRelease is fam at the row's engine release where it names one
// (engine.LookupFamily's name@version), else fam's default.
func familyRelease(fam engine.Family, version string) engine.Family {
	if version == "" {
		return fam
	}
	if f, err := engine.LookupFamily(fam.Name + "@" + strings.TrimPrefix(version, "v")); err == nil {
		return f
	}
	return fam
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
