package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// DefaultTimeout bounds one tool call when the caller is given none.
const DefaultTimeout = 30 * time.Second

// Caller makes agent steps' tool calls against one endpoint. It is safe
// for concurrent use.
type Caller struct {
	url     string
	timeout time.Duration
	headers http.Header
	hc      *http.Client
	now     func() int64
}

// NewCaller returns a caller of the endpoint at url (calls are POSTed to
// it as given). timeout bounds each call from its send to its whole
// answer (0: DefaultTimeout); now reads the run's clock (nanoseconds since
// its start), which the spans are stamped with. headers go with every
// call.
func NewCaller(url string, timeout time.Duration, headers http.Header, now func() int64) (*Caller, error) {
	if err := CheckURL(url); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	return &Caller{url: url, timeout: timeout, headers: headers, hc: &http.Client{Transport: tr, CheckRedirect: httplimit.NoRedirects}, now: now}, nil
}

// CheckURL says why url cannot be a tool endpoint, or returns nil.
func CheckURL(raw string) error {
	u, err := neturl.Parse(raw)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("tool url %q: want http://host[:port]/path", redact.URL(raw))
	}
	return nil
}

// Close releases idle connections.
func (c *Caller) Close() { c.hc.CloseIdleConnections() }

// Step makes one step's tool calls: all at once when parallel, else one
// after another, stopping at the first that fails. It returns one span per
// call made (in the order asked) and the results of the successful ones;
// err names the first failed call (by step and name) and its span carries
// the error kind.
func (c *Caller) Step(ctx context.Context, session int64, step int, calls []workload.ToolCall, parallel bool) ([]latency.ToolSpan, []string, error) {
	spans := make([]latency.ToolSpan, len(calls))
	results := make([]string, len(calls))
	made := len(calls)
	if parallel {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spans[i], results[i] = c.call(ctx, session, step, i, calls[i])
			}()
		}
		wg.Wait()
	} else {
		for i := range calls {
			spans[i], results[i] = c.call(ctx, session, step, i, calls[i])
			if spans[i].ErrorKind != "" {
				made = i + 1
				break
			}
		}
	}
	spans, results = spans[:made], results[:made]
	for i, s := range spans {
		if s.ErrorKind != "" {
			return spans, results, fmt.Errorf("step %d: tool call %d (%s): %s", step, i, s.Name, s.Error)
		}
	}
	return spans, results, nil
}

// call makes one call and times it.
func (c *Caller) call(ctx context.Context, session int64, step, i int, tc workload.ToolCall) (latency.ToolSpan, string) {
	span := latency.ToolSpan{Name: tc.Name, StartNS: c.now()}
	content, kind, err := c.post(ctx, CallRequest{Name: tc.Name, Session: session, Step: step, Call: i,
		LatencyMS: float64(tc.Latency) / 1e6, ResultTokens: tc.ResultTokens})
	span.EndNS = c.now()
	if err != nil {
		span.ErrorKind, span.Error = kind, redact.Text(err.Error())
		return span, ""
	}
	span.ResultTokens = tokenizer.Count(content)
	return span, content
}

// post sends a call and reads its result; on failure it returns the error
// kind.
func (c *Caller) post(ctx context.Context, body CallRequest) (string, latency.ErrorKind, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, errToolTimeout)
	defer cancel()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(b))
	if err != nil {
		return "", latency.FailTool, err
	}
	for k, v := range c.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", c.kind(ctx), c.failure(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return "", c.kind(ctx), c.failure(ctx, err)
	}
	if resp.StatusCode >= 400 {
		return "", latency.FailTool, fmt.Errorf("status %d: %s", resp.StatusCode, errorMessage(data))
	}
	if len(data) > maxBody {
		return "", latency.FailTool, fmt.Errorf("result over %d bytes", maxBody)
	}
	var out CallResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return "", latency.FailTool, fmt.Errorf(`answer is not {"content": "..."}: %v`, err)
	}
	return out.Content, "", nil
}

var errToolTimeout = errors.New("tool call timed out")

// kind is FailToolTimeout when the call's own deadline passed.
func (c *Caller) kind(ctx context.Context) latency.ErrorKind {
	if errors.Is(context.Cause(ctx), errToolTimeout) {
		return latency.FailToolTimeout
	}
	return latency.FailTool
}

// failure says why a call got no answer.
func (c *Caller) failure(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errToolTimeout) {
		return fmt.Errorf("no answer within %s", c.timeout)
	}
	return err
}

// errorMessage is the OpenAI error's message in body, or the body's start.
func errorMessage(body []byte) string {
	var e openai.ErrorBody
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
