package main

import (
	corev1 "k8s.io/api/core/v1"
)

type objectKind int

const (
	configMapKind objectKind = iota
	secretKind
)

type objectRef struct {
	kind objectKind
	name string
}

// consumedKeys is what a pod spec reads of one object: all of it (all true), or these keys.
type consumedKeys struct {
	all  bool
	keys map[string]bool
}

func (c *consumedKeys) addAll() { c.all = true }

func (c *consumedKeys) addKey(key string) {
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	c.keys[key] = true
}

// references collects the ConfigMaps and Secrets a pod spec reads through env, envFrom and
// volumes (projected ones included), and which of their keys.
func references(spec *corev1.PodSpec) map[objectRef]*consumedKeys {
	refs := map[objectRef]*consumedKeys{}
	of := func(kind objectKind, name string) *consumedKeys {
		ref := objectRef{kind, name}
		if refs[ref] == nil {
			refs[ref] = &consumedKeys{}
		}
		return refs[ref]
	}
	items := func(consumed *consumedKeys, items []corev1.KeyToPath) {
		if len(items) == 0 {
			consumed.addAll()
		}
		for _, item := range items {
			consumed.addKey(item.Key)
		}
	}
	containers := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, container := range containers {
		for _, env := range container.Env {
			if env.ValueFrom == nil {
				continue
			}
			if ref := env.ValueFrom.ConfigMapKeyRef; ref != nil {
				of(configMapKind, ref.Name).addKey(ref.Key)
			}
			if ref := env.ValueFrom.SecretKeyRef; ref != nil {
				of(secretKind, ref.Name).addKey(ref.Key)
			}
		}
		for _, from := range container.EnvFrom {
			if from.ConfigMapRef != nil {
				of(configMapKind, from.ConfigMapRef.Name).addAll()
			}
			if from.SecretRef != nil {
				of(secretKind, from.SecretRef.Name).addAll()
			}
		}
	}
	for _, volume := range spec.Volumes {
		if source := volume.ConfigMap; source != nil {
			items(of(configMapKind, source.Name), source.Items)
		}
		if source := volume.Secret; source != nil {
			items(of(secretKind, source.SecretName), source.Items)
		}
		if volume.Projected == nil {
			continue
		}
		for _, source := range volume.Projected.Sources {
			if source.ConfigMap != nil {
				items(of(configMapKind, source.ConfigMap.Name), source.ConfigMap.Items)
			}
			if source.Secret != nil {
				items(of(secretKind, source.Secret.Name), source.Secret.Items)
			}
		}
	}
	return refs
}
