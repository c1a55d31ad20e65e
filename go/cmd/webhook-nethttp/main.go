// Command webhook-nethttp is a Go side of `cargo xtask bench-webhook`: a net/http TLS server
// answering Pod admission reviews with a one-operation JSON patch that adds a label, decoding
// with encoding/json and Kubernetes' own types: the least a Go webhook does, and what
// controller-runtime's admission path does, in essence, without its generality (for that, see
// webhook-controller-runtime beside it).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

const labelKey, labelValue = "defaulted-by", "webhook"

func mutate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an admission review", http.StatusBadRequest)
		return
	}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		http.Error(w, "not a pod: "+err.Error(), http.StatusBadRequest)
		return
	}
	response := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if pod.Labels[labelKey] != labelValue {
		var patch string
		if pod.Labels == nil {
			patch = fmt.Sprintf(`[{"op":"add","path":"/metadata/labels","value":{%q:%q}}]`, labelKey, labelValue)
		} else {
			patch = fmt.Sprintf(`[{"op":"add","path":"/metadata/labels/%s","value":%q}]`, labelKey, labelValue)
		}
		patchType := admissionv1.PatchTypeJSONPatch
		response.PatchType = &patchType
		response.Patch = []byte(patch)
	}
	answer := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: response}
	out, err := json.Marshal(&answer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "address to serve on")
	cert := flag.String("cert", "tls.crt", "PEM certificate")
	key := flag.String("key", "tls.key", "PEM private key")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	server := &http.Server{Addr: *addr, Handler: mux}
	fmt.Printf("serving https://%s/mutate\n", *addr)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
