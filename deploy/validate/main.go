// Command validate checks Kubernetes manifests (multi-document YAML, such as `helm template`
// prints) against the Go types of the Kubernetes API and of the Prometheus operator's
// ServiceMonitor and PrometheusRule. Every object is decoded strictly, as the API server does with
// fieldValidation=Strict: an unknown field, a field of the wrong type or a field given twice is
// an error, and so is a kind not listed in `kinds`. Then a few checks tie the objects together
// (checks.go).
//
// Usage: validate FILE.yaml... ("-" reads standard input). It prints "OK: FILE (N objects)" or
// every fault it finds, each named by its document and object; exits 0 when every file is
// valid, 1 when one is not, 2 on a usage or read error.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kinds the chart renders, each with a new object of its type.
var kinds = map[string]func() any{
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
}

// object is one decoded document: where it came from, and its typed value.
type object struct {
	where string
	value any
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// decode reads every document of one file; each fault is one line of the returned list.
func decode(r io.Reader) ([]object, []string, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objects []object
	var faults []string
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects, faults, nil
		}
		if err != nil {
			return nil, nil, err
		}
		// YAMLToJSONStrict also refuses a key given twice in one mapping.
		data, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			faults = append(faults, fmt.Sprintf("document %d: %v", n, err))
			continue
		}
		if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
			continue // only comments, or empty: helm prints such documents
		}
		var meta typeMeta
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &meta); err != nil {
			faults = append(faults, fmt.Sprintf("document %d: not an object: %v", n, err))
			continue
		}
		where := fmt.Sprintf("document %d (%s %s)", n, meta.Kind, meta.Metadata.Name)
		create, known := kinds[meta.APIVersion+"/"+meta.Kind]
		if !known {
			faults = append(faults, fmt.Sprintf("%s: unknown kind %q of apiVersion %q", where, meta.Kind, meta.APIVersion))
			continue
		}
		value := create()
		// Case-sensitive field names, unknown and duplicate fields refused: the API server's
		// strict decoding. (encoding/json would match "Replicas" to "replicas".)
		strict, err := kjson.UnmarshalStrict(data, value, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			faults = append(faults, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		for _, fault := range strict {
			faults = append(faults, fmt.Sprintf("%s: %v", where, fault))
		}
		if len(strict) == 0 {
			objects = append(objects, object{where: where, value: value})
		}
	}
}

func main() {
	files := os.Args[1:]
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "usage: validate FILE.yaml... (- for standard input)")
		os.Exit(2)
	}
	invalid := false
	for _, file := range files {
		var r io.Reader = os.Stdin
		if file != "-" {
			f, err := os.Open(file)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			defer f.Close()
			r = f
		}
		objects, faults, err := decode(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			os.Exit(2)
		}
		if len(faults) == 0 {
			faults = check(objects)
		}
		if len(objects) == 0 && len(faults) == 0 {
			faults = []string{"no Kubernetes objects"}
		}
		if len(faults) > 0 {
			invalid = true
			fmt.Printf("INVALID: %s\n  %s\n", file, strings.Join(faults, "\n  "))
			continue
		}
		fmt.Printf("OK: %s (%d objects)\n", file, len(objects))
	}
	if invalid {
		os.Exit(1)
	}
}
