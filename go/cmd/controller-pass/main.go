// Command controller-pass runs a controller-runtime manager with one controller for the
// ConfigMaps of a namespace (a reconcile that reads the object from the cache and does
// nothing else) and reports what Rudder's controller bench compares (cargo xtask
// bench-controller): the time from the start of the process to the end of the first pass
// (every ConfigMap reconciled once), the CPU and RSS then, and the latency from an update to
// the start of its reconcile.
//
// The bench writes each update with the annotation bench.rudder.dev/sent =
// "<run>.<phase>:<unix nanoseconds>"; a reconcile that finds a value of its own -run it has
// not seen for that object records now minus the time in it, under the phase (values of
// other runs, left on the objects by earlier processes, are ignored). It prints, one per line:
//
//	synced                 the cache holds the initial list (before the first pass ends)
//	first-pass-ms <ms>     from the start of main to the last first reconcile
//	first-pass-cpu-ms <ms> CPU time (user and system, every thread) over the same span
//	rss <bytes>            VmRSS right after the first pass
//	rss-anon <bytes>       its anonymous part (RssAnon: heap, stacks), the same moment
//	heap <bytes>           the heap's objects then (runtime.MemStats.HeapAlloc)
//	seen <phase> <n>       every 100 samples of a phase, and at each multiple of -expect
//
// Beside the controller, an event handler of its own on the same informer notes when each
// update's watch event reaches the process (as a handler sees it); a reconcile of that value
// then also records its start minus that moment under "<phase>-own": the controller's own
// share of the latency (its handler, queue and worker), the API server and the watch left
// out. A reconcile that starts before the probe's handler has run records a negative value.
//
// and, when a line "report" arrives on stdin:
//
//	latency <phase> <n> <p50 µs> <p99 µs> <max µs>
//	steady-rss <bytes>
//	cpu-ms <ms>
//
// then "done", and exits.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const annotation = "bench.rudder.dev/sent"

func status(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				panic(err)
			}
			return kb * 1024
		}
	}
	panic("no " + field)
}

