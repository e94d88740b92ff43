package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

type objectKey struct {
	kind      objectKind
	namespace string
	name      string
}

// objectData is one object's data, its keys sorted once for digests of every key.
type objectData struct {
	data       map[string][]byte
	sortedKeys []string
}

type objectStore map[objectKey]*objectData

// loadObjects reads a YAML stream of ConfigMaps and Secrets, as kubectl would apply it
// (a Secret's stringData merged into its data).
func loadObjects(path string) (objectStore, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	store := objectStore{}
	for _, document := range bytes.Split(text, []byte("\n---")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(document, &meta); err != nil {
			return nil, err
		}
		data := map[string][]byte{}
		var key objectKey
		switch meta.Kind {
		case "":
			continue
		case "ConfigMap":
			var configMap corev1.ConfigMap
			if err := yaml.Unmarshal(document, &configMap); err != nil {
				return nil, err
			}
			for k, v := range configMap.Data {
				data[k] = []byte(v)
			}
			for k, v := range configMap.BinaryData {
				data[k] = v
			}
			key = objectKey{configMapKind, configMap.Namespace, configMap.Name}
		case "Secret":
			var secret corev1.Secret
			if err := yaml.Unmarshal(document, &secret); err != nil {
				return nil, err
			}
			for k, v := range secret.Data {
				data[k] = v
			}
			for k, v := range secret.StringData {
				data[k] = []byte(v)
			}
			key = objectKey{secretKind, secret.Namespace, secret.Name}
		default:
			return nil, fmt.Errorf("a %s: only ConfigMaps and Secrets", meta.Kind)
		}
		object := &objectData{data: data}
		for k := range data {
			object.sortedKeys = append(object.sortedKeys, k)
		}
		sort.Strings(object.sortedKeys)
		store[key] = object
	}
	return store, nil
}

// readDigestKey returns the first key of a digest key file: its first non-blank line,
// trimmed, as configsum signs with.
func readDigestKey(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, line := range bytes.Split(text, []byte("\n")) {
		if key := bytes.TrimSpace(line); len(key) > 0 {
			return key, nil
		}
	}
	return nil, fmt.Errorf("%s holds no key", path)
}
