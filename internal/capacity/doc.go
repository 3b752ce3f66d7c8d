// Package capacity answers the capacity question of LLM serving before
// anyone touches a GPU: which deployment — GPU, tensor parallelism,
// replicas, precisions, batch limits, chunked prefill, prefix caching,
// speculative decoding, routing, a cap on max_tokens — meets a set of
// SLOs at a target rate for the least money, or serves the most within
// them (`tokentrace plan`).
//
// Each candidate is first bounded by the roofline model (the highest rate
// its replicas could sustain, the lowest each SLO's percentile could be),
// which prunes what cannot meet the objective; what is left is simulated
// (internal/simulate: the same engine, scheduler and router code on a
// virtual clock), in parallel: at the target rate, then a bracket and
// bisection on the rate for its goodput — the highest rate at which every
// SLO holds. Candidates that simulate alike share results; a candidate a
// cheaper, faster one already outserves is not searched. Prices come from
// perfmodel's price table.
//
// Evaluate and FindGoodput are the building blocks for one deployment:
// "this workload, with one lever changed".
//
// docs/plan.md is the user's guide.
//
// It never imports serve, gateway, bench or app: every candidate is judged
// on the virtual clock (internal/simulate), never measured; nor report: its
// page is drawn in the house style of internal/chart.
package capacity
