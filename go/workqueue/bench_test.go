package workqueue

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// library is one side of every benchmark: how it builds each kind of queue a shape needs.
type library[T comparable] struct {
	name         string
	plain        func() workqueue.TypedInterface[T]
	delaying     func() workqueue.TypedDelayingInterface[T]
	rateLimiting func() workqueue.TypedRateLimitingInterface[T]
}

// libraries are client-go's queues, as a controller built on client-go alone makes them, and
// controller-runtime's priority queue, the default queue of its controllers, which is all
// three kinds in one (with the rate limiter its controllers give it by default).
func libraries[T comparable]() []library[T] {
	priority := func() priorityqueue.PriorityQueue[T] {
		// The empty name leaves its metrics off, as client-go's are without a provider.
		return priorityqueue.New("", func(o *priorityqueue.Opts[T]) {
			o.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[T]()
		})
	}
	return []library[T]{
		{
			name:     "client-go",
			plain:    func() workqueue.TypedInterface[T] { return workqueue.NewTyped[T]() },
			delaying: workqueue.NewTypedDelayingQueue[T],
			rateLimiting: func() workqueue.TypedRateLimitingInterface[T] {
				return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[T]())
			},
		},
		{
			name:         "controller-runtime",
			plain:        func() workqueue.TypedInterface[T] { return priority() },
			delaying:     func() workqueue.TypedDelayingInterface[T] { return priority() },
			rateLimiting: func() workqueue.TypedRateLimitingInterface[T] { return priority() },
		},
	}
}

// each runs body once per library, as sub-benchmarks named after it.
func each[T comparable](b *testing.B, body func(b *testing.B, lib library[T])) {
	for _, lib := range libraries[T]() {
		b.Run(lib.name, func(b *testing.B) { body(b, lib) })
	}
}

// meter is where a benchmark's measured part started: the wall clock and the process's CPU
// time (user and system, every goroutine's, the queue's own background goroutines and the
// garbage collector included).
type meter struct {
	wall time.Time
	cpu  time.Duration
}

func startMeter() meter {
	return meter{wall: time.Now(), cpu: processCPU()}
}

// processCPU is the CPU time the process has used so far (getrusage, microsecond resolution).
func processCPU() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		panic(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// perKey reports the wall time (ns/key) and the CPU time (cpu-ns/key) per key of a benchmark
// whose iterations handle `keys` keys each.
func (m meter) perKey(b *testing.B, keys int) {
	n := float64(b.N * keys)
	b.ReportMetric(float64(time.Since(m.wall).Nanoseconds())/n, "ns/key")
	b.ReportMetric(float64((processCPU()-m.cpu).Nanoseconds())/n, "cpu-ns/key")
}

func BenchmarkCycleInt(b *testing.B) {
	each(b, func(b *testing.B, lib library[int]) {
		q := lib.plain()
		defer q.ShutDown()
		m := startMeter()
		for i := 0; i < b.N; i++ {
			q.Add(i & 63)
			item, _ := q.Get()
			q.Done(item)
		}
		m.perKey(b, 1)
	})
}

func BenchmarkCycleString(b *testing.B) {
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("namespace-%d/object-name-%d", i%7, i)
	}
	each(b, func(b *testing.B, lib library[string]) {
		q := lib.plain()
		defer q.ShutDown()
		m := startMeter()
		for i := 0; i < b.N; i++ {
			q.Add(keys[i&63])
			item, _ := q.Get()
			q.Done(item)
		}
		m.perKey(b, 1)
	})
}

func BenchmarkDedupHit(b *testing.B) {
	each(b, func(b *testing.B, lib library[int]) {
		q := lib.plain()
		defer q.ShutDown()
		for k := 0; k < 64; k++ {
			q.Add(k)
		}
		m := startMeter()
		for i := 0; i < b.N; i++ {
			q.Add(i & 63)
		}
		m.perKey(b, 1)
		// controller-runtime's queue takes adds into a buffer that a goroutine of its own
		// merges; the 64 keys must be all it holds, or the adds were not dedup hits.
		if n := q.Len(); n != 64 {
			b.Fatalf("%d keys waiting after the dedup hits, not 64", n)
		}
	})
}

