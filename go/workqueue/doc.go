// Package workqueue holds benchmarks of client-go's work queue and of controller-runtime's
// priority queue in the shapes of Rudder's work-queue benches: run them with
// `go test -run '^$' -bench . ./workqueue` in this module, or through
// `cargo xtask bench-workqueue`, which runs Rudder's side too and prints the ratios.
//
// Every benchmark has one sub-benchmark per queue, client-go and controller-runtime, built
// the way each library's own constructors build it, without metrics (client-go's queue
// reports none until a provider is set; controller-runtime's reports none without a name).
// Each reports ns/key, the time per key handled.
package workqueue
