// Package engine is tokentrace's step-level simulated inference engine, in
// the style of vLLM V1: continuous batching under a token budget, chunked
// prefill, a paged KV cache with prefix caching and preemption by
// recompute, optional speculative decoding and priority scheduling. Every
// step is timed by a step-time function (the performance model), so latency
// emerges from batching and memory.
//
// One scheduler runs on two clocks: Engine.Run drives it on a wall clock for
// serving, and Simulate drives it in virtual time (a discrete-event
// simulation that never sleeps). Time and randomness are passed in; the core
// never reads time.Now or a global random source, so a simulation with the
// same seed and arrivals is identical token for token and step for step.
// docs/engine.md describes the model.
//
// It imports nothing of this module but internal/field, internal/perfmodel
// and internal/workload, and never net/http (not even indirectly): it runs
// on a clock it is given.
package engine
