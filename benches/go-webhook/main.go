// A mutating admission webhook written the usual way, for the load bench to measure
// configsum against: Kubernetes' own API types, encoding/json, net/http and crypto/tls.
// It answers /mutate with the same digests and the same JSON Patch as configsum for what a
// pod template reads through env, envFrom and volumes, from ConfigMaps and Secrets held in
// memory (loaded at start from the YAML stream `configsum serve --objects-from` reads).
//
// It prints "listening on ADDR" on stdout once it accepts connections.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	certFile := flag.String("tls-cert", "", "serving certificate (PEM)")
	keyFile := flag.String("tls-key", "", "its private key (PEM)")
	digestKeyFile := flag.String("digest-key-file", "", "HMAC key for Secret digests (first line)")
	objectsFrom := flag.String("objects-from", "", "YAML stream of ConfigMaps and Secrets")
	flag.Parse()

	objects, err := loadObjects(*objectsFrom)
	if err != nil {
		log.Fatalf("objects: %v", err)
	}
	digestKey, err := readDigestKey(*digestKeyFile)
	if err != nil {
		log.Fatalf("digest key: %v", err)
	}
	hook := &webhook{objects: objects, digestKey: digestKey}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", hook.serveMutate)
	server := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	fmt.Printf("listening on %s\n", listener.Addr())
	if err := server.ServeTLS(listener, *certFile, *keyFile); err != nil {
		log.Fatal(err)
	}
}

type webhook struct {
	objects   objectStore
	digestKey []byte
}

func (w *webhook) serveMutate(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 3<<20))
	if err != nil {
		http.Error(rw, "cannot read the body", http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	response := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	patch, err := w.patch(review.Request)
	if err != nil {
		// Never block a write on a webhook's own trouble: allow, and say why.
		response.Warnings = []string{err.Error()}
	} else if len(patch) > 0 {
		response.Patch = patch
		patchType := admissionv1.PatchTypeJSONPatch
		response.PatchType = &patchType
	}
	review.Request = nil
	review.Response = response
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	answer, err := json.Marshal(&review)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Write(answer)
}
