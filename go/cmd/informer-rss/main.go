// Command informer-rss syncs one client-go shared informer on the ConfigMaps (or, with
// -kind=pods, the Pods) of a namespace and reports its memory and time, for Rudder's
// informer scale bench (cargo xtask bench-informers). It prints, one per line:
//
//	watchlist <true|false>   whether client-go listed with a streaming list (WatchListClient)
//	wire <protobuf|json>     what it asked the API server for
//	objects <n>              objects in the store once synced
//	sync-ms <ms>             from the informer's start to HasSynced
//	cpu-ms <ms>              CPU time (user and system, every thread) over the same span
//	apiserver-cpu-ms <ms>    the CPU time of the process -apiserver-pid names over the same
//	                         span (0 without it)
//	apiserver-sent-bytes <n> the bytes that process wrote over the same span (wchar of its
//	                         /proc/<pid>/io: what it sent, TLS and HTTP framing included)
//	base <bytes>             VmRSS before the informer started (client built, one request made)
//	peak <bytes>             VmHWM once synced: the highest RSS until then
//	synced <bytes>           VmRSS once synced
//	steady <bytes>           VmRSS after -settle more, with nothing changing
//
// The WatchListClient feature is set as client-go reads it, from the environment:
// KUBE_FEATURE_WatchListClient=false lists in pages. -strip drops managedFields in the
// informer's transform (as Rudder's informers do by default). client-go's generated clients
// ask for protobuf by default; -json makes it ask for JSON, as Rust's clients do.
// -controller-runtime syncs controller-runtime's cache instead (its informer for the kind,
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
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// cpuMillisOf is cpuMillis of another process (0 for pid 0).
func cpuMillisOf(pid int) int64 {
	if pid == 0 {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		panic(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return (utime + stime) * 10
}

// writtenBytes is the bytes the process pid has written so far, to files and sockets (wchar
// of /proc/<pid>/io; 0 for pid 0).
func writtenBytes(pid int) int64 {
	if pid == 0 {
		return 0
	}
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(io), "\n") {
		if rest, ok := strings.CutPrefix(line, "wchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err != nil {
				panic(err)
			}
			return n
		}
	}
	panic("no wchar in /proc/<pid>/io")
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "", "the objects' namespace")
	kind := flag.String("kind", "configmaps", "what to sync: configmaps or pods")
	apiserverPid := flag.Int("apiserver-pid", 0, "the kube-apiserver's process id, whose CPU time over the sync is reported")
	strip := flag.Bool("strip", false, "drop managedFields in the informer's transform")
	settle := flag.Duration("settle", 10*time.Second, "how long after the sync the steady RSS is read")
	json := flag.Bool("json", false, "ask the API server for JSON instead of protobuf")
	controllerRuntime := flag.Bool("controller-runtime", false, "sync controller-runtime's cache instead of a client-go informer")
	flag.Parse()
	if *kind != "configmaps" && *kind != "pods" {
		fmt.Fprintln(os.Stderr, "-kind: configmaps or pods")
		os.Exit(2)
	}
	pods := *kind == "pods"

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *json {
		config.ContentType = "application/json"
		config.AcceptContentTypes = "application/json"
	}
	clientset := kubernetes.NewForConfigOrDie(config)
	ctx := context.Background()
	// One request first, so the connection and the client's own buffers are in the baseline.
	var err1 error
	if pods {
		_, err1 = clientset.CoreV1().Pods(*namespace).List(ctx, metav1.ListOptions{Limit: 1})
	} else {
		_, err1 = clientset.CoreV1().ConfigMaps(*namespace).List(ctx, metav1.ListOptions{Limit: 1})
	}
	if err := err1; err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	base := status("VmRSS")
	var informer cache.SharedIndexInformer
	var store func() int
	stop := make(chan struct{})
	var cpuStart, sentStart, serverStart int64
	var start time.Time
	begin := func() {
		sentStart = writtenBytes(*apiserverPid)
		serverStart = cpuMillisOf(*apiserverPid)
		cpuStart = cpuMillis()
		start = time.Now()
	}
	if *controllerRuntime {
		c, err := crcache.New(config, crcache.Options{
			Scheme:            scheme.Scheme,
			DefaultNamespaces: map[string]crcache.Config{*namespace: {}},
		})
		if err != nil {
			panic(err)
		}
		begin()
		var object client.Object = &corev1.ConfigMap{}
		if pods {
			object = &corev1.Pod{}
		}
		if _, err := c.GetInformer(ctx, object); err != nil {
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
			if pods {
				var list corev1.PodList
				if err := c.List(ctx, &list); err != nil {
					panic(err)
				}
				return len(list.Items)
			}
			var list corev1.ConfigMapList
			if err := c.List(ctx, &list); err != nil {
				panic(err)
			}
			return len(list.Items)
		}
	} else {
		indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		if pods {
			informer = coreinformers.NewPodInformer(clientset, *namespace, 0, indexers)
		} else {
			informer = coreinformers.NewConfigMapInformer(clientset, *namespace, 0, indexers)
		}
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
		begin()
		go informer.Run(stop)
		if !cache.WaitForCacheSync(stop, informer.HasSynced) {
			fmt.Fprintln(os.Stderr, "the informer did not sync")
			os.Exit(1)
		}
		store = func() int { return len(informer.GetStore().ListKeys()) }
	}
	took := time.Since(start)
	// The CPU and the bytes first, before this reads more of /proc.
	cpu := cpuMillis() - cpuStart
	server := cpuMillisOf(*apiserverPid) - serverStart
	sent := writtenBytes(*apiserverPid) - sentStart
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
	fmt.Printf("apiserver-cpu-ms %d\n", server)
	fmt.Printf("apiserver-sent-bytes %d\n", sent)
	if *json {
		fmt.Println("wire json")
	} else {
		fmt.Println("wire protobuf")
	}
	fmt.Printf("base %d\npeak %d\nsynced %d\nsteady %d\n", base, peak, synced, steady)
	close(stop)
}
