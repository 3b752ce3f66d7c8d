package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Prompt tokenizers (--prompt-tokenizer): what sizes generated prompts.
const (
	// PromptTokenizerAuto sizes prompts against the server's tokenizer
	// when it offers one, else sends tokentrace's lengths and reports the
	// gap the server's usage shows.
	PromptTokenizerAuto = "auto"
	// PromptTokenizerServer requires the server's tokenizer.
	PromptTokenizerServer = "server"
	// PromptTokenizerBuiltin never asks the server.
	PromptTokenizerBuiltin = "builtin"
)

// SizeTolerance is how far (in tokens) a prompt sized against a server's
// tokenizer may stay from the length asked for; sizing stops there or
// after maxSizeCounts counts.
const SizeTolerance = 1

const (
	maxSizeCounts = 6
	// tokenizeTimeout bounds each call to the server's tokenizer;
	// probeTimeout the questions whether it has one, which the run waits
	// for.
	tokenizeTimeout = 10 * time.Second
	probeTimeout    = 2 * time.Second
	// maxTokenizeBody bounds the answer read from it.
	maxTokenizeBody = 16 << 20
)

// serverTokenizer counts a request's prompt as the server will: llama.cpp
// (POST /tokenize with add_special, the chat template by POST
// /apply-template) or vLLM (POST /tokenize with the model and the messages
// or prompt).
type serverTokenizer struct {
	kind  string // "llama.cpp" or "vLLM"
	root  string // the server's root URL (no /v1)
	model string
	chat  bool
	auth  func(http.Header)
	hc    *http.Client
}

// Describe names the tokenizer and the endpoints used.
func (s *serverTokenizer) Describe() string {
	if s.kind == "llama.cpp" {
		if s.chat {
			return "llama.cpp /apply-template + /tokenize"
		}
		return "llama.cpp /tokenize"
	}
	return s.kind + " /tokenize"
}

// serverRoot is the target's base URL without its /v1.
func serverRoot(t Target) (string, error) {
	u, err := url.Parse(strings.TrimSpace(t.BaseURL))
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("url %q: not an http(s) URL", t.BaseURL)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawQuery, u.Fragment = "", ""
	return strings.TrimSuffix(u.String(), "/"), nil
}

// findServerTokenizer asks the target whether it offers a tokenizer:
// llama.cpp's /tokenize answers {"tokens":[…]} to {"content":…}, vLLM's
// {"count":…} to {"model":…,"prompt":…}. It returns an error saying what
// was tried when neither answers.
func findServerTokenizer(ctx context.Context, t Target) (*serverTokenizer, error) {
	root, err := serverRoot(t)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	s := &serverTokenizer{root: root, model: t.Model, chat: t.api().Chat(), auth: t.authorize,
		hc: &http.Client{Timeout: tokenizeTimeout, CheckRedirect: httplimit.NoRedirects}}
	var ll struct {
		Tokens *[]json.RawMessage `json:"tokens"`
		Count  *int               `json:"count"`
	}
	errL := s.post(ctx, "/tokenize", map[string]any{"content": "hello world", "add_special": true}, &ll)
	if errL == nil && ll.Tokens != nil && len(*ll.Tokens) > 0 && ll.Count == nil {
		s.kind = "llama.cpp"
		if !s.chat {
			return s, nil
		}
		var tpl struct {
			Prompt *string `json:"prompt"`
		}
		err := s.post(ctx, "/apply-template", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hello"}}}, &tpl)
		if err == nil && tpl.Prompt != nil {
			return s, nil
		}
		return nil, fmt.Errorf("llama.cpp's /tokenize answered but /apply-template did not (%v): the chat template is unknown", orNoPrompt(err))
	}
	var vl struct {
		Count *int `json:"count"`
	}
	errV := s.post(ctx, "/tokenize", map[string]any{"model": t.Model, "prompt": "hello world"}, &vl)
	if errV == nil && vl.Count != nil {
		s.kind = "vLLM"
		return s, nil
	}
	return nil, fmt.Errorf("%s/tokenize is neither llama.cpp's (%v) nor vLLM's (%v)", root, orNoField(errL, "tokens"), orNoField(errV, "count"))
}

func orNoPrompt(err error) error {
	if err == nil {
		return errors.New(`no "prompt" in its answer`)
	}
	return err
}

func orNoField(err error, name string) error {
	if err == nil {
		return fmt.Errorf("no %q in its answer", name)
	}
	return err
}

// post sends body as JSON to the server's path and decodes a 200 answer
// into out (keys exact: a differently cased key is not the field).
func (s *serverTokenizer) post(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.root+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	s.auth(req.Header)
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenizeBody))
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", path, resp.Status)
	}
	if err := exactJSON(data, out); err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	return nil
}

