package whatif

import (
	"cmp"
	"fmt"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/report"
)

// maxSplits bounds the P:D splits "disaggregate" tries for a run of many
// replicas: the ones nearest each end and the middle.
const maxSplits = 5

// disaggregate is an aggregated run's replicas split into a prefill and
// a decode pool (the same GPUs; one more for a single replica), or a
// disaggregated run's pools merged into aggregated replicas.
func disaggregate(c *state) []variant {
	d := c.base
	if d.Disaggregated() {
		n := d.Replicas + d.PrefillReplicas
		a := d
		a.Replicas, a.PrefillReplicas, a.KVLink = n, 0, ""
		return []variant{{title: fmt.Sprintf("aggregated: %d replicas", n),
			setting: fmt.Sprintf("prefill_replicas: %d → 0, replicas: %d → %d (no KV transfer)", d.PrefillReplicas, d.Replicas, n), d: a,
			assumes: []string{"every instance prefills and decodes: no KV transfer, prefills interleaved with decodes as the engine's chunked prefill allows"}}}
	}
	link := linkName(c.o.KVLink)
	n := d.Replicas
	var ps []int
	if n == 1 {
		ps = []int{1} // 1P1D: one more GPU
	} else {
		for p := 1; p < n; p++ {
			ps = append(ps, p)
		}
		ps = thin(ps, maxSplits)
	}
	var out []variant
	for _, p := range ps {
		x := d
		x.PrefillReplicas, x.Replicas, x.KVLink = p, max(n-p, 1), link
		assumes := []string{fmt.Sprintf("each request's KV cache is pulled from its prefill instance over %s (perfmodel.Link), then decoded on the decode pool; the gateway's exchange between the halves is not modelled", linkOf(link))}
		if n == 1 {
			assumes = append(assumes, "one more GPU than the run (1 prefill + 1 decode instance)")
		} else {
			assumes = append(assumes, fmt.Sprintf("the run's %d replicas split, no GPU added", n))
		}
		out = append(out, variant{title: fmt.Sprintf("disaggregated %dP:%dD", x.PrefillReplicas, x.Replicas),
			setting: fmt.Sprintf("replicas: %d → %d decode + %d prefill (kv_link %s)", n, x.Replicas, x.PrefillReplicas, link), d: x, assumes: assumes})
	}
	return out
}

// pdRatios moves one instance between a disaggregated run's pools (the
// same GPUs) and adds one to the side the findings say waits: more
// prefill for a prefill queue, more decode for a decode queue, both
// when asked for every lever.
func pdRatios(c *state) []variant {
	d := c.base
	if !d.Disaggregated() {
		return nil
	}
	more := func(dp, dd int, why string) variant {
		x := d
		x.PrefillReplicas, x.Replicas = d.PrefillReplicas+dp, d.Replicas+dd
		return variant{title: fmt.Sprintf("P:D %d:%d", x.PrefillReplicas, x.Replicas),
			setting: fmt.Sprintf("P:D %d:%d → %d:%d", d.PrefillReplicas, d.Replicas, x.PrefillReplicas, x.Replicas), d: x,
			assumes: []string{why}}
	}
	prefill := c.findings[report.RulePDPrefillQueue] || c.o.all()
	decode := c.findings[report.RulePDDecodeQueue] || c.o.all()
	var out []variant
	if prefill {
		if d.Replicas > 1 {
			out = append(out, more(1, -1, "one decode instance becomes a prefill instance: the same GPUs"))
		}
		out = append(out, more(1, 0, "one more prefill instance (one more GPU)"))
	}
	if decode {
		if d.PrefillReplicas > 1 {
			out = append(out, more(-1, 1, "one prefill instance becomes a decode instance: the same GPUs"))
		}
		out = append(out, more(0, 1, "one more decode instance (one more GPU)"))
	}
	return out
}

// kvLinks are the link presets faster than a disaggregated run's.
func kvLinks(c *state) []variant {
	d := c.base
	if !d.Disaggregated() {
		return nil
	}
	cur := linkOf(linkName(d.KVLink))
	var out []variant
	for _, name := range perfmodel.LinkNames() {
		l := linkOf(name)
		if l.BytesPerSecond <= cur.BytesPerSecond {
			continue
		}
		x := d
		x.KVLink = name
		out = append(out, variant{title: "KV link " + name, setting: fmt.Sprintf("kv_link: %s → %s", cur.Name, name), d: x,
			assumes: []string{fmt.Sprintf("the KV cache moves over %s instead of %s", l, cur)}})
	}
	return out
}

// prefillTP doubles a disaggregated run's prefill pool's TP (the same
// number of prefill instances, each on twice the GPUs).
func prefillTP(c *state) []variant {
	d := c.base
	if !d.Disaggregated() {
		return nil
	}
	cur := cmp.Or(d.PrefillTP, c.pc.TP, 1)
	x := d
	x.PrefillTP = 2 * cur
	return []variant{{title: fmt.Sprintf("prefill TP%d", x.PrefillTP),
		setting: fmt.Sprintf("prefill pool's tensor_parallel_size: %d → %d", cur, x.PrefillTP), d: x,
		assumes: []string{fmt.Sprintf("each of the %d prefill instances on %d GPUs instead of %d (the decode pool unchanged); the KV cache moves as min(prefill TP, decode TP %d) shards at once, one link per GPU",
			d.PrefillReplicas, x.PrefillTP, cur, max(c.pc.TP, 1))}}}
}

// linkName is a link preset's name, perfmodel.DefaultLink for none.
func linkName(name string) string {
	if name == "" {
		return perfmodel.DefaultLink
	}
	return name
}

// linkOf is a preset checked by Options.Check or the run's own flags.
func linkOf(name string) perfmodel.Link {
	l, _ := perfmodel.LookupLink(name)
	return l
}

// thin keeps at most n of xs, evenly spread, the ends included.
func thin(xs []int, n int) []int {
	if len(xs) <= n {
		return xs
	}
	out := make([]int, 0, n)
	for i := range n {
		out = append(out, xs[i*(len(xs)-1)/(n-1)])
	}
	return out
}

// pdName is a deployment's pools in the run's description ("" when
// aggregated).
func pdName(d capacity.Deployment) string {
	if !d.Disaggregated() {
		return ""
	}
	return fmt.Sprintf(", %dP:%dD over %s", d.PrefillReplicas, d.Replicas, linkName(d.KVLink))
}
