package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// TestMixedLoad sends good, bad, faulty and abandoned requests at once:
// every good request still gets exactly its tokens, and when all is done
// the engine holds nothing.
func TestMixedLoad(t *testing.T) {
	cfg := testConfig(time.Millisecond)
	cfg.Engine.EnablePrefixCaching = true
	s := startServer(t, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	type job struct {
		kind   int
		tokens int
		seed   uint64
	}
	jobs := make([]job, 240)
	for i := range jobs {
		jobs[i] = job{kind: rng.IntN(6), tokens: 1 + rng.IntN(30), seed: rng.Uint64()}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := tokenizer.Filler(20+int(j.seed%200), j.seed%7) // shared prefixes among seeds
			stream := j.kind%2 == 0
			body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":%d,"ignore_eos":true,"stream":%t,"stream_options":null}`, prompt, j.tokens, stream)
			if stream {
				body = strings.Replace(body, `"stream_options":null`, `"stream_options":{"include_usage":true}`, 1)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var hdr []string
			switch j.kind {
			case 2: // malformed
				body = body[:len(body)/2]
			case 3: // forced fault
				hdr = []string{FaultHeader, []string{"429", "503", "reset", "stall=20ms"}[i%4]}
			case 4: // abandoned after a moment
				time.AfterFunc(time.Duration(j.seed%5)*time.Millisecond, cancel)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/completions", strings.NewReader(body))
			for k := 0; k+1 < len(hdr); k += 2 {
				req.Header.Set(hdr[k], hdr[k+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // abandoned or reset
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil || j.kind >= 2 {
				return
			}
			// Good requests (kinds 0 and 1): exact token counts.
			got := 0
			if stream {
				rd := sse.NewReader(bytes.NewReader(raw), func() int64 { return 0 }, 0)
				for {
					ev, err := rd.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						errs <- fmt.Errorf("job %d: %w", i, err)
						return
					}
					if string(ev.Data) == "[DONE]" {
						continue
					}
					var c openai.CompletionChunk
					if err := json.Unmarshal(ev.Data, &c); err != nil {
						errs <- fmt.Errorf("job %d: %w: %s", i, err, ev.Data)
						return
					}
					if c.Usage != nil && c.Usage.CompletionTokens != j.tokens {
						errs <- fmt.Errorf("job %d: usage %d tokens, want %d", i, c.Usage.CompletionTokens, j.tokens)
					}
					if len(c.Choices) > 0 {
						got += tokenizer.Count(c.Choices[0].Text)
					}
				}
			} else {
				var c openai.Completion
				if err := json.Unmarshal(raw, &c); err != nil {
					errs <- fmt.Errorf("job %d: %v: %s", i, err, raw)
					return
				}
				got = tokenizer.Count(c.Choices[0].Text)
			}
			if got != j.tokens {
				errs <- fmt.Errorf("job %d (stream %t): %d tokens of text, want %d", i, stream, got, j.tokens)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !waitFor(5*time.Second, func() bool {
		st := s.Engine().Stats()
		return st.Running == 0 && st.Waiting == 0 && st.KVUsage == 0
	}) {
		t.Errorf("engine not drained: %+v", s.Engine().Stats())
	}
}
