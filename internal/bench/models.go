package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// probeClient is the HTTP client the target's GET /v1/models is asked
// with (firstModel, checkModel): no redirects followed, as for every
// request bench sends.
func probeClient() *http.Client { return &http.Client{CheckRedirect: httplimit.NoRedirects} }

// firstModel asks GET /v1/models, through hc, for the first model id.
func firstModel(ctx context.Context, hc *http.Client, t Target) (string, error) {
	ids, err := listModels(ctx, hc, t)
	if err != nil {
		return "", err
	}
	if len(ids) == 0 || ids[0] == "" {
		u, _ := t.apiURL("/models")
		return "", fmt.Errorf("%s lists no models (give --model)", u)
	}
	return ids[0], nil
}

// ModelNotServedError is a --model that the target's GET /v1/models does
// not list and that a first request was refused for: bad input, found
// before the run.
type ModelNotServedError struct {
	Model, URL string
	Served     []string
	Suggest    string // the served name it most likely meant; "" when none is close
	Answer     string // the server's answer to a request naming it
}

func (e *ModelNotServedError) Error() string {
	msg := fmt.Sprintf("--model %q is not served by %s (it lists %s; a request for it got %s)",
		e.Model, e.URL, quoteList(e.Served, 8), e.Answer)
	if e.Suggest != "" {
		msg += fmt.Sprintf(": did you mean --model %q?", e.Suggest)
	}
	return msg
}

// checkModel judges a --model the target's GET /v1/models does not list
// by one small request: a 4xx answer is a *ModelNotServedError; any other
// is a warning, returned to be shown (a single-model server, such as
// llama.cpp's, answers whatever name it is sent). A target that lists no
// models (no such endpoint, an error, an empty list) is not judged.
func checkModel(ctx context.Context, hc *http.Client, t Target) (warning string, err error) {
	ids, err := listModels(ctx, hc, t)
	if err != nil || len(ids) == 0 || slices.Contains(ids, t.Model) {
		return "", nil
	}
	u, _ := t.apiURL("/models")
	e := &ModelNotServedError{Model: t.Model, URL: redact.URL(u), Served: ids, Suggest: field.Suggest(t.Model, ids)}
	if e.Suggest == "" && len(ids) == 1 {
		e.Suggest = ids[0]
	}
	c, err := NewClient(t, func() int64 { return time.Now().UnixNano() }, 1)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var rec latency.Record
	pctx, cancel := context.WithTimeout(ctx, max(t.Timeout, 10*time.Second))
	defer cancel()
	c.Do(pctx, &workload.Request{Prompt: "Hi", MaxTokens: 1, InputTokens: 1}, &rec)
	if rec.ErrorKind == latency.FailHTTP4xx {
		e.Answer = strconv.Quote(rec.Error)
		return "", e
	}
	return fmt.Sprintf("--model %q is not among the models %s lists (%s), but the server answers for it; the results record the name sent",
		t.Model, e.URL, quoteList(ids, 8)), nil
}

// quoteList is up to n names quoted, with how many more there are.
func quoteList(names []string, n int) string {
	q := make([]string, 0, n+1)
	for i, s := range names {
		if i == n {
			q = append(q, fmt.Sprintf("and %d more", len(names)-n))
			break
		}
		q = append(q, strconv.Quote(s))
	}
	return strings.Join(q, ", ")
}

// listModels asks GET /v1/models, through hc, for the ids it lists, in
// its order (openai.ModelList).
func listModels(ctx context.Context, hc *http.Client, t Target) ([]string, error) {
	u, err := t.apiURL("/models")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := t.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot list models at %s (is the server up? or give --model): %w", redact.URL(u), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing models at %s: %s: %s (give --model to skip this)", redact.URL(u), resp.Status, truncate(strings.TrimSpace(string(b))))
	}
	var list openai.ModelList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s lists no models (give --model)", redact.URL(u))
	}
	ids := make([]string, 0, len(list.Data))
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	return ids, nil
}