// exactJSON decodes data into out, a pointer to a struct whose tags are
// all lower case, dropping keys that are not (encoding/json would match
// "Tokens" to "tokens").
func exactJSON(data []byte, out any) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	for k := range raw {
		if k != strings.ToLower(k) {
			delete(raw, k)
		}
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// count is the prompt's length as the server counts it.
func (s *serverTokenizer) count(ctx context.Context, req *workload.Request) (int, error) {
	if s.kind == "vLLM" {
		var v struct {
			Count *int `json:"count"`
		}
		body := map[string]any{"model": s.model}
		if s.chat {
			body["messages"], body["add_generation_prompt"] = chatMessages(req), true
		} else {
			body["prompt"] = promptText(req)
		}
		if err := s.post(ctx, "/tokenize", body, &v); err != nil {
			return 0, err
		}
		if v.Count == nil {
			return 0, errors.New(`POST /tokenize: no "count" in its answer`)
		}
		return *v.Count, nil
	}
	text := promptText(req)
	if s.chat {
		var tpl struct {
			Prompt *string `json:"prompt"`
		}
		if err := s.post(ctx, "/apply-template", map[string]any{"messages": chatMessages(req)}, &tpl); err != nil {
			return 0, err
		}
		if tpl.Prompt == nil {
			return 0, errors.New(`POST /apply-template: no "prompt" in its answer`)
		}
		text = *tpl.Prompt
	}
	var tk struct {
		Tokens *[]json.RawMessage `json:"tokens"`
	}
	if err := s.post(ctx, "/tokenize", map[string]any{"content": text, "add_special": true}, &tk); err != nil {
		return 0, err
	}
	if tk.Tokens == nil {
		return 0, errors.New(`POST /tokenize: no "tokens" in its answer`)
	}
	return len(*tk.Tokens), nil
}

// chatMessages is the request's messages as sent (a completions prompt
// as one user message).
func chatMessages(req *workload.Request) []map[string]string {
	if req.Messages == nil {
		return []map[string]string{{"role": "user", "content": req.Prompt}}
	}
	out := make([]map[string]string, len(req.Messages))
	for i, m := range req.Messages {
		out[i] = map[string]string{"role": m.Role, "content": m.Content}
	}
	return out
}

// promptText is the request's prompt as the completions endpoint (and
// SGLang's /generate) sends it.
func promptText(req *workload.Request) string {
	if req.Messages == nil {
		return req.Prompt
	}
	parts := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n")
}

// counter counts a prompt as the server will (serverTokenizer does).
type counter interface {
	count(ctx context.Context, req *workload.Request) (int, error)
}

// sizePrompt resizes a filler prompt at its end until the server counts
// the length the workload asked for (within SizeTolerance), keeping its
// shared prefix. It sets req.Requested to that length and req.InputTokens
// to the server's count of the prompt sent; the error says why the
// server could not count it (the request is then left as it was).
func sizePrompt(ctx context.Context, c counter, req *workload.Request) error {
	if !req.Filler || (req.Messages != nil && len(req.Messages) != 1) {
		return nil
	}
	want := req.InputTokens
	content := req.Prompt
	role := 0
	if req.Messages != nil {
		content, role = req.Messages[0].Content, 1
	}
	words := strings.Fields(content)
	keep := min(max(req.SharedPrefixTokens-role, 0), len(words))
	set := func(ws []string) {
		text := strings.Join(ws, " ")
		if req.Messages != nil {
			req.Messages = []tokenizer.Message{{Role: req.Messages[0].Role, Content: text}}
		} else {
			req.Prompt = text
		}
	}
	n, err := c.count(ctx, req)
	if err != nil {
		return err
	}
	best, bestN := words, n
	perWord, extra, floor := 1.0, uint64(0), false
	for range maxSizeCounts - 1 {
		gap := n - want
		if bestN == want {
			break
		}
		k := max(int(math.Round(math.Abs(float64(gap))/perWord)), 1)
		prev := len(words)
		if gap > 0 {
			if len(words)-k < max(keep, 1) {
				k = len(words) - max(keep, 1)
			}
			if k <= 0 {
				floor = true // nothing left to cut but the shared prefix or one word
				break
			}
			words = words[:len(words)-k]
		} else {
			extra++
			words = append(words[:len(words):len(words)], strings.Fields(tokenizer.Filler(k, uint64(req.Session)*0x9E3779B97F4A7C15^extra<<48^0x5A5A))...)
		}
		set(words)
		m, err := c.count(ctx, req)
		if err != nil {
			return err
		}
		if dw := len(words) - prev; dw != 0 && m != n {
			perWord = math.Max(math.Abs(float64(m-n)/float64(dw)), 0.25)
		}
		n = m
		if absInt(n-want) < absInt(bestN-want) {
			best, bestN = words, n
		}
	}
	set(best)
	req.Requested, req.InputTokens = want, bestN
	if floor && bestN > want+SizeTolerance {
		return errPromptFloor
	}
	return nil
}

// errPromptFloor: the prompt was cut to its shared prefix (or one word)
// and the server still counts more than asked: its chat template alone
// is longer.
var errPromptFloor = errors.New("the prompt cannot be shorter: the chat template and the shared prefix are longer than asked")

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// PromptLengths is the requested-against-served prompt lengths of a run's
// measured successful requests (summary.json's prompt_lengths).
type PromptLengths struct {
	// Tokenizer is what sized the prompts: the server's (its endpoints
	// named), or "tokentrace" (the built-in tokenizer; the server counted
	// on its own).
	Tokenizer string `json:"tokenizer"`
	// Why says why the server's tokenizer was not used, when it was not.
	Why string `json:"why,omitempty"`
	// Sized counts requests resized against the server's tokenizer;
	// SizeErrors those it could not count (sent as generated).
	Sized      int64 `json:"sized"`
	SizeErrors int64 `json:"size_errors,omitempty"`
	// AtFloor counts sized prompts asked shorter than the server's chat
	// template and the shared prefix (with one word) already are.
	AtFloor int64 `json:"at_floor,omitempty"`
	// ToleranceTokens is the promise: |served − requested| ≤ it for sized
	// prompts (0 for tokentrace's own lengths on its own engine).
	ToleranceTokens int `json:"tolerance_tokens"`
	// Requests with a served length from the server (usage); the means
	// and the gap (served − requested) over them; Beyond counts those
	// whose gap exceeds the tolerance.
	Requests      int64   `json:"requests"`
	RequestedMean float64 `json:"requested_mean"`
	ServedMean    float64 `json:"served_mean"`
	GapMin        int64   `json:"gap_min"`
	GapP50        int64   `json:"gap_p50"`
	GapMax        int64   `json:"gap_max"`
	Beyond        int64   `json:"beyond_tolerance"`
}

// lengthGaps gathers PromptLengths from the records as they finish.
type lengthGaps struct {
	mu         sync.Mutex
	tok        *serverTokenizer
	why        string
	sized      int64
	sizeErrors int64
	floor      int64
	firstErr   string
	gaps       stats.Sample
	n          int64
	asked, got int64
	min, max   int64
	beyond     int64
}

// prepare sizes a request's prompt against the server's tokenizer, when
// there is one; a failure is counted and the request goes as generated.
func (g *lengthGaps) prepare(ctx context.Context, req *workload.Request) {
	if g.tok == nil || !req.Filler {
		return
	}
	err := sizePrompt(ctx, g.tok, req)
	g.mu.Lock()
	defer g.mu.Unlock()
	if errors.Is(err, errPromptFloor) {
		g.sized++
		g.floor++
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			g.sizeErrors++
			if g.firstErr == "" {
				g.firstErr = err.Error()
			}
		}
		return
	}
	g.sized++
}