func cpuMillis() int64 {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		panic(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return (utime + stime) * 10
}

type recorder struct {
	mu        sync.Mutex
	run       string
	start     time.Time
	cpuStart  int64
	objects   int
	first     map[string]struct{}
	lastSeen  map[string]string
	samples   map[string][]time.Duration
	firstDone bool
	// By object: the value of its last timed update and when either side of the pairing
	// (its watch event, its reconcile's start) was seen, until both are.
	pending map[string]pending
}

// pending is one object's last timed update, waiting for its event and its reconcile.
type pending struct {
	sent       string
	event      time.Time
	reconciled time.Time
}

// phaseOf is the phase of a timed value of this run ("" if it is not one).
func (r *recorder) phaseOf(sent string) string {
	tagged, _, ok := strings.Cut(sent, ":")
	if !ok {
		return ""
	}
	run, phase, ok := strings.Cut(tagged, ".")
	if !ok || run != r.run {
		return ""
	}
	return phase
}

// pair notes one side of an update's pairing (the event, or the reconcile's start) and
// records the controller's own share once both are known. Called with r.mu held.
func (r *recorder) pair(key, sent string, at time.Time, event bool) {
	phase := r.phaseOf(sent)
	if phase == "" {
		return
	}
	p := r.pending[key]
	if p.sent != sent {
		p = pending{sent: sent}
	}
	if event {
		if !p.event.IsZero() {
			return
		}
		p.event = at
	} else {
		if !p.reconciled.IsZero() {
			return
		}
		p.reconciled = at
	}
	if !p.event.IsZero() && !p.reconciled.IsZero() {
		r.samples[phase+"-own"] = append(r.samples[phase+"-own"], p.reconciled.Sub(p.event))
		delete(r.pending, key)
		return
	}
	r.pending[key] = p
}

// event is the probe handler's note of an update's watch event.
func (r *recorder) event(key, sent string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pair(key, sent, now, true)
}

func (r *recorder) reconcile(key string, sent string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.firstDone {
		r.first[key] = struct{}{}
		if len(r.first) == r.objects {
			r.firstDone = true
			fmt.Printf("first-pass-ms %d\n", time.Since(r.start).Milliseconds())
			fmt.Printf("first-pass-cpu-ms %d\n", cpuMillis()-r.cpuStart)
			fmt.Printf("rss %d\n", status("VmRSS"))
			fmt.Printf("rss-anon %d\n", status("RssAnon"))
			var mem runtime.MemStats
			runtime.ReadMemStats(&mem)
			fmt.Printf("heap %d\n", mem.HeapAlloc)
		}
	}
	if sent == "" || r.lastSeen[key] == sent {
		return
	}
	r.lastSeen[key] = sent
	r.pair(key, sent, now, false)
	tagged, nanos, ok := strings.Cut(sent, ":")
	if !ok {
		return
	}
	run, phase, ok := strings.Cut(tagged, ".")
	if !ok || run != r.run {
		return
	}
	at, err := strconv.ParseInt(nanos, 10, 64)
	if err != nil {
		return
	}
	r.samples[phase] = append(r.samples[phase], now.Sub(time.Unix(0, at)))
	if n := len(r.samples[phase]); n%100 == 0 {
		fmt.Printf("seen %s %d\n", phase, n)
	}
}

func (r *recorder) report() {
	r.mu.Lock()
	defer r.mu.Unlock()
	phases := make([]string, 0, len(r.samples))
	for phase := range r.samples {
		phases = append(phases, phase)
	}
	sort.Strings(phases)
	for _, phase := range phases {
		s := r.samples[phase]
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		at := func(p float64) int64 { return s[int(float64(len(s)-1)*p+0.5)].Microseconds() }
		fmt.Printf("latency %s %d %d %d %d\n", phase, len(s), at(0.5), at(0.99), s[len(s)-1].Microseconds())
	}
	fmt.Printf("steady-rss %d\n", status("VmRSS"))
	fmt.Printf("cpu-ms %d\n", cpuMillis()-r.cpuStart)
	fmt.Println("done")
}

func main() {
	start := time.Now()
	cpuStart := cpuMillis()
	// -kubeconfig is controller-runtime's own flag (registered by its config package), read
	// by ctrl.GetConfig as a Kubebuilder operator reads it.
	namespace := flag.String("namespace", "", "the ConfigMaps' namespace")
	objects := flag.Int("objects", 0, "how many ConfigMaps the namespace holds")
	workers := flag.Int("workers", 1, "MaxConcurrentReconciles")
	run := flag.String("run", "", "the run whose updates are timed")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	config, err := ctrl.GetConfig()
	if err != nil {
		panic(err)
	}
	mgr, err := manager.New(config, manager.Options{
		Scheme:                 scheme.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		panic(err)
	}
	rec := &recorder{
		run:      *run,
		start:    start,
		cpuStart: cpuStart,
		objects:  *objects,
		first:    map[string]struct{}{},
		lastSeen: map[string]string{},
		samples:  map[string][]time.Duration{},
		pending:  map[string]pending{},
	}
	// The probe: a handler of its own on the controller's informer (the cache has not started,
	// so this returns at once; the informer is the one the controller's watch shares).
	informer, err := mgr.GetCache().GetInformer(context.Background(), &corev1.ConfigMap{})
	if err != nil {
		panic(err)
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			now := time.Now()
			cm := obj.(*corev1.ConfigMap)
			rec.event(cm.Namespace+"/"+cm.Name, cm.Annotations[annotation], now)
		},
	}); err != nil {
		panic(err)
	}
	reader := mgr.GetClient()
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			now := time.Now()
			var cm corev1.ConfigMap
			if err := reader.Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			rec.reconcile(req.String(), cm.Annotations[annotation], now)
			return reconcile.Result{}, nil
		}))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			if scanner.Text() == "report" {
				rec.report()
				cancel()
				return
			}
		}
		cancel()
	}()
	// "synced" once the cache holds the list: the harness then updates objects while the
	// first pass works through it.
	// (client-go's WaitForCacheSync polls every 100 ms; this asks every millisecond, so the
	// line comes as promptly as Rudder's, which is told.)
	go func() {
		for !informer.HasSynced() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		fmt.Println("synced")
	}()
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
