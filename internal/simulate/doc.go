// Package simulate is `tokentrace simulate`: a discrete-event simulation
// of a serving deployment — load generator, router, admission queue and
// engine replicas — on one virtual clock. It runs bench's workloads (open
// loop at a rate, closed loop at a concurrency, sessions with think time,
// trace replay) against engine.Virtual replicas placed by internal/route's
// balancers and admission queue (the gateway's own policies), and writes
// one latency.Record per request, with the server's split, as bench would
// have measured it. It never sleeps: the next event is the earliest of all
// replicas' step ends, arrivals, think-time wake-ups and network
// deliveries, and the same configuration and seed give the same records.
//
// docs/simulate.md is the user's guide.
//
// It never imports serve, gateway, bench or app, and never net/http (not
// even indirectly): the network is an event on its clock.
package simulate
