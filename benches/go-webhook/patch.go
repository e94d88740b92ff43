package main

import (
	"encoding/json"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

type patchOperation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch returns the JSON Patch that puts one digest annotation per referenced object on
// the pod template, or nothing when the kind has none or the digests are there already.
func (w *webhook) patch(request *admissionv1.AdmissionRequest) ([]byte, error) {
	var template *corev1.PodTemplateSpec
	var path string
	switch request.Kind.Kind {
	case "Deployment":
		var deployment appsv1.Deployment
		if err := json.Unmarshal(request.Object.Raw, &deployment); err != nil {
			return nil, err
		}
		template, path = &deployment.Spec.Template, "/spec/template/metadata/annotations"
	case "StatefulSet":
		var statefulSet appsv1.StatefulSet
		if err := json.Unmarshal(request.Object.Raw, &statefulSet); err != nil {
			return nil, err
		}
		template, path = &statefulSet.Spec.Template, "/spec/template/metadata/annotations"
	case "DaemonSet":
		var daemonSet appsv1.DaemonSet
		if err := json.Unmarshal(request.Object.Raw, &daemonSet); err != nil {
			return nil, err
		}
		template, path = &daemonSet.Spec.Template, "/spec/template/metadata/annotations"
	case "Pod":
		// A bare Pod never restarts: its digests record what it started with.
		if request.Operation != admissionv1.Create {
			return nil, nil
		}
		var pod corev1.Pod
		if err := json.Unmarshal(request.Object.Raw, &pod); err != nil {
			return nil, err
		}
		template = &corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}
		path = "/metadata/annotations"
	default:
		return nil, nil
	}

	wanted := map[string]string{}
	for ref, keys := range references(&template.Spec) {
		object, found := w.objects[objectKey{ref.kind, request.Namespace, ref.name}]
		if !found {
			continue
		}
		wanted[annotationKey(ref)] = w.digest(ref.kind, request.Namespace, ref.name, object, keys)
	}
	var operations []patchOperation
	current := template.Annotations
	if current == nil && len(wanted) > 0 {
		operations = append(operations, patchOperation{Op: "add", Path: path, Value: wanted})
	} else {
		names := make([]string, 0, len(wanted))
		for name := range wanted {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			value := wanted[name]
			existing, present := current[name]
			if present && existing == value {
				continue
			}
			op := "add"
			if present {
				op = "replace"
			}
			operations = append(operations, patchOperation{Op: op, Path: path + "/" + escapePointer(name), Value: value})
		}
	}
	if len(operations) == 0 {
		return nil, nil
	}
	return json.Marshal(operations)
}

func annotationKey(ref objectRef) string {
	if ref.kind == secretKind {
		return "secret.configsum.dev/" + ref.name
	}
	return "configmap.configsum.dev/" + ref.name
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901).
func escapePointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}
