package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 8 << 20

// Server is the reference application: an OpenAI-compatible chat endpoint
// that retrieves passages, assembles a prompt, calls the model upstream
// and checks the answer, reporting every stage in Server-Timing.
type Server struct {
	cfg       Config
	index     *Index
	delay     workload.DelayDist
	filter    *filter
	clock     Clock
	hc        *http.Client
	chatURL   string
	modelsURL string
	log       *slog.Logger
	nonce     string
	seq       atomic.Uint64
	// endGraceTest replaces streamEndGrace when set (tests).
	endGraceTest time.Duration

	rngMu sync.Mutex
	rng   *mrand.Rand
}

// NewServer checks cfg and builds the application and its index.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	delay, _ := workload.ParseDelay(cfg.RetrievalLatency)
	base, err := url.Parse(strings.TrimSpace(cfg.Upstream))
	if err != nil {
		return nil, err
	}
	p := strings.TrimSuffix(base.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	chat, models := *base, *base
	chat.Path, models.Path = p+"/chat/completions", p+"/models"
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = 10 * time.Minute
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	cfg.Limits = cfg.Limits.WithDefaults(2) // each client connection holds an upstream one
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // a gzip layer would batch events
		ForceAttemptHTTP2:   true,
	}
	return &Server{
		cfg: cfg, index: NewIndex(corpusText, cfg.Sources), delay: delay, filter: newFilter(cfg.Blocklist),
		clock: cfg.Clock, hc: &http.Client{Transport: tr, CheckRedirect: httplimit.NoRedirects}, chatURL: chat.String(), modelsURL: models.String(),
		log: slog.New(redact.Handler(log.Handler())), nonce: hex.EncodeToString(nonce[:]),
		rng: mrand.New(mrand.NewPCG(cfg.Seed, 0x5eed)),
	}, nil
}

// Describe is a one-line summary of the application's settings.
func (s *Server) Describe() string {
	c := s.cfg
	return fmt.Sprintf("app: upstream %s; %d passages in %d sources, %s retrieval (+%s per call), %d candidates each, top %d; guardrail %s (%v per token)",
		redact.URL(c.Upstream), s.index.Len(), c.Sources, c.Retrieval, s.delay, c.Candidates, c.TopK, c.Guardrail, c.GuardrailCost)
}

// Handler serves the application's endpoints: POST /v1/chat/completions,
// GET /v1/models (the upstream's list), GET /health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.chat)
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound,
			fmt.Sprintf("no endpoint %s %s (this application serves POST /v1/chat/completions)", r.Method, r.URL.Path), "", "not_found"), 0)
	})
	return mux
}

// Serve serves the application on ln until ctx ends, then lets requests
// in flight finish for up to Config.Grace (httplimit.Serve, the one
// lifecycle of this module's servers) and returns: nil, or an error that
// says requests were cut.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	err := s.cfg.Limits.Serve(ctx, ln, s.Handler(), httplimit.Stop{Grace: s.cfg.Grace})
	s.hc.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	return nil
}

// models passes on the upstream's model list.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		openai.WriteError(w, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "use GET", "", "method_not_allowed"), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.modelsURL, nil)
	if s.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.upstreamUnreachable(w, err)
		return
	}
	defer resp.Body.Close()
	if e, ok := redirectError(resp.StatusCode); ok {
		openai.WriteError(w, http.StatusBadGateway, e, 0)
		return
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 8<<20))
}

// upstreamUnreachable answers 502, the upstream's address and the error
// masked of credentials.
func (s *Server) upstreamUnreachable(w http.ResponseWriter, err error) {
	msg := redact.Values(redact.Text(err.Error()), s.cfg.APIKey)
	s.log.Warn("upstream unreachable", "upstream", redact.URL(s.cfg.Upstream), "err", msg)
	openai.WriteError(w, http.StatusBadGateway, openai.NewError(openai.TypeServer, "the model's server is unreachable: "+msg, "", "upstream_unreachable"), 0)
}

// requestID is the client's X-Request-Id when it is 1 to 128 visible ASCII
// characters, else a generated one.
func (s *Server) requestID(r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	ok := id != "" && len(id) <= 128
	for i := 0; ok && i < len(id); i++ {
		ok = id[i] > ' ' && id[i] <= '~'
	}
	if ok {
		return id
	}
	return fmt.Sprintf("app-%s-%d", s.nonce, s.seq.Add(1))
}

// draw is one retrieval call's added latency.
func (s *Server) draw() time.Duration {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.delay.Sample(s.rng)
}
