// Command informer-rss syncs one client-go shared informer on the ConfigMaps of a namespace
// and reports its memory and time, for Rudder's informer scale bench (cargo xtask
// bench-informers). It prints, one per line:
//
//	watchlist <true|false>   whether client-go listed with a streaming list (WatchListClient)
//	objects <n>              objects in the store once synced
//	sync-ms <ms>             from the informer's start to HasSynced
//	cpu-ms <ms>              CPU time (user and system, every thread) over the same span
//	base <bytes>             VmRSS before the informer started (client built, one request made)
//	peak <bytes>             VmHWM once synced: the highest RSS until then
//	synced <bytes>           VmRSS once synced
//	steady <bytes>           VmRSS after -settle more, with nothing changing
//
// The WatchListClient feature is set as client-go reads it, from the environment:
// KUBE_FEATURE_WatchListClient=false lists in pages. -strip drops managedFields in the
// informer's transform (as Rudder's informers do by default). client-go's generated clients
// ask for protobuf by default; -json makes it ask for JSON, as Rust's clients do.
// -controller-runtime syncs controller-runtime's cache instead (its informer for ConfigMaps,
// restricted to the namespace), as a manager's controller would get it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// status reads a field of /proc/self/status in bytes (the kernel gives kB).
func status(field string) int64 {
	file, err := os.Open("/proc/self/status")
	if err != nil {
		panic(err)
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := scanner.Text()
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				panic(err)
			}
			return kb * 1024
		}
	}
	panic("no " + field + " in /proc/self/status")
}

// cpuMillis is the process's CPU time so far (user and system, every thread), from
// /proc/self/stat in clock ticks of 10 ms.
func cpuMillis() int64 {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		panic(err)
	}
	// The fields after the command name, which ends with the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return (utime + stime) * 10
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "", "the ConfigMaps' namespace")
	strip := flag.Bool("strip", false, "drop managedFields in the informer's transform")
	settle := flag.Duration("settle", 10*time.Second, "how long after the sync the steady RSS is read")
	json := flag.Bool("json", false, "ask the API server for JSON instead of protobuf")
	controllerRuntime := flag.Bool("controller-runtime", false, "sync controller-runtime's cache instead of a client-go informer")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *json {
		config.ContentType = "application/json"
		config.AcceptContentTypes = "application/json"
	}
	client := kubernetes.NewForConfigOrDie(config)
	ctx := context.Background()
	// One request first, so the connection and the client's own buffers are in the baseline.
	if _, err := client.CoreV1().ConfigMaps(*namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	base := status("VmRSS")
	var informer cache.SharedIndexInformer
	var store func() int
	stop := make(chan struct{})
	var cpuStart int64
	var start time.Time
	if *controllerRuntime {
		c, err := crcache.New(config, crcache.Options{
			Scheme:            scheme.Scheme,
			DefaultNamespaces: map[string]crcache.Config{*namespace: {}},
		})
		if err != nil {
			panic(err)
		}
		cpuStart = cpuMillis()
		start = time.Now()
		if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
			panic(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = c.Start(runCtx) }()
		if !c.WaitForCacheSync(runCtx) {
			fmt.Fprintln(os.Stderr, "the cache did not sync")
			os.Exit(1)
		}
		store = func() int {
			var list corev1.ConfigMapList
			if err := c.List(ctx, &list); err != nil {
				panic(err)
			}
			return len(list.Items)
		}
	} else {
		informer = coreinformers.NewConfigMapInformer(client, *namespace, 0, cache.Indexers{
			cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		})
		if *strip {
			if err := informer.SetTransform(func(obj interface{}) (interface{}, error) {
				if object, ok := obj.(metav1.Object); ok {
					object.SetManagedFields(nil)
				}
				return obj, nil
			}); err != nil {
				panic(err)
			}
		}
		cpuStart = cpuMillis()
		start = time.Now()
		go informer.Run(stop)
		if !cache.WaitForCacheSync(stop, informer.HasSynced) {
			fmt.Fprintln(os.Stderr, "the informer did not sync")
			os.Exit(1)
		}
		store = func() int { return len(informer.GetStore().ListKeys()) }
	}
	took := time.Since(start)
	cpu := cpuMillis() - cpuStart
	peak := status("VmHWM")
	synced := status("VmRSS")
	// Read after the peak and the synced RSS: controller-runtime's List copies every object.
	objects := -1
	time.Sleep(*settle)
	steady := status("VmRSS")
	objects = store()
	fmt.Printf("watchlist %v\n", clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient))
	fmt.Printf("objects %d\n", objects)
	fmt.Printf("sync-ms %d\n", took.Milliseconds())
	fmt.Printf("cpu-ms %d\n", cpu)
	fmt.Printf("base %d\npeak %d\nsynced %d\nsteady %d\n", base, peak, synced, steady)
	close(stop)
}
