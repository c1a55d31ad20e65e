// Command elector is one candidate of client-go's leader election on a Lease,
// for Rudder's interop test and election bench. It prints "started <ns>" from
// OnStartedLeading and "stopped <ns>" when it stops leading, <ns> being CLOCK_MONOTONIC in
// nanoseconds; a "release" line on stdin stops leading (the stop is printed first, as the
// leader's work would end before the cancellation) and releases the Lease.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

var (
	mu      sync.Mutex
	leading bool
)

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// stop prints the end of leadership once, if leading.
func stop(why string) {
	mu.Lock()
	defer mu.Unlock()
	if leading {
		fmt.Printf("stopped %d %s\n", mono(), why)
		leading = false
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name")
	identity := flag.String("identity", "", "this candidate's identity")
	lease := flag.Duration("lease", 15*time.Second, "lease duration")
	renew := flag.Duration("renew", 10*time.Second, "renew deadline")
	retry := flag.Duration("retry", 2*time.Second, "retry period")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client, err := coordinationv1.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *name},
		Client:     client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			if lines.Text() == "release" {
				stop("released")
				cancel()
			}
		}
	}()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *lease,
		RenewDeadline:   *renew,
		RetryPeriod:     *retry,
		ReleaseOnCancel: true,
		Name:            *name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				mu.Lock()
				defer mu.Unlock()
				leading = true
				fmt.Printf("started %d\n", mono())
			},
			OnStoppedLeading: func() { stop("lost") },
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("candidate %d\n", mono())
	elector.Run(ctx)
	fmt.Printf("exited %d\n", mono())
}