// add notes a finished record.
func (g *lengthGaps) add(rec *latency.Record) {
	if rec.Warmup || !rec.OK() || rec.InputSource == latency.SourceRequest {
		return
	}
	asked := int64(rec.InputTokens)
	if rec.InputTokensRequested > 0 {
		asked = int64(rec.InputTokensRequested)
	}
	gap := int64(rec.InputTokens) - asked
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 || gap < g.min {
		g.min = gap
	}
	if g.n == 0 || gap > g.max {
		g.max = gap
	}
	g.n++
	g.asked += asked
	g.got += int64(rec.InputTokens)
	g.gaps.Add(gap)
	tol := int64(0)
	if g.tok != nil {
		tol = SizeTolerance
	}
	if gap > tol || gap < -tol {
		g.beyond++
	}
}

// result is the summary's PromptLengths; nil when no request had a served
// length.
func (g *lengthGaps) result() *PromptLengths {
	g.mu.Lock()
	defer g.mu.Unlock()
	pl := &PromptLengths{Tokenizer: "tokentrace", Why: g.why, Sized: g.sized, SizeErrors: g.sizeErrors, AtFloor: g.floor,
		Requests: g.n, GapMin: g.min, GapMax: g.max, Beyond: g.beyond}
	if g.tok != nil {
		pl.Tokenizer, pl.ToleranceTokens = g.tok.Describe(), SizeTolerance
	}
	if g.n == 0 && g.sized == 0 && g.sizeErrors == 0 {
		return nil
	}
	if g.n > 0 {
		pl.RequestedMean, pl.ServedMean = float64(g.asked)/float64(g.n), float64(g.got)/float64(g.n)
		p, _ := g.gaps.Percentiles(50)
		pl.GapP50 = p[0]
	}
	return pl
}

