// Package serve is `tokentrace serve`: the simulated engine
// (internal/engine) behind an OpenAI-compatible HTTP API, with vLLM's
// /metrics, per-request server timing, and seeded fault injection.
// docs/serve.md is the user's guide.
//
// In-process use (what `tokentrace bench` does when given no --url):
//
//	srv, err := serve.Start(ctx, serve.Config{Engine: engCfg}, "127.0.0.1:0")
//	if err != nil { ... }
//	defer srv.Close()
//	client := openai.NewClient(option.WithBaseURL(srv.URL()))
//
// It never imports bench, gateway, app, report, simulate, calibrate or
// capacity: it serves, and measures nothing but its own stages; only
// internal/cli imports it.
package serve
