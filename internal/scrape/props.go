package scrape

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxPropsBytes bounds what Props reads: llama-server's /props carries its
// chat template, a few kilobytes.
const maxPropsBytes = 1 << 20

// Props reads llama-server's /props beside metricsURL (its configuration,
// which its /metrics does not expose): the slots as max_num_seqs (vLLM's
// name, the setting it is) and each slot's context as n_ctx. A key the
// server does not give is left out. As Get, errors never quote the URL.
func Props(ctx context.Context, client *http.Client, metricsURL string, header http.Header) (map[string]string, error) {
	body, err := get(ctx, client, strings.TrimSuffix(metricsURL, "/metrics")+"/props", "/props", "", header)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return ParseProps(io.LimitReader(body, maxPropsBytes))
}

// ParseProps reads a /props document (llama-server's keys: total_slots,
// default_generation_settings.n_ctx).
func ParseProps(r io.Reader) (map[string]string, error) {
	var p struct {
		TotalSlots *int `json:"total_slots"`
		Defaults   struct {
			NCtx *int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := json.NewDecoder(r).Decode(&p); err != nil {
		return nil, fmt.Errorf("/props: %w", err)
	}
	out := map[string]string{}
	if p.TotalSlots != nil && *p.TotalSlots > 0 {
		out["max_num_seqs"] = strconv.Itoa(*p.TotalSlots)
	}
	if n := p.Defaults.NCtx; n != nil && *n > 0 {
		out["n_ctx"] = strconv.Itoa(*n)
	}
	return out, nil
}
