// Command validate checks Envoy Gateway configurations with Envoy Gateway's own code, at the
// release go.mod pins: each document is read into its EnvoyGateway type, defaulted as the
// controller does when it loads its configuration file, and checked with
// validation.ValidateEnvoyGateway, as it then checks it.
//
// A document is one of:
//   - an EnvoyGateway (apiVersion gateway.envoyproxy.io/v1alpha1), as in the controller's
//     envoy-gateway.yaml;
//   - the ConfigMap envoy-gateway-config, whose data["envoy-gateway.yaml"] is one;
//   - Helm values for the gateway-helm chart, whose config.envoyGateway is one without its
//     apiVersion and kind, merged over the chart's own (the chart adds apiVersion and kind).
//
// Fields are read strictly: the controller drops a field it does not know without a word, so a
// misspelt one would leave its setting at the default. Any other kind of document is refused.
//
// Usage: validate FILE.yaml... It prints "OK: FILE" or "FILE: document N: fault" for each fault;
// exits 0 when every file is valid, 1 when one is not, 2 on a usage or read error.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"github.com/envoyproxy/gateway/api/v1alpha1/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const configKey = "envoy-gateway.yaml"

// header is what a document says it is, and where a ConfigMap or Helm values keep the config.
type header struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Data       map[string]string `json:"data"`
	Config     *struct {
		EnvoyGateway map[string]any `json:"envoyGateway"`
	} `json:"config"`
}

// documents splits a YAML stream at its `---` lines, leaving out empty documents.
func documents(data []byte) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			out = append(out, doc)
		}
	}
}

// chartConfig is the gateway-helm chart's own config.envoyGateway (its values.yaml), which Helm
// merges a user's values over.
func chartConfig() map[string]any {
	return map[string]any{
		"gateway":  map[string]any{"controllerName": egv1a1.GatewayControllerName},
		"provider": map[string]any{"type": string(egv1a1.ProviderTypeKubernetes)},
		"logging":  map[string]any{"level": map[string]any{"default": "info"}},
	}
}

// overlay merges top over base as Helm merges values: maps key by key, anything else replaced.
func overlay(base, top map[string]any) map[string]any {
	for key, value := range top {
		inner, isMap := value.(map[string]any)
		under, wasMap := base[key].(map[string]any)
		if isMap && wasMap {
			base[key] = overlay(under, inner)
		} else {
			base[key] = value
		}
	}
	return base
}

// envoyGatewayYAML is the EnvoyGateway configuration a document holds, in YAML.
func envoyGatewayYAML(doc []byte) ([]byte, error) {
	var h header
	if err := yaml.Unmarshal(doc, &h); err != nil {
		return nil, err
	}
	switch {
	case h.Kind == egv1a1.KindEnvoyGateway:
		return doc, nil
	case h.APIVersion == "v1" && h.Kind == "ConfigMap":
		config, ok := h.Data[configKey]
		if !ok {
			return nil, fmt.Errorf("a ConfigMap without data[%q]", configKey)
		}
		return []byte(config), nil
	case h.Kind == "" && h.Config != nil && h.Config.EnvoyGateway != nil:
		config := overlay(chartConfig(), h.Config.EnvoyGateway)
		config["apiVersion"] = egv1a1.GroupVersion.String()
		config["kind"] = egv1a1.KindEnvoyGateway
		return yaml.Marshal(config)
	}
	return nil, fmt.Errorf("apiVersion %q kind %q is not an EnvoyGateway configuration, "+
		"its ConfigMap, or Helm values with config.envoyGateway", h.APIVersion, h.Kind)
}

func check(doc []byte) error {
	config, err := envoyGatewayYAML(doc)
	if err != nil {
		return err
	}
	var eg egv1a1.EnvoyGateway
	if err := yaml.UnmarshalStrict(config, &eg); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: "))
	}
	if eg.APIVersion != egv1a1.GroupVersion.String() {
		return fmt.Errorf("apiVersion %q is not %s", eg.APIVersion, egv1a1.GroupVersion)
	}
	eg.SetEnvoyGatewayDefaults()
	eg.Logging.SetEnvoyGatewayLoggingDefaults()
	return validation.ValidateEnvoyGateway(&eg)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: validate FILE.yaml...")
		os.Exit(2)
	}
	invalid := false
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "validate: %v\n", err)
			os.Exit(2)
		}
		docs, err := documents(data)
		if err == nil && len(docs) == 0 {
			err = errors.New("no YAML document")
		}
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			invalid = true
			continue
		}
		ok := true
		for i, doc := range docs {
			if err := check(doc); err != nil {
				fmt.Printf("%s: document %d: %v\n", path, i+1, err)
				ok = false
			}
		}
		if ok {
			fmt.Printf("OK: %s\n", path)
		}
		invalid = invalid || !ok
	}
	if invalid {
		os.Exit(1)
	}
}
