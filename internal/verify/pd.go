package verify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// The P/D settings: keyPDSplit is a deployment's pools ("2" for two
// aggregated replicas, "1P:2D" for one prefill and two decode instances),
// keyPrefillReplicas the gateway's evidence of its prefill pool
// (tokentrace_gateway_config_info), keyKVLink the link preset the KV
// cache moves over.
const (
	keyPDSplit         = "pd_split"
	keyPrefillReplicas = "prefill_replicas"
	keyKVLink          = "kv_link"
)

// PD is a run's disaggregated serving as its twin was rebuilt (the
// gateway's pools, else 1P:1D, and the link preset nearest its records'
// transfers); Prefill 0 for an aggregated run (Decode then its replicas).
type PD struct {
	Prefill, Decode int
	Link            string
}

// pdOf is d's pools as a PD.
func pdOf(d capacity.Deployment) PD {
	if !d.Disaggregated() {
		return PD{Decode: d.Replicas}
	}
	return PD{Prefill: d.PrefillReplicas, Decode: max(d.Replicas, 1), Link: d.KVLink}
}

// PDOf is what a run's twin shows of disaggregated serving, for
// Config.AfterPD.
func PDOf(d capacity.Deployment) PD { return pdOf(d) }

// split is the pools as keyPDSplit writes them.
func split(prefill, replicas int) string {
	if prefill <= 0 {
		return strconv.Itoa(max(replicas, 1))
	}
	return fmt.Sprintf("%dP:%dD", prefill, max(replicas, 1))
}

// parseSplit reads keyPDSplit's value: "N" (aggregated), "NP:MD" or
// "N:M" (prefill:decode).
func parseSplit(v string) (prefill, decode int, err error) {
	p, d, ok := strings.Cut(strings.ToUpper(strings.TrimSpace(v)), ":")
	if !ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return 0, 0, fmt.Errorf("%q is not a replica count or a P:D split such as 1P:1D", v)
		}
		return 0, n, nil
	}
	pn, err1 := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(p), "P"))
	dn, err2 := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(d), "D"))
	if err1 != nil || err2 != nil || pn < 1 || dn < 1 || pn > 4096 || dn > 4096 {
		return 0, 0, fmt.Errorf("%q is not a P:D split such as 1P:1D or 1:2 (1 to 4096 instances a side)", v)
	}
	return pn, dn, nil
}

// applySplit sets keyPDSplit's pools on d.
func applySplit(d *capacity.Deployment, v string) error {
	p, n, err := parseSplit(v)
	if err != nil {
		return err
	}
	d.PrefillReplicas, d.Replicas = p, n
	if p > 0 && d.KVLink == "" {
		d.KVLink = perfmodel.DefaultLink
	}
	if p == 0 {
		d.KVLink = ""
	}
	return nil
}

// applyLink sets keyKVLink's preset on d.
func applyLink(d *capacity.Deployment, v string) error {
	if _, err := perfmodel.LookupLink(v); err != nil {
		return fmt.Errorf("%q is not a link preset (%s)", v, strings.Join(perfmodel.LinkNames(), ", "))
	}
	d.KVLink = v
	return nil
}

// pdLever is the lever a change of pools is: disaggregate between
// aggregated and disaggregated serving, pd-ratio between two splits.
func pdLever(before, after string) string {
	if strings.Contains(before, ":") && strings.Contains(after, ":") {
		return "pd-ratio"
	}
	return "disaggregate"
}

// parsePDApplied reads --applied disaggregate=1P:1D, pd-ratio=1:2 and
// pd_split=N; ok is false for another lever.
func parsePDApplied(s, k, v string) (Change, bool, error) {
	if k != "disaggregate" && k != "pd-ratio" && k != keyPDSplit {
		return Change{}, false, nil
	}
	p, n, err := parseSplit(v)
	if err != nil {
		return Change{}, true, field.Invalid("applied", s, "%v", err)
	}
	if k == "pd-ratio" && p == 0 {
		return Change{}, true, field.Invalid("applied", s, "pd-ratio wants a P:D split such as 1:2")
	}
	lever := k
	if k == keyPDSplit {
		lever = "disaggregate"
	}
	return Change{Lever: lever, Setting: keyPDSplit, After: split(p, n), Source: "applied", Modeled: true}, true, nil
}

// foldPD turns the server evidence's changes of replicas and
// prefill_replicas into one change of the pools (a and b are the two
// runs' server evidence), and adds one from the second run's records
// (after: the pools its twin was rebuilt with) where the evidence shows
// none (before: the first run's; src names where after came from). A
// link the records show other than the first run's is a kv_link change.
func foldPD(cs []Change, a, b map[string]string, before, after PD, src string) []Change {
	pa, _ := strconv.Atoi(a[keyPrefillReplicas])
	pb, _ := strconv.Atoi(b[keyPrefillReplicas])
	ra, _ := strconv.Atoi(a["replicas"])
	rb, _ := strconv.Atoi(b["replicas"])
	gateway := (pa > 0 || pb > 0) && a["replicas"] != "" && b["replicas"] != ""
	cs = slices.DeleteFunc(cs, func(c Change) bool { return c.Setting == keyPrefillReplicas }) // said as the pools
	if from, to := split(pa, ra), split(pb, rb); gateway && from != to {
		cs = slices.DeleteFunc(cs, func(c Change) bool { return c.Setting == "replicas" })
		cs = append(cs, Change{Lever: pdLever(from, to), Setting: keyPDSplit, Before: from, After: to, Source: "server", Modeled: true})
	} else if from := beforeSplit(a, before); !gateway && after.Prefill > 0 && split(after.Prefill, after.Decode) != from {
		cs = slices.DeleteFunc(cs, func(c Change) bool { return c.Setting == "replicas" }) // said as the pools
		to := split(after.Prefill, after.Decode)
		cs = append(cs, Change{Lever: pdLever(from, to), Setting: keyPDSplit, Before: from, After: to, Source: src, Modeled: true})
	}
	if after.Link != "" && after.Link != before.Link && !slices.ContainsFunc(cs, func(c Change) bool { return c.Setting == keyKVLink }) {
		cs = append(cs, Change{Lever: "kv-link", Setting: keyKVLink, Before: before.Link, After: after.Link, Source: src, Modeled: true})
	}
	return cs
}

// beforeSplit is the first run's pools: its twin's when disaggregated,
// else the replicas its server evidence shows ("" when it shows none).
func beforeSplit(server map[string]string, before PD) string {
	switch {
	case before.Prefill > 0:
		return split(before.Prefill, before.Decode)
	case server["replicas"] != "":
		return server["replicas"]
	case before.Decode > 0:
		return split(0, before.Decode)
	}
	return ""
}