// warnings words a gap beyond the tolerance and sizing failures.
func (pl *PromptLengths) warnings(firstErr string) []string {
	if pl == nil {
		return nil
	}
	var out []string
	if pl.Beyond > 0 {
		how := "the server counted prompts with its own tokenizer and chat template; no tokenizer endpoint sized them"
		if pl.Why != "" {
			how += " (" + pl.Why + ")"
		}
		if pl.Sized > 0 {
			how = fmt.Sprintf("prompts were sized against %s within %d token(s), yet the server's usage counted otherwise", pl.Tokenizer, pl.ToleranceTokens)
			if pl.AtFloor > 0 {
				how += fmt.Sprintf("; %d were asked shorter than the server's chat template with one word already is", pl.AtFloor)
			}
		}
		out = append(out, fmt.Sprintf("prompt lengths: %d of %d requests were served a prompt length other than requested (mean %.1f served against %.1f requested; "+
			"served − requested P50 %+d, from %+d to %+d tokens): %s; a twin run with the same flags simulates the requested lengths, `simulate --like` the served ones",
			pl.Beyond, pl.Requests, pl.ServedMean, pl.RequestedMean, pl.GapP50, pl.GapMin, pl.GapMax, how))
	}
	if pl.SizeErrors > 0 {
		out = append(out, fmt.Sprintf("prompt lengths: %d prompts could not be sized against %s and went as generated (first: %s)", pl.SizeErrors, pl.Tokenizer, firstErr))
	}
	return out
}