func BenchmarkRateLimitingCycle(b *testing.B) {
	each(b, func(b *testing.B, lib library[int]) {
		q := lib.rateLimiting()
		defer q.ShutDown()
		m := startMeter()
		for i := 0; i < b.N; i++ {
			q.Add(i & 63)
			item, _ := q.Get()
			q.Forget(item)
			q.Done(item)
		}
		m.perKey(b, 1)
	})
}

func BenchmarkProducersWorkers(b *testing.B) {
	const perProducer = 10000
	const total = 2 * perProducer
	each(b, func(b *testing.B, lib library[int]) {
		m := startMeter()
		for n := 0; n < b.N; n++ {
			q := lib.plain()
			var done int64
			var wg sync.WaitGroup
			for w := 0; w < 2; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						item, shutdown := q.Get()
						if shutdown {
							return
						}
						if atomic.AddInt64(&done, 1) == total {
							q.ShutDown()
						}
						q.Done(item)
					}
				}()
			}
			for p := 0; p < 2; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					for k := p * perProducer; k < (p+1)*perProducer; k++ {
						q.Add(k)
					}
				}(p)
			}
			wg.Wait()
		}
		m.perKey(b, total)
	})
}

func BenchmarkAddAfterDrain(b *testing.B) {
	const keys = 1000
	each(b, func(b *testing.B, lib library[int]) {
		q := lib.delaying()
		defer q.ShutDown()
		m := startMeter()
		for n := 0; n < b.N; n++ {
			for k := 0; k < keys; k++ {
				q.AddAfter(k, time.Duration(1+(k*7)%10)*time.Microsecond)
			}
			for k := 0; k < keys; k++ {
				item, _ := q.Get()
				q.Done(item)
			}
		}
		m.perKey(b, keys)
	})
}

// BenchmarkPriorityBacklog is a controller's restart: 10,000 keys of its initial list wait
// at low priority, then per iteration a new key is added at the normal priority, taken and
// done. controller-runtime's queue takes the new key ahead of the backlog (its initial-list
// events are queued at LowPriority, as Rudder's are); client-go's has no priorities, so it
// does the same operations in FIFO order (it takes the oldest waiting key; the backlog stays
// 10,000 keys).
func BenchmarkPriorityBacklog(b *testing.B) {
	const backlog = 10000
	// handler.LowPriority, which controller-runtime's event handlers give initial-list events.
	low, normal := -100, 0
	b.Run("client-go", func(b *testing.B) {
		q := workqueue.NewTyped[int]()
		defer q.ShutDown()
		for k := 0; k < backlog; k++ {
			q.Add(k)
		}
		m := startMeter()
		for i := 0; i < b.N; i++ {
			q.Add(backlog + i)
			item, _ := q.Get()
			q.Done(item)
		}
		m.perKey(b, 1)
	})
	b.Run("controller-runtime", func(b *testing.B) {
		q := priorityqueue.New("", func(o *priorityqueue.Opts[int]) {
			o.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[int]()
		})
		defer q.ShutDown()
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, func() []int {
			keys := make([]int, backlog)
			for k := range keys {
				keys[k] = k
			}
			return keys
		}()...)
		m := startMeter()
		for i := 0; i < b.N; i++ {
			q.AddWithOpts(priorityqueue.AddOpts{Priority: &normal}, backlog+i)
			item, _ := q.Get()
			q.Done(item)
		}
		m.perKey(b, 1)
		if n := q.Len(); n != backlog {
			b.Fatalf("%d keys waiting after the run, not the backlog's %d", n, backlog)
		}
	})
}
