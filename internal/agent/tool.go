package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// CallRequest is the JSON body POSTed to a tool endpoint for one call.
// An endpoint of the user's answers it as it likes; the built-in
// simulator waits LatencyMS and answers ResultTokens tokens.
type CallRequest struct {
	Name    string `json:"name"`
	Session int64  `json:"session"`
	Step    int    `json:"step"`
	Call    int    `json:"call"` // 0-based, in the order the step asked
	// LatencyMS and ResultTokens are what the workload drew for the call.
	LatencyMS    float64 `json:"latency_ms"`
	ResultTokens int     `json:"result_tokens"`
}

// CallResponse is a tool endpoint's answer: the result the next step's
// prompt carries.
type CallResponse struct {
	Content string `json:"content"`
}

// maxBody bounds a call's body and a result read by the caller.
const maxBody = 8 << 20

// Wait blocks for d or until ctx is done.
type Wait func(ctx context.Context, d time.Duration) error

// TimerWait is Wait on the wall clock.
func TimerWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Simulator is the built-in tool endpoint: it answers a call after the
// latency the call carries, with a result of the length it asks for
// (deterministic text: the same call, the same result). Latencies are
// drawn by the workload from its seeded stream, so the simulator holds no
// randomness of its own.
type Simulator struct {
	Wait Wait // nil: TimerWait
}

func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		openai.WriteError(w, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "POST a tool call", "", ""), 0)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		openai.BadRequest("", "reading the call: %v", err).Write(w, 0)
		return
	}
	var c CallRequest
	if err := json.Unmarshal(body, &c); err != nil {
		openai.BadRequest("", "not a tool call: %v", err).Write(w, 0)
		return
	}
	if !(c.LatencyMS >= 0) || c.LatencyMS > float64(workload.MaxToolLatency/time.Millisecond) || c.ResultTokens < 0 || c.ResultTokens > workload.MaxToolResultTokens {
		openai.BadRequest("latency_ms", "latency_ms %g or result_tokens %d out of range", c.LatencyMS, c.ResultTokens).Write(w, 0)
		return
	}
	wait := s.Wait
	if wait == nil {
		wait = TimerWait
	}
	if wait(r.Context(), time.Duration(c.LatencyMS*float64(time.Millisecond))) != nil {
		return // the caller gave up
	}
	seed := uint64(c.Session)<<24 ^ uint64(c.Step)<<12 ^ uint64(c.Call)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(CallResponse{Content: tokenizer.Filler(c.ResultTokens, seed)})
}

// Server is a Simulator listening on a loopback port.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// StartSimulator serves a Simulator on 127.0.0.1 (any free port), with
// the header, body and idle deadlines of every tokentrace server.
func StartSimulator(sim *Simulator) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tool simulator: %w", err)
	}
	s := &Server{ln: ln, srv: httplimit.Limits{}.WithDefaults(1).Server(sim)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the endpoint calls are POSTed to.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/v1/tools/call" }

// Close stops the server and the calls it is answering.
func (s *Server) Close() error {
	err := s.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
