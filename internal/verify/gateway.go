package verify

import (
	"fmt"
	"strconv"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/field"
)

// The gateway's admission limit as its configuration evidence names it
// (tokentrace_gateway_config_info): its pool's queue.concurrency and
// queue.max_size.
const (
	keyGatewayConcurrency = "gateway_concurrency"
	keyGatewayMaxQueue    = "gateway_max_queue"
)

// gatewayLimit is a gateway's admission limit: at most conc requests in
// flight upstream (0: no limit), queue more waiting, the rest refused.
type gatewayLimit struct{ conc, queue int }

// gatewayLimitOf is the limit a run's evidence shows, with the changes'
// values in place of the run's where set is true (the second run's).
func gatewayLimitOf(server map[string]string, cs []Change, set bool) (gatewayLimit, error) {
	v := map[string]string{keyGatewayConcurrency: server[keyGatewayConcurrency], keyGatewayMaxQueue: server[keyGatewayMaxQueue]}
	for _, c := range cs {
		if _, ok := v[c.Setting]; ok {
			if set {
				v[c.Setting] = c.After
			} else if c.BeforeApplied || v[c.Setting] == "" {
				v[c.Setting] = c.Before
			}
		}
	}
	var g gatewayLimit
	for k, p := range map[string]*int{keyGatewayConcurrency: &g.conc, keyGatewayMaxQueue: &g.queue} {
		if v[k] == "" {
			continue
		}
		n, err := strconv.Atoi(v[k])
		if err != nil || n < 0 {
			return g, field.Invalid(k, v[k], "not a non-negative integer")
		}
		*p = n
	}
	return g, nil
}

// foldGateway folds a gateway's admission limit into d's engines, which
// the twin runs without a gateway: with r replicas sharing the limit,
// each replica runs at most c = ⌈conc ÷ r⌉ sequences (its max_num_seqs s
// where lower) and holds at most ⌈queue ÷ r⌉ + max(0, c − s) waiting (the
// gateway's queue, and what it admits beyond the engine's batch), the rest
// refused at once as the gateway's 429. It says what it did ("" for no
// limit). The gateway's one queue becomes one per replica: an
// approximation where r > 1.
func foldGateway(d *capacity.Deployment, g gatewayLimit) (string, error) {
	if g.conc <= 0 {
		return "", nil
	}
	ec, _, err := d.Engine.Config()
	if err != nil {
		return "", err
	}
	s := ec.WithDefaults().MaxNumSeqs
	r := max(d.Replicas, 1)
	c := (g.conc + r - 1) / r
	wait := (g.queue+r-1)/r + max(0, c-s)
	if d.Engine.MaxWaiting > 0 { // the engine's own bound on what reaches it
		wait = (g.queue+r-1)/r + min(d.Engine.MaxWaiting, max(0, c-s))
	}
	d.Engine.MaxNumSeqs, d.Engine.MaxWaiting = min(s, c), max(wait, 1)
	return fmt.Sprintf("the gateway's admission limit (concurrency %d, queue %d over %d replica(s)) is folded into each engine: max_num_seqs %d, max_waiting %d",
		g.conc, g.queue, r, d.Engine.MaxNumSeqs, d.Engine.MaxWaiting), nil
}

// foldGateways folds the first run's gateway limit into its twin and the
// limit after the changes into the twin with them (after), and says so.
func foldGateways(before, after *capacity.Deployment, server map[string]string, cs []Change) ([]string, error) {
	var notes []string
	for _, x := range []struct {
		d    *capacity.Deployment
		set  bool
		name string
	}{{before, false, "first run"}, {after, true, "prediction"}} {
		g, err := gatewayLimitOf(server, cs, x.set)
		if err != nil {
			return nil, err
		}
		n, err := foldGateway(x.d, g)
		if err != nil {
			return nil, err
		}
		if n != "" {
			notes = append(notes, "the "+x.name+": "+n)
		}
	}
	return notes, nil
}

// gatewayBasis sets on the first run's twin the replica set, routing
// policy and prefill pool (where its records did not already make it
// disaggregated) its gateway evidence shows (a twin rebuilt from one engine's
// evidence runs one replica), and says so; nothing for a run without a
// gateway.
func gatewayBasis(d *capacity.Deployment, server map[string]string) ([]string, error) {
	if _, ok := server[keyGatewayConcurrency]; !ok {
		return nil, nil
	}
	var notes []string
	for _, k := range []string{"replicas", "balancer", keyPrefillReplicas} {
		v, ok := server[k]
		if !ok || v == "" || k == keyPrefillReplicas && (v == "0" || d.Disaggregated()) {
			continue
		}
		s, _ := settingByKey(k)
		if err := s.apply(d, v); err != nil {
			return nil, field.Invalid(k, v, "%v", err)
		}
		notes = append(notes, fmt.Sprintf("the first run's twin takes the gateway's %s: %s", k, v))
	}
	return notes, nil
}
