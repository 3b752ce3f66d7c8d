// Package workload describes what a load generator sends: request shapes
// (input and output lengths, shared prefixes, sessions), arrival schedules,
// and traces of real production arrivals.
//
// It imports nothing of this module but internal/field and
// internal/tokenizer: never engine, serve, bench or gateway, which consume
// it.
package workload
