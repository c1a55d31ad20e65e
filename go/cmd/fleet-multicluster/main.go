// Command fleet-multicluster is multicluster-runtime's side of Rudder's fleet bench
// (crates/rudder/benches/fleet.rs): one multicluster manager, its kubeconfig provider
// (providers/kubeconfig: the Secrets of -secrets labelled
// sigs.k8s.io/multicluster-runtime-kubeconfig=true, the kubeconfig under the data key
// "kubeconfig", as the provider defaults them) and one ConfigMap controller, started in each
// member cluster the provider engages, whose reconcile notes the cluster's first reconcile
// and does nothing else (as the Rust side's does). Each member's cache holds the ConfigMaps of
// -namespace only; the manager's own cache (where the provider watches its Secrets) holds the
// Secrets' namespace only.
//
// It prints, one per line:
//
//	ready                        the manager has started (its caches synced)
//	first <cluster> <unix ns>    a member's first reconcile, and when it began
//
// and answers each line on stdin:
//
//	mem   ->  mem <VmRSS bytes> <live heap bytes>
//	cpu   ->  cpu <CPU nanoseconds, user and system, every thread>
//
// The live heap is runtime.MemStats.HeapAlloc right after a collection (runtime.GC), so it
// counts live objects, not garbage not yet swept; VmRSS is read before that collection. The
// process exits when stdin closes.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"
)

// out serialises the lines written to stdout (reconciles and answers run on many goroutines).
var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

// rssBytes is VmRSS from /proc/self/status.
func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				panic(err)
			}
			return kb * 1024
		}
	}
	panic("no VmRSS in /proc/self/status")
}

// cpuNanos is the process's CPU clock (the Rust side reads the same clock).
func cpuNanos() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// firsts notes each cluster's first reconcile.
type firsts struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

func (f *firsts) reconcile(_ context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	now := time.Now().UnixNano()
	name := string(req.ClusterName)
	f.mu.Lock()
	_, done := f.seen[name]
	f.seen[name] = struct{}{}
	f.mu.Unlock()
	if !done {
		say("first %s %d", name, now)
	}
	return reconcile.Result{}, nil
}

func main() {
	// -kubeconfig is controller-runtime's own flag, read by ctrl.GetConfig.
	secrets := flag.String("secrets", "", "the namespace of the kubeconfig Secrets")
	namespace := flag.String("namespace", "", "the ConfigMaps' namespace in each member")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	config, err := ctrl.GetConfig()
	if err != nil {
		panic(err)
	}
	provider := kubeconfig.New(kubeconfig.Options{
		Namespace: *secrets,
		ClusterOptions: []cluster.Option{func(o *cluster.Options) {
			o.Cache.DefaultNamespaces = map[string]cache.Config{*namespace: {}}
		}},
	})
	mgr, err := mcmanager.New(config, provider, manager.Options{
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{*secrets: {}}},
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := provider.SetupWithManager(ctx, mgr); err != nil {
		panic(err)
	}
	f := &firsts{seen: map[string]struct{}{}}
	if err := mcbuilder.ControllerManagedBy(mgr).
		Named("fleet-configmaps").
		For(&corev1.ConfigMap{}).
		Complete(mcreconcile.Func(f.reconcile)); err != nil {
		panic(err)
	}
	// The local manager starts its runnables once its caches have synced.
	if err := mgr.GetLocalManager().Add(manager.RunnableFunc(func(ctx context.Context) error {
		say("ready")
		<-ctx.Done()
		return nil
	})); err != nil {
		panic(err)
	}
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			switch scanner.Text() {
			case "mem":
				rss := rssBytes()
				runtime.GC()
				var mem runtime.MemStats
				runtime.ReadMemStats(&mem)
				say("mem %d %d", rss, mem.HeapAlloc)
			case "cpu":
				say("cpu %d", cpuNanos())
			}
		}
		cancel()
	}()
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
