// Command webhook-controller-runtime is a Go side of `cargo xtask bench-webhook`:
// controller-runtime's webhook server with a typed defaulter on Pods that adds a label, as an
// operator built with Kubebuilder serves it. The server decodes the review with the scheme,
// runs the defaulter on a typed Pod and answers with the JSON patch from the Pod received to
// the defaulted one; requests are counted in controller-runtime's webhook metrics, as in
// production (nothing scrapes them here).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const labelKey, labelValue = "defaulted-by", "webhook"

// labeler is the defaulter: the label, unless the Pod has it.
type labeler struct{}

func (labeler) Default(_ context.Context, pod *corev1.Pod) error {
	if pod.Labels[labelKey] == labelValue {
		return nil
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[labelKey] = labelValue
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "address to serve on")
	cert := flag.String("cert", "tls.crt", "PEM certificate")
	key := flag.String("key", "tls.key", "PEM private key")
	flag.Parse()
	if err := serve(*addr, *cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func serve(addr, cert, key string) error {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("-addr %q: the port is not a number", addr)
	}
	// The server's own logs are not what is measured, and the Go side on net/http logs
	// nothing per request either; without a logger controller-runtime warns about it.
	ctrllog.SetLogger(logr.Discard())

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	// The server reads the certificate and key from one directory, by name.
	server := webhook.NewServer(webhook.Options{
		Host:     host,
		Port:     port,
		CertDir:  filepath.Dir(cert),
		CertName: filepath.Base(cert),
		KeyName:  filepath.Base(key),
	})
	if filepath.Dir(key) != filepath.Dir(cert) {
		return fmt.Errorf("-cert and -key must be in one directory")
	}
	server.Register("/mutate", admission.WithDefaulter[*corev1.Pod](scheme, labeler{}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("serving https://%s/mutate\n", addr)
	return server.Start(ctx)
}
